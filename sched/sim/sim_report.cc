#include "sched/sim/sim_report.h"

#include <cerrno>
#include <cstring>

#include "absl/strings/str_cat.h"

namespace tandem::sched::sim {

void WriteResultJson(const SimResult& r, bool with_jobs, JsonWriter& json) {
  json.BeginObject();
  json.Key("policy").String(r.policy);
  json.Key("jobs").Int(static_cast<int64_t>(r.jobs.size()));
  json.Key("finished").Int(r.finished);
  json.Key("makespan_s").Number(r.makespan);
  json.Key("mean_jct_s").Number(r.mean_jct);
  json.Key("median_jct_s").Number(r.median_jct);
  json.Key("p95_jct_s").Number(r.p95_jct);
  json.Key("end_time_s").Number(r.end_time);
  json.Key("busy_s").Number(r.busy_seconds);
  json.Key("lane_s").Number(r.lane_seconds);
  json.Key("iterations").Int(static_cast<int64_t>(r.iterations));
  json.Key("events").Int(static_cast<int64_t>(r.events));
  json.Key("moves").Int(static_cast<int64_t>(r.moves));
  json.Key("yields").Int(static_cast<int64_t>(r.yields));
  json.Key("lanes_used").Int(r.lanes_used);
  json.Key("cpu_s").Number(r.cpu_seconds);
  json.Key("interference").BeginArray();
  for (const PairInterference& p : r.interference) {
    json.BeginObject();
    json.Key("a").String(p.a);
    json.Key("b").String(p.b);
    json.Key("r").Number(p.r);
    json.Key("samples").Int(static_cast<int64_t>(p.samples));
    json.EndObject();
  }
  json.EndArray();
  if (with_jobs) {
    json.Key("job_results").BeginArray();
    for (const JobResult& j : r.jobs) {
      json.BeginObject();
      json.Key("id").Int(static_cast<int64_t>(j.id));
      json.Key("model").String(j.model);
      json.Key("priority").Int(j.priority);
      json.Key("weight").Number(j.weight);
      json.Key("arrival_s").Number(j.arrival);
      json.Key("first_start_s").Number(j.first_start);
      json.Key("finish_s").Number(j.finish);
      json.Key("iterations").Int(j.iterations);
      json.Key("done").Int(j.done);
      json.Key("solo_iteration_s").Number(j.solo_seconds);
      json.Key("mean_iteration_s").Number(j.mean_iteration_seconds());
      json.Key("final_lane").Int(j.final_lane);
      json.Key("moves").Int(j.moves);
      json.EndObject();
    }
    json.EndArray();
  }
  json.EndObject();
}

void PrintSummary(const SimResult& r, std::FILE* out) {
  std::fprintf(out,
               "policy %-8s jobs %zu finished %d | makespan %.1f s | JCT mean %.1f s median "
               "%.1f s p95 %.1f s\n",
               r.policy.c_str(), r.jobs.size(), r.finished, r.makespan, r.mean_jct, r.median_jct, r.p95_jct);
  std::fprintf(out,
               "  device busy %.1f s, lane-seconds %.1f, lanes used %d, iterations %llu, "
               "moves %llu, yields %llu, events %llu, simulated in %.2f s\n",
               r.busy_seconds, r.lane_seconds, r.lanes_used, static_cast<unsigned long long>(r.iterations),
               static_cast<unsigned long long>(r.moves), static_cast<unsigned long long>(r.yields),
               static_cast<unsigned long long>(r.events), r.cpu_seconds);
  for (const PairInterference& p : r.interference) {
    std::fprintf(out, "  measured r(%s, %s) = %.3f over %llu samples\n", p.a.c_str(), p.b.c_str(), p.r,
                 static_cast<unsigned long long>(p.samples));
  }
}

absl::Status WriteTextFile(const std::string& path, const std::string& text) {
  std::FILE* f = std::fopen(path.c_str(), "w");
  if (f == nullptr) {
    return absl::PermissionDeniedError(absl::StrCat("cannot write ", path, ": ", std::strerror(errno)));
  }
  const size_t written = std::fwrite(text.data(), 1, text.size(), f);
  const bool closed = std::fclose(f) == 0;
  if (written != text.size() || !closed) {
    return absl::DataLossError(absl::StrCat("short write to ", path));
  }
  return absl::OkStatus();
}

}  // namespace tandem::sched::sim
