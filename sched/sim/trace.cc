#include "sched/sim/trace.h"

#include <algorithm>
#include <cmath>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "base/status_macros.h"

namespace tandem::sched::sim {

double TraceRandom::Uniform() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

double TraceRandom::Exponential(double mean) { return -mean * std::log1p(-Uniform()); }

double TraceRandom::LogUniform(double lo, double hi) { return lo * std::exp(Uniform() * std::log(hi / lo)); }

uint64_t TraceRandom::Below(uint64_t n) {
  return n == 0 ? 0 : static_cast<uint64_t>(Uniform() * static_cast<double>(n)) % n;
}

absl::StatusOr<std::vector<TraceJob>> PoissonTrace(const PoissonTraceOptions& options, const ModelCatalog& catalog) {
  if (options.num_jobs < 0 || !(options.load > 0) || options.models.empty() || !(options.min_job_seconds > 0) ||
      options.max_job_seconds < options.min_job_seconds) {
    return absl::InvalidArgumentError(
        "poisson trace needs num_jobs >= 0, load > 0, at least one model and "
        "0 < min_job_seconds <= max_job_seconds");
  }
  TraceRandom random(options.seed);
  std::vector<TraceJob> trace;
  trace.reserve(options.num_jobs);
  double total_solo_seconds = 0;
  for (int i = 0; i < options.num_jobs; ++i) {
    TraceJob job;
    job.id = static_cast<JobId>(i + 1);
    job.model = options.models[random.Below(options.models.size())];
    ASSIGN_OR_RETURN(const ModelSpec* spec, catalog.Find(job.model));
    const double seconds = random.LogUniform(options.min_job_seconds, options.max_job_seconds);
    job.iterations = std::max<int64_t>(1, std::llround(seconds / spec->solo_seconds));
    job.depth = options.depth;
    total_solo_seconds += static_cast<double>(job.iterations) * spec->solo_seconds;
    trace.push_back(std::move(job));
  }
  if (trace.empty()) return trace;
  const double mean_gap = total_solo_seconds / static_cast<double>(trace.size()) / options.load;
  double t = 0;
  for (TraceJob& job : trace) {
    job.arrival_seconds = t;
    t += random.Exponential(mean_gap);
  }
  return trace;
}

absl::StatusOr<std::vector<TraceJob>> SweepTrace(const SweepTraceOptions& options, const ModelCatalog& catalog) {
  if (options.num_jobs < 0 || options.iterations < 1 || options.arrival_spread_seconds < 0) {
    return absl::InvalidArgumentError("sweep trace needs num_jobs >= 0, iterations >= 1, arrival_spread_seconds >= 0");
  }
  RETURN_IF_ERROR(catalog.Find(options.model).status());
  TraceRandom random(options.seed);
  std::vector<TraceJob> trace;
  for (int i = 0; i < options.num_jobs; ++i) {
    TraceJob job;
    job.id = static_cast<JobId>(i + 1);
    job.model = options.model;
    job.iterations = options.iterations;
    job.depth = options.depth;
    job.arrival_seconds = options.arrival_spread_seconds * random.Uniform();
    trace.push_back(std::move(job));
  }
  std::stable_sort(trace.begin(), trace.end(),
                   [](const TraceJob& a, const TraceJob& b) { return a.arrival_seconds < b.arrival_seconds; });
  return trace;
}

namespace {

constexpr char kCsvHeader[] = "id,arrival_s,model,iterations,priority,weight,declared_iterations,think_s,depth,key";

absl::Status FieldError(int line, const char* field, const std::string& text) {
  return absl::InvalidArgumentError(absl::StrCat("trace line ", line, ": bad ", field, " '", text, "'"));
}

}  // namespace

absl::StatusOr<std::vector<TraceJob>> ParseTraceCsv(const std::string& text) {
  std::vector<TraceJob> trace;
  int line_number = 0;
  for (absl::string_view raw : absl::StrSplit(text, '\n')) {
    ++line_number;
    absl::string_view line = absl::StripAsciiWhitespace(raw);
    if (line.empty() || line[0] == '#') continue;
    if (absl::StartsWith(line, "id,")) continue;  // the header
    std::vector<std::string> f = absl::StrSplit(line, ',');
    if (f.size() < 4 || f.size() > 10) {
      return absl::InvalidArgumentError(
          absl::StrCat("trace line ", line_number, ": expected 4 to 10 fields (", kCsvHeader, "), got ", f.size()));
    }
    f.resize(10);
    TraceJob job;
    uint64_t id = 0;
    if (!absl::SimpleAtoi(f[0], &id)) return FieldError(line_number, "id", f[0]);
    job.id = id;
    if (!absl::SimpleAtod(f[1], &job.arrival_seconds)) {
      return FieldError(line_number, "arrival_s", f[1]);
    }
    job.model = f[2];
    if (!absl::SimpleAtoi(f[3], &job.iterations)) {
      return FieldError(line_number, "iterations", f[3]);
    }
    if (!f[4].empty() && !absl::SimpleAtoi(f[4], &job.priority)) {
      return FieldError(line_number, "priority", f[4]);
    }
    if (!f[5].empty() && !absl::SimpleAtod(f[5], &job.weight)) {
      return FieldError(line_number, "weight", f[5]);
    }
    if (!f[6].empty() && !absl::SimpleAtoi(f[6], &job.declared_iterations)) {
      return FieldError(line_number, "declared_iterations", f[6]);
    }
    if (!f[7].empty() && !absl::SimpleAtod(f[7], &job.think_seconds)) {
      return FieldError(line_number, "think_s", f[7]);
    }
    if (!f[8].empty() && !absl::SimpleAtoi(f[8], &job.depth)) {
      return FieldError(line_number, "depth", f[8]);
    }
    job.interference_key = f[9];
    trace.push_back(std::move(job));
  }
  return trace;
}

std::string TraceToCsv(const std::vector<TraceJob>& trace) {
  std::string out = absl::StrCat(kCsvHeader, "\n");
  for (const TraceJob& j : trace) {
    absl::StrAppend(&out, j.id, ",", j.arrival_seconds, ",", j.model, ",", j.iterations, ",", j.priority, ",", j.weight,
                    ",", j.declared_iterations, ",", j.think_seconds, ",", j.depth, ",", j.interference_key, "\n");
  }
  return out;
}

absl::Status ValidateTrace(const std::vector<TraceJob>& trace, const ModelCatalog& catalog) {
  absl::flat_hash_set<JobId> ids;
  for (const TraceJob& j : trace) {
    auto bad = [&](const std::string& what) {
      return absl::InvalidArgumentError(absl::StrCat("trace job ", j.id, ": ", what));
    };
    if (!ids.insert(j.id).second) return bad("duplicate id");
    if (!std::isfinite(j.arrival_seconds) || j.arrival_seconds < 0) {
      return bad("arrival must be a finite time >= 0");
    }
    if (j.iterations < 1) return bad("iterations must be >= 1");
    if (j.depth < 1) return bad("depth must be >= 1");
    if (!std::isfinite(j.think_seconds) || j.think_seconds < 0) return bad("think_s must be >= 0");
    if (j.declared_iterations < -1) return bad("declared_iterations must be -1, 0 or positive");
    if (absl::Status found = catalog.Find(j.model).status(); !found.ok()) {
      return bad(std::string(found.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem::sched::sim
