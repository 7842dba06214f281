#include "bench/ops/op_report.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"

namespace tandem::bench {
namespace {

std::string JsonString(absl::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<int>(c));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string JsonNumber(double x) { return std::isfinite(x) ? absl::StrFormat("%.10g", x) : "null"; }

std::string JsonNumbers(const std::vector<double>& xs) {
  std::vector<std::string> parts;
  for (double x : xs) parts.push_back(JsonNumber(x));
  return absl::StrCat("[", absl::StrJoin(parts, ", "), "]");
}

const char* Bool(bool b) { return b ? "true" : "false"; }

// TFLOP/s or GB/s of `row` at `ms` per run.
double Rate(const OpRow& row, double ms) {
  if (ms <= 0) return 0.0;
  return row.kind == RowKind::kCompute ? row.flops / (ms * 1e9) : row.bytes / (ms * 1e6);
}

std::string RowJson(const Report& report, const RowResult& r) {
  const OpRow& row = *r.row;
  std::vector<std::string> fields = {
      absl::StrCat("\"name\": ", JsonString(row.name)),
      absl::StrCat("\"op\": ", JsonString(row.op)),
      absl::StrCat("\"kind\": ", JsonString(RowKindName(row.kind))),
      absl::StrCat("\"shapes\": ", JsonString(row.shapes)),
      absl::StrCat("\"flops\": ", JsonNumber(row.flops)),
      absl::StrCat("\"bytes\": ", JsonNumber(row.bytes)),
      absl::StrCat("\"ops_per_run\": ", row.ops_per_run),
  };
  if (!r.error.empty()) {
    fields.push_back("\"ms\": null");
    fields.push_back("\"eager_ms\": null");
    fields.push_back(absl::StrCat("\"error\": ", JsonString(r.error)));
  } else {
    const RowTiming& t = r.timing;
    fields.push_back(absl::StrCat("\"ms\": ", JsonNumber(t.replay.ms)));
    fields.push_back(absl::StrCat("\"eager_ms\": ", JsonNumber(t.eager.ms)));
    fields.push_back(absl::StrCat("\"batch_ms\": ", JsonNumbers(t.replay.batch_ms)));
    fields.push_back(absl::StrCat("\"eager_batch_ms\": ", JsonNumbers(t.eager.batch_ms)));
    fields.push_back(absl::StrCat("\"iterations\": ", t.replay.iterations));
    fields.push_back(absl::StrCat("\"replayed\": ", Bool(t.replayed)));
    const double rate = Rate(row, t.replay.ms);
    if (row.kind == RowKind::kCompute) {
      fields.push_back(absl::StrCat("\"tflops\": ", JsonNumber(rate)));
    } else {
      fields.push_back(absl::StrCat("\"gbs\": ", JsonNumber(rate)));
      const double copy = report.copy_gbs();
      fields.push_back(absl::StrCat("\"copy_fraction\": ", JsonNumber(copy > 0 ? rate / copy : NAN)));
    }
  }
  return absl::StrCat("{", absl::StrJoin(fields, ", "), "}");
}

std::string Line(absl::string_view name, absl::string_view op, const std::string& ms, const std::string& eager_ms,
                 const std::string& rate, const std::string& copy, absl::string_view shapes) {
  return absl::StrFormat("%-28s %-32s %9s %9s %14s %6s  %s", name, op, ms, eager_ms, rate, copy, shapes);
}

}  // namespace

std::string TableHeader() { return Line("row", "op", "ms", "eager ms", "rate", "%copy", "shapes"); }

std::string CopyLine(const Report& report) {
  return Line("copy.d2d", "cudaMemcpyAsync", absl::StrFormat("%.4f", report.copy.ms), "-",
              absl::StrFormat("%.0f GB/s", report.copy_gbs()), "100%",
              absl::StrFormat("%.0f MiB read + written", report.copy_bytes / 2 / (1 << 20)));
}

std::string RowLine(const Report& report, const RowResult& result) {
  const OpRow& row = *result.row;
  if (!result.error.empty()) return Line(row.name, row.op, "-", "-", "failed", "", result.error);
  const RowTiming& t = result.timing;
  const double rate = Rate(row, t.replay.ms);
  std::string rate_text, copy_text;
  if (row.kind == RowKind::kCompute) {
    rate_text = absl::StrFormat("%.3g TFLOP/s", rate);
  } else {
    rate_text = absl::StrFormat("%.0f GB/s", rate);
    const double copy = report.copy_gbs();
    if (copy > 0) copy_text = absl::StrFormat("%.0f%%", 100.0 * rate / copy);
  }
  return Line(row.name, row.op, absl::StrFormat("%.4f", t.replay.ms), absl::StrFormat("%.4f", t.eager.ms), rate_text,
              copy_text, absl::StrCat(row.shapes, t.replayed ? "" : " (capture failed: op by op)"));
}

absl::Status WriteJson(const Report& report, const std::string& path) {
  std::vector<std::string> rows;
  for (const RowResult& r : report.rows) rows.push_back(RowJson(report, r));
  const TimingOptions& o = report.options;
  const std::string meta = absl::StrCat(
      "{\"tool\": \"op_bench\", \"date\": ", JsonString(report.date), ", \"gpu\": ", JsonString(report.gpu),
      ", \"git_commit\": ", report.git_commit.empty() ? "null" : JsonString(report.git_commit),
      ", \"command\": ", JsonString(report.command), ", \"allow_tf32\": ", Bool(report.allow_tf32),
      ", \"small\": ", Bool(report.small), ", \"iterations\": ", o.iterations, ", \"batches\": ", o.batches,
      ", \"batch_ms\": ", JsonNumber(o.batch_ms), "}");
  const std::string copy =
      absl::StrCat("{\"bytes\": ", JsonNumber(report.copy_bytes), ", \"ms\": ", JsonNumber(report.copy.ms),
                   ", \"gbs\": ", JsonNumber(report.copy_gbs()), ", \"batch_ms\": ", JsonNumbers(report.copy.batch_ms),
                   ", \"iterations\": ", report.copy.iterations, "}");
  const std::string text = absl::StrCat("{\"meta\": ", meta, ",\n \"copy\": ", copy, ",\n \"rows\": [\n  ",
                                        absl::StrJoin(rows, ",\n  "), "\n ]}\n");
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) return absl::InternalError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  const bool written = std::fwrite(text.data(), 1, text.size(), f) == text.size();
  const bool closed = std::fclose(f) == 0;
  if (!written || !closed) return absl::InternalError(absl::StrCat("writing ", path, " failed"));
  return absl::OkStatus();
}

}  // namespace tandem::bench
