#include "server/metrics.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem::server {

Histogram::Histogram(std::vector<double> upper_bounds)
    : upper_bounds_(std::move(upper_bounds)), counts_(upper_bounds_.size() + 1, 0) {
  std::sort(upper_bounds_.begin(), upper_bounds_.end());
}

void Histogram::Observe(double value) {
  size_t i = std::lower_bound(upper_bounds_.begin(), upper_bounds_.end(), value) - upper_bounds_.begin();
  counts_[i]++;
  count_++;
  sum_ += value;
}

std::vector<uint64_t> Histogram::CumulativeCounts() const {
  std::vector<uint64_t> out(upper_bounds_.size());
  uint64_t running = 0;
  for (size_t i = 0; i < upper_bounds_.size(); ++i) {
    running += counts_[i];
    out[i] = running;
  }
  return out;
}

std::vector<double> GapBuckets() {
  return {1e-6, 2e-6, 5e-6, 1e-5, 2e-5, 5e-5, 1e-4, 2e-4, 5e-4, 1e-3, 2e-3, 5e-3, 1e-2};
}

std::vector<double> SecondsBuckets() {
  return {0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10};
}

void DecayingSum::Add(double value, double now_seconds, double tau) {
  value_ = ValueAt(now_seconds, tau) + value;
  at_ = std::max(at_, now_seconds);
}

double DecayingSum::ValueAt(double now_seconds, double tau) const {
  if (now_seconds <= at_) return value_;
  return value_ * std::exp(-(now_seconds - at_) / tau);
}

void ServiceMeasurements::OnIteration(int device, uint64_t job, double run_seconds, double queue_seconds,
                                      double now_seconds) {
  run_seconds = std::max(0.0, run_seconds);
  queue_seconds = std::max(0.0, queue_seconds);
  DeviceMeasurements& d = devices_[device];
  d.iteration_seconds.Observe(run_seconds);
  d.queue_seconds.Observe(queue_seconds);
  d.busy_seconds += run_seconds;
  d.recent_device_seconds.Add(run_seconds, now_seconds, kShareWindowSeconds);
  JobMeasurements& j = jobs_[job];
  j.iteration_seconds.Observe(run_seconds);
  j.queue_seconds.Observe(queue_seconds);
  j.recent_device_seconds.Add(run_seconds, now_seconds, kShareWindowSeconds);
}

void ServiceMeasurements::OnLaneGap(int device, bool switched_job, double gap_seconds) {
  DeviceMeasurements& d = devices_[device];
  (switched_job ? d.switch_gap_seconds : d.same_job_gap_seconds).Observe(std::max(0.0, gap_seconds));
}

void ServiceMeasurements::OnError(absl::StatusCode code) { errors_by_code_[code]++; }

void ServiceMeasurements::OnConfigReload(bool ok) { (ok ? reloads_ok_ : reloads_failed_)++; }

void ServiceMeasurements::RetainJobs(const absl::flat_hash_set<uint64_t>& live) {
  absl::erase_if(jobs_, [&](const auto& entry) { return !live.contains(entry.first); });
}

const JobMeasurements* ServiceMeasurements::Job(uint64_t job) const {
  auto it = jobs_.find(job);
  return it == jobs_.end() ? nullptr : &it->second;
}

const DeviceMeasurements* ServiceMeasurements::Device(int device) const {
  auto it = devices_.find(device);
  return it == devices_.end() ? nullptr : &it->second;
}

double ServiceMeasurements::GpuTimeShare(int device, uint64_t job, double now_seconds) const {
  const DeviceMeasurements* d = Device(device);
  const JobMeasurements* j = Job(job);
  if (d == nullptr || j == nullptr) return 0;
  double total = d->recent_device_seconds.ValueAt(now_seconds, kShareWindowSeconds);
  if (!(total > 0)) return 0;
  return std::clamp(j->recent_device_seconds.ValueAt(now_seconds, kShareWindowSeconds) / total, 0.0, 1.0);
}

std::string EscapeLabelValue(absl::string_view value) {
  std::string out;
  out.reserve(value.size());
  for (char c : value) {
    if (c == '\\') {
      out += "\\\\";
    } else if (c == '"') {
      out += "\\\"";
    } else if (c == '\n') {
      out += "\\n";
    } else {
      out += c;
    }
  }
  return out;
}

std::string FormatSampleValue(double value) {
  if (std::isnan(value)) return "NaN";
  if (std::isinf(value)) return value > 0 ? "+Inf" : "-Inf";
  if (value == std::floor(value) && std::fabs(value) < 9.007199254740992e15) {
    return absl::StrCat(static_cast<int64_t>(value));
  }
  return absl::StrFormat("%.12g", value);
}

void PrometheusWriter::Family(absl::string_view name, absl::string_view type, absl::string_view help) {
  absl::StrAppend(&text_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
}

namespace {

void AppendLabels(std::string* out, const PrometheusWriter::Labels& labels) {
  if (labels.empty()) return;
  out->push_back('{');
  for (size_t i = 0; i < labels.size(); ++i) {
    absl::StrAppend(out, i > 0 ? "," : "", labels[i].first, "=\"", EscapeLabelValue(labels[i].second), "\"");
  }
  out->push_back('}');
}

}  // namespace

void PrometheusWriter::Sample(absl::string_view name, const Labels& labels, double value) {
  text_.append(name.data(), name.size());
  AppendLabels(&text_, labels);
  absl::StrAppend(&text_, " ", FormatSampleValue(value), "\n");
}

void PrometheusWriter::HistogramSamples(absl::string_view name, const Labels& labels, const Histogram& histogram) {
  std::vector<uint64_t> cumulative = histogram.CumulativeCounts();
  std::string bucket = absl::StrCat(name, "_bucket");
  for (size_t i = 0; i < cumulative.size(); ++i) {
    Labels with_le = labels;
    with_le.emplace_back("le", FormatSampleValue(histogram.upper_bounds()[i]));
    Sample(bucket, with_le, static_cast<double>(cumulative[i]));
  }
  Labels inf = labels;
  inf.emplace_back("le", "+Inf");
  Sample(bucket, inf, static_cast<double>(histogram.count()));
  Sample(absl::StrCat(name, "_sum"), labels, histogram.sum());
  Sample(absl::StrCat(name, "_count"), labels, static_cast<double>(histogram.count()));
}

}  // namespace tandem::server
