// What op_bench prints and writes: one line per row as it is measured, and
// a JSON file with every row (the format bench/ops/compare.py reads).
//
// JSON layout:
//   {"meta": {"tool": "op_bench", "date", "gpu", "git_commit", "command",
//             "allow_tf32", "small", "iterations", "batches", "batch_ms"},
//    "copy": {"bytes", "ms", "gbs", "batch_ms": [...], "iterations"},
//    "rows": [{"name", "op", "kind", "shapes", "flops", "bytes",
//              "ms", "eager_ms", "batch_ms": [...], "eager_batch_ms": [...],
//              "iterations", "replayed", "tflops" | "gbs", "copy_fraction",
//              "error"}]}
// `ms` is the median graph-replay time per run, `eager_ms` op by op;
// `bytes` counts what the op reads plus what it writes (the copy: 2x its
// size); `copy_fraction` = the row's GB/s / the copy's GB/s. A row that
// failed has "error" and null times. Plain functions; thread-compatible.
#ifndef TANDEM_BENCH_OPS_OP_REPORT_H_
#define TANDEM_BENCH_OPS_OP_REPORT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "bench/ops/op_rows.h"
#include "bench/ops/op_timer.h"

namespace tandem::bench {

struct RowResult {
  const OpRow* row = nullptr;
  RowTiming timing;
  std::string error;  // empty when timed
};

struct Report {
  std::string date, gpu, git_commit, command;
  bool allow_tf32 = false;
  bool small = false;
  TimingOptions options;
  double copy_bytes = 0;  // read + written by one copy
  Timing copy;
  std::vector<RowResult> rows;

  double copy_gbs() const { return copy.ms > 0 ? copy_bytes / (copy.ms * 1e6) : 0.0; }
};

std::string TableHeader();
std::string CopyLine(const Report& report);
std::string RowLine(const Report& report, const RowResult& result);

// Writes `report` as JSON to `path`; INTERNAL naming the path when it
// cannot be written.
absl::Status WriteJson(const Report& report, const std::string& path);

}  // namespace tandem::bench

#endif  // TANDEM_BENCH_OPS_OP_REPORT_H_
