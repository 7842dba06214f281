// op_bench: the CUDA backend's ops one by one, at the shapes of the
// reference models (op_rows.h), each timed as a one-op Tandem graph on the
// first GPU: CUDA graph replay (how the daemon runs iterations) and op by
// op. bench/ops/torch_ops.py times the same rows with PyTorch's own ops and
// bench/ops/compare.py puts the two side by side (run_op_bench.sh does all
// three).
//
//   op_bench --out=/tmp/out/tandem_ops.json            # every row, ~1 minute on an H200
//   op_bench --rows=conv,bn --iterations=20            # rows whose name holds "conv" or "bn"
//   op_bench --rows=conv --first_use=3                  # host cost of each row's first iteration on other streams
//   op_bench --small --cpu_check                       # tiny rows on the CPU oracle; no GPU needed
//
// Compute rows (matrix products, convolutions) are rated in TFLOP/s; memory
// rows (everything else) in GB/s of bytes read + written, next to the
// bandwidth of a device-to-device copy measured in the same run. float32
// throughout; TF32 only in convolutions and only with --allow_tf32.
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "bench/ops/op_report.h"
#include "bench/ops/op_rows.h"
#include "bench/ops/op_timer.h"
#include "gtest/gtest.h"
#include "tests/gpu/gpu_test_util.h"

ABSL_FLAG(std::string, out, "", "write the results as JSON to this path");
ABSL_FLAG(std::string, rows, "", "comma-separated substrings; run only rows whose name contains one of them");
ABSL_FLAG(int, iterations, 0, "iterations per timed batch (0: enough for about --batch_ms per batch)");
ABSL_FLAG(int, batches, 5, "timed batches per row; a row's time is their median");
ABSL_FLAG(double, batch_ms, 20.0, "target length of a timed batch when --iterations is 0");
ABSL_FLAG(bool, allow_tf32, false, "set allow_tf32 on convolution and convolution_backward nodes");
ABSL_FLAG(bool, small, false, "tiny shapes (the sizes of torch_ops.py --small)");
ABSL_FLAG(bool, cpu_check, false, "run every selected row once on the CPU oracle instead of timing it");
ABSL_FLAG(std::string, log_level, "info", "debug, info, warning or error (debug: each convolution's cuDNN choice)");
ABSL_FLAG(int, first_use, 0,
          "instead of timing, N > 0: each row's first-iteration host cost on its own stream and then on N other "
          "streams that ran the rows before it (a job's first iteration in a lane of the daemon)");
ABSL_FLAG(bool, list, false, "print the selected rows (name, op, kind, flops, bytes, shapes) and exit");

namespace {

namespace tb = tandem::bench;

bool Selected(absl::string_view name, const std::vector<std::string>& filters) {
  if (filters.empty()) return true;
  for (const std::string& f : filters) {
    if (absl::StrContains(name, f)) return true;
  }
  return false;
}

int CheckOnCpu(const std::vector<const tb::OpRow*>& rows) {
  const std::string out = absl::GetFlag(FLAGS_out);
  int failed = 0;
  for (const tb::OpRow* row : rows) {
    absl::Status s = tb::CheckRowOnCpu(*row, tandem::gpu_test::Rng());
    std::printf("%-28s %s\n", row->name.c_str(), s.ok() ? "ok" : s.ToString().c_str());
    if (!s.ok()) ++failed;
  }
  std::printf("cpu check: %zu rows, %d failed\n", rows.size(), failed);
  return failed == 0 ? 0 : 1;
}

// --first_use: one line per row, host ms of the first enqueue on the row's
// stream, on each of the other streams, and of a replay; JSON to --out.
int FirstUse(const std::vector<const tb::OpRow*>& rows, int other_streams, const std::string& out) {
  tandem::device::Device* gpu = tandem::gpu_test::Gpu();
  std::vector<std::unique_ptr<tandem::device::Stream>> owned;
  std::vector<tandem::device::Stream*> streams;
  for (int i = 0; i < other_streams; ++i) {
    absl::StatusOr<std::unique_ptr<tandem::device::Stream>> s = gpu->CreateStream();
    if (!s.ok()) {
      std::fprintf(stderr, "op_bench: %s\n", s.status().ToString().c_str());
      return 1;
    }
    streams.push_back(s->get());
    owned.push_back(*std::move(s));
  }
  absl::StatusOr<std::unique_ptr<tb::FeedFiller>> filler = tb::FeedFiller::Create(tandem::gpu_test::TestSeed());
  if (!filler.ok()) {
    std::fprintf(stderr, "op_bench: %s\n", filler.status().ToString().c_str());
    return 1;
  }
  std::printf("%-28s %10s %s  %s   (host ms of Program::Enqueue; the first row's other streams are new)\n", "row",
              "first", "other streams", "replay");
  std::string json;
  int failed = 0;
  for (const tb::OpRow* row : rows) {
    absl::StatusOr<tb::FirstUse> use = tb::TimeFirstUse(*row, **filler, streams);
    if (!use.ok()) {
      std::printf("%-28s FAILED %s\n", row->name.c_str(), use.status().ToString().c_str());
      ++failed;
      continue;
    }
    std::string others;
    for (double ms : use->other_ms) absl::StrAppend(&others, absl::StrFormat(" %8.3f", ms));
    std::printf("%-28s %10.3f %s  %8.3f\n", row->name.c_str(), use->first_ms, others.c_str(), use->replay_ms);
    std::fflush(stdout);
    absl::StrAppend(&json, json.empty() ? "" : ",\n",
                    absl::StrFormat(R"(  {"row": "%s", "first_ms": %.4f, )", row->name, use->first_ms),
                    R"("other_ms": [)", absl::StrJoin(use->other_ms, ", "), "], ",
                    absl::StrFormat(R"("replay_ms": %.4f})", use->replay_ms));
  }
  std::printf("op_bench --first_use: %zu rows, %d failed\n", rows.size(), failed);
  if (!out.empty()) {
    const char* commit = std::getenv("TANDEM_GIT_COMMIT");
    std::FILE* f = std::fopen(out.c_str(), "w");
    if (f == nullptr) {
      std::fprintf(stderr, "op_bench: cannot write %s\n", out.c_str());
      return 1;
    }
    std::fprintf(f, "{\"gpu\": \"%s\", \"git_commit\": \"%s\", \"other_streams\": %d, \"rows\": [\n%s\n]}\n",
                 gpu->info().description.c_str(), commit != nullptr ? commit : "", other_streams, json.c_str());
    std::fclose(f);
  }
  return failed == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
#ifndef NDEBUG
  std::fprintf(stderr, "op_bench: WARNING: built without optimization (NDEBUG unset); timings are not meaningful\n");
#endif
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() > 1) {
    std::fprintf(stderr, "op_bench: unexpected argument '%s' (flags are --name=value)\n", args[1]);
    return 2;
  }
  tandem::LogLevel level;
  if (!tandem::ParseLogLevel(absl::GetFlag(FLAGS_log_level), &level)) {
    std::fprintf(stderr, "op_bench: unknown --log_level '%s'\n", absl::GetFlag(FLAGS_log_level).c_str());
    return 2;
  }
  tandem::SetMinLogLevel(level);
  const bool small = absl::GetFlag(FLAGS_small);
  const bool allow_tf32 = absl::GetFlag(FLAGS_allow_tf32);
  const tb::OpBenchDims dims = small ? tb::OpBenchDims::Small() : tb::OpBenchDims::Full();
  const std::vector<tb::OpRow> all_rows = tb::BuildOpRows(dims, allow_tf32);
  if (::testing::UnitTest::GetInstance()->ad_hoc_test_result().Failed()) {
    std::fprintf(stderr, "op_bench: the op registry rejected a row's graph (messages above)\n");
    return 1;
  }
  std::vector<std::string> filters;
  for (absl::string_view f : absl::StrSplit(absl::GetFlag(FLAGS_rows), ',', absl::SkipEmpty())) {
    filters.emplace_back(f);
  }
  std::vector<const tb::OpRow*> rows;
  for (const tb::OpRow& row : all_rows) {
    if (Selected(row.name, filters)) rows.push_back(&row);
  }
  if (absl::GetFlag(FLAGS_list)) {
    for (const tb::OpRow* row : rows) {
      std::printf("%-28s %-32s %-8s %16.10g %16.10g  %s\n", row->name.c_str(), row->op.c_str(),
                  tb::RowKindName(row->kind), row->flops, row->bytes, row->shapes.c_str());
    }
    return 0;
  }
  if (absl::GetFlag(FLAGS_cpu_check)) return CheckOnCpu(rows);

  if (tandem::gpu_test::Gpu() == nullptr) {
    std::fprintf(stderr, "op_bench: no CUDA device; nothing to time (--cpu_check runs the rows on the CPU)\n");
    return 2;
  }
  if (const int n = absl::GetFlag(FLAGS_first_use); n > 0) return FirstUse(rows, n, absl::GetFlag(FLAGS_out));
  tb::TimingOptions options;
  options.iterations = absl::GetFlag(FLAGS_iterations);
  options.batches = absl::GetFlag(FLAGS_batches);
  options.batch_ms = absl::GetFlag(FLAGS_batch_ms);

  tb::Report report;
  report.date = absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::Now(), absl::UTCTimeZone());
  report.gpu = tandem::gpu_test::Gpu()->info().description;
  if (const char* commit = std::getenv("TANDEM_GIT_COMMIT")) report.git_commit = commit;
  report.command = absl::StrJoin(argv, argv + argc, " ");
  report.allow_tf32 = allow_tf32;
  report.small = small;
  report.options = options;

  absl::StatusOr<tb::Timing> copy = tb::TimeDeviceCopy(dims.copy_bytes, options);
  if (!copy.ok()) {
    std::fprintf(stderr, "op_bench: the reference copy failed: %s\n", copy.status().ToString().c_str());
    return 1;
  }
  report.copy_bytes = 2.0 * static_cast<double>(dims.copy_bytes);  // read + written
  report.copy = *copy;
  std::printf("%s\n", tb::TableHeader().c_str());
  std::printf("%s\n", tb::CopyLine(report).c_str());
  std::fflush(stdout);

  absl::StatusOr<std::unique_ptr<tb::FeedFiller>> filler = tb::FeedFiller::Create(tandem::gpu_test::TestSeed());
  if (!filler.ok()) {
    std::fprintf(stderr, "op_bench: %s\n", filler.status().ToString().c_str());
    return 1;
  }
  const std::string out = absl::GetFlag(FLAGS_out);
  int failed = 0;
  for (const tb::OpRow* row : rows) {
    tb::RowResult result;
    result.row = row;
    absl::StatusOr<tb::RowTiming> timing = tb::TimeRow(*row, **filler, options);
    if (timing.ok()) {
      result.timing = *timing;
    } else {
      result.error = timing.status().ToString();
      ++failed;
    }
    std::printf("%s\n", tb::RowLine(report, result).c_str());
    std::fflush(stdout);
    report.rows.push_back(std::move(result));
    // Rewritten after every row, so that a run stopped by a time limit keeps
    // the rows it measured.
    if (!out.empty()) tb::WriteJson(report, out).IgnoreError();
  }
  std::printf("op_bench: %zu rows, %d failed\n", rows.size(), failed);
  if (!out.empty()) {
    absl::Status written = tb::WriteJson(report, out);
    if (!written.ok()) {
      std::fprintf(stderr, "op_bench: %s\n", written.ToString().c_str());
      return 1;
    }
    std::printf("op_bench: wrote %s\n", out.c_str());
  }
  return failed == 0 ? 0 : 1;
}
