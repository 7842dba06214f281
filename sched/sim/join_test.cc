// A job joining does not hold up the jobs already running (the daemon's
// scheduler options: first_iteration_captures, probe_spacing_seconds).
//
// On the GPU a job's first iteration runs op by op, captures its graph and
// makes cuDNN's choices: hundreds of milliseconds (a running ResNet-18's
// slowest iteration took 840 ms while a second job registered). Under PACK,
// that first iteration was a solo probe: every other lane drained for it.
// Now it runs beside the others and is not measured; later probes start at
// most every probe_spacing_seconds, and each goes in segments that take
// turns with the running job (SoloProbes): each turn of the probe lasts a
// fraction of the running job's iteration (probe_turn_fraction), so that
// job waits at most that much longer for any of its iterations.
#include <algorithm>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "sched/sim/simulator.h"
#include "sched/sim/trace_test_util.h"

namespace tandem::sched::sim {
namespace {

constexpr double kJoinAt = 5;
constexpr double kEnd = 20;

ModelCatalog Models() { return CatalogOfSoloMs({{"res18", 6.4}, {"dense", 28.0}}); }

struct Gaps {
  double median = 0;
  double p99 = 0;
  double max = 0;
  int newcomer_yields = 0;        // pauses of the newcomer's segmented probes
  uint64_t newcomer_samples = 0;  // the newcomer's iterations measured beside the running job
};

// The running job's completion gaps from `from` (default: 1 s before the
// join) to `to` (default: the end).
Gaps RunningJobGaps(const std::string& newcomer, bool daemon_options, double from = kJoinAt - 1, double to = kEnd) {
  SimOptions options;
  options.scheduler.policy = "pack";
  if (daemon_options) {
    options.scheduler.first_iteration_captures = true;
    options.scheduler.probe_spacing_seconds = 0.25;
  }
  options.first_iteration_factor = 30;  // 840 ms for the 28 ms job, 192 ms for the 6.4 ms one
  options.record_completion_gaps = true;
  options.window_start_seconds = from;
  options.window_end_seconds = to;
  options.end_seconds = kEnd;
  InterferenceTable table(1.3);
  table.SetAll(1.3);  // side by side pays: after its probes, the newcomer runs beside the running job
  Simulator simulator(options, Models(), table);
  const std::vector<TraceJob> trace = {Job(1, 0, "res18", 100'000'000), Job(2, kJoinAt, newcomer, 100'000'000)};
  absl::StatusOr<SimResult> result = simulator.Run(trace);
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return {};
  std::vector<double> gaps = result->Job(1)->window_gaps;
  EXPECT_GT(gaps.size(), 200u);
  std::sort(gaps.begin(), gaps.end());
  Gaps out{gaps[gaps.size() / 2], gaps[gaps.size() * 99 / 100], gaps.back(), result->Job(2)->yields, 0};
  for (const PairInterference& pair : result->interference) {
    if (pair.a == newcomer && pair.b == "res18") out.newcomer_samples = pair.samples;
  }
  return out;
}

TEST(JoinTest, ANewcomersFirstIterationDoesNotDrainTheRunningJob) {
  for (const std::string newcomer : {"res18", "dense"}) {
    const Gaps before = RunningJobGaps(newcomer, /*daemon_options=*/false);
    const Gaps now = RunningJobGaps(newcomer, /*daemon_options=*/true);
    EXPECT_LE(now.p99, 1.2 * now.median) << newcomer;
    if (newcomer == "res18") {
      // An alike newcomer needs no probe, but its first iteration (192 ms)
      // counted as a measurement beside the running job: r came out 2.04
      // instead of 1.3, and PACK folded the pair into one lane (gaps 2x solo
      // instead of 1.3x).
      EXPECT_GE(before.median, 1.5 * now.median);
      EXPECT_LE(now.max, 3 * now.median);
    } else {
      // A new kind of job is probed, 28 ms alone against the running job's
      // 6.4: whole, each probe held the running job up for 28 ms (4.4x its
      // median). In segments that take turns with it, the probes still
      // measure the newcomer (its solo time, then r beside the running job)
      // and the running job's slowest iteration stays within 3x its median.
      EXPECT_LE(now.max, 3 * now.median);
      EXPECT_GT(now.newcomer_yields, 0);
      EXPECT_GT(now.newcomer_samples, 0u);
      // Without the daemon's options the 840 ms first iteration is the
      // first probe; in segments, it no longer stalls the running job for
      // its whole length either.
      EXPECT_LE(before.max, 3 * before.median);

      // Over the 2 s after the join, where the probes run (the GPU bench's
      // window is as short: registration to the newcomer's 6th step), the
      // p99 too: each probe turn lasts probe_turn_fraction of the running
      // job's iteration (with whole turns of it, p99 and longest were 1.75x
      // and 1.78x the median here).
      const Gaps probing = RunningJobGaps(newcomer, /*daemon_options=*/true, kJoinAt, kJoinAt + 2);
      EXPECT_LE(probing.p99, 1.2 * probing.median);
      EXPECT_LE(probing.max, 1.2 * probing.median);
      EXPECT_GT(probing.newcomer_yields, 0);
    }
  }
}

}  // namespace
}  // namespace tandem::sched::sim
