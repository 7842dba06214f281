// Two mlp_train processes share one tandemd at once: both finish, their
// losses decrease, and each one's losses match an independent
// double-precision computation of the same training to 1e-4 relative.
#include <sys/wait.h>

#include <cmath>
#include <cstdio>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "tests/daemon_process.h"
#include "tests/mlp_reference.h"

namespace tandem::testing {
namespace {

struct TrainerOutput {
  std::vector<double> losses;  // by iteration
  double accuracy = -1;
};

TrainerOutput ParseOutput(const std::string& text, int iterations) {
  TrainerOutput run;
  run.losses.assign(iterations, NAN);
  std::regex iter_re(R"(iter (\d+) loss ([-+0-9.eE]+))");
  std::regex acc_re(R"(final accuracy ([0-9.]+))");
  std::istringstream in(text);
  std::string line;
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, iter_re)) {
      int i = std::stoi(m[1]);
      if (i >= 0 && i < iterations) run.losses[i] = std::stod(m[2]);
    } else if (std::regex_search(line, m, acc_re)) {
      run.accuracy = std::stod(m[1]);
    }
  }
  return run;
}

class TwoJobsTraining : public ::testing::TestWithParam<std::string> {};

TEST_P(TwoJobsTraining, BothMatchDoublePrecisionReference) {
  DaemonProcess daemon({"--policy=" + GetParam()});
  constexpr int kIterations = 40;
  struct Config {
    uint64_t seed;
    int hidden;
    int batch;
  };
  const Config configs[] = {{11, 48, 32}, {23, 64, 24}};
  std::vector<pid_t> pids;
  std::vector<std::string> logs;
  for (const Config& c : configs) {
    std::string log = daemon.dir() + "/mlp-" + std::to_string(c.seed) + ".log";
    logs.push_back(log);
    pids.push_back(
        Spawn({MlpTrainPath(), "--endpoint=" + daemon.endpoint(), "--iterations=" + std::to_string(kIterations),
               "--batch=" + std::to_string(c.batch), "--hidden=" + std::to_string(c.hidden), "--inputs=16",
               "--classes=5", "--layers=2", "--seed=" + std::to_string(c.seed), "--lr=0.05", "--momentum=0.9",
               "--print_every=1", "--inflight=3"},
              log));
  }
  for (size_t k = 0; k < pids.size(); ++k) {
    int status = 0;
    ASSERT_EQ(::waitpid(pids[k], &status, 0), pids[k]);
    std::string out = ReadFile(logs[k]);
    ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out << "\ndaemon log:\n" << daemon.Log();

    const Config& c = configs[k];
    TrainerOutput run = ParseOutput(out, kIterations);
    MlpReferenceOptions ref;
    ref.shape.inputs = 16;
    ref.shape.hidden = c.hidden;
    ref.shape.layers = 2;
    ref.shape.classes = 5;
    ref.batch = c.batch;
    ref.seed = c.seed;
    std::vector<double> want = ReferenceMlpLosses(ref, kIterations);
    for (int i = 0; i < kIterations; ++i) {
      ASSERT_FALSE(std::isnan(run.losses[i])) << "no loss printed for iteration " << i << "\n" << out;
      EXPECT_NEAR(run.losses[i], want[i], 1e-4 * std::abs(want[i])) << "job " << k << " iteration " << i;
    }
    // Learning happened: the loss fell well below its start (ln 5 = 1.61).
    EXPECT_LT(run.losses[kIterations - 1], 0.5 * run.losses[0]);
    EXPECT_GT(run.accuracy, 0.6) << out;  // chance is 0.2
  }
}

INSTANTIATE_TEST_SUITE_P(EveryPolicy, TwoJobsTraining,
                         ::testing::Values("fifo", "fair", "pack", "srtf", "priority", "srtf_pack"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace tandem::testing
