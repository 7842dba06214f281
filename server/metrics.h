// The daemon's measurements and their Prometheus text form.
//
// ServiceMeasurements holds what the control loop observes as it runs
// (iteration and queue-wait histograms per device and per job, recent
// device time for the GPU-time shares, errors by status code, config
// reloads); the service updates it from its handlers. PrometheusWriter
// renders metric families in the text exposition format (version 0.0.4).
//
// Thread-safety: none. Both live on the control loop; the HTTP endpoint
// (metrics_http.h) gets text rendered on the loop, never the objects.
#ifndef TANDEM_SERVER_METRICS_H_
#define TANDEM_SERVER_METRICS_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace tandem::server {

// A cumulative histogram with fixed upper bounds (+Inf implied).
class Histogram {
 public:
  explicit Histogram(std::vector<double> upper_bounds);
  void Observe(double value);
  const std::vector<double>& upper_bounds() const { return upper_bounds_; }
  // Observations <= upper_bounds()[i], cumulative; one entry per bound.
  std::vector<uint64_t> CumulativeCounts() const;
  uint64_t count() const { return count_; }
  double sum() const { return sum_; }

 private:
  std::vector<double> upper_bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last: above every bound
  uint64_t count_ = 0;
  double sum_ = 0;
};

// Bounds for iteration and queue-wait times: 0.5 ms to 10 s.
std::vector<double> SecondsBuckets();

// A sum whose terms fade with time constant `tau` seconds: the value at t of
// terms v_i added at t_i is sum v_i * exp(-(t - t_i) / tau).
class DecayingSum {
 public:
  void Add(double value, double now_seconds, double tau);
  double ValueAt(double now_seconds, double tau) const;

 private:
  double value_ = 0;
  double at_ = 0;
};

// Time constant of the GPU-time shares.
inline constexpr double kShareWindowSeconds = 30;

struct JobMeasurements {
  Histogram iteration_seconds{SecondsBuckets()};
  Histogram queue_seconds{SecondsBuckets()};
  DecayingSum recent_device_seconds;
};

// Bounds for the device's idle time between two iterations of a lane: 1 us
// to 10 ms.
std::vector<double> GapBuckets();

struct DeviceMeasurements {
  Histogram iteration_seconds{SecondsBuckets()};
  Histogram queue_seconds{SecondsBuckets()};
  double busy_seconds = 0;
  DecayingSum recent_device_seconds;
  // Idle time of a lane's stream between an iteration and the next one,
  // when the next was already waiting as the first finished (so the gap is
  // the runtime's own cost, not a wait for work): switching to another
  // job's iteration, or going on with the same job's.
  Histogram switch_gap_seconds{GapBuckets()};
  Histogram same_job_gap_seconds{GapBuckets()};
};

class ServiceMeasurements {
 public:
  // A successful iteration of `job` on device `device`: its device time and
  // its wait for its turn. `now_seconds` is any monotonic clock in seconds.
  void OnIteration(int device, uint64_t job, double run_seconds, double queue_seconds, double now_seconds);
  // The idle time of a lane between two back-to-back iterations.
  void OnLaneGap(int device, bool switched_job, double gap_seconds);
  void OnError(absl::StatusCode code);
  void OnConfigReload(bool ok);
  // Drops the measurements of jobs not in `live`.
  void RetainJobs(const absl::flat_hash_set<uint64_t>& live);

  // Null when nothing was measured yet.
  const JobMeasurements* Job(uint64_t job) const;
  const DeviceMeasurements* Device(int device) const;
  // The job's part of its device's iteration time over the last
  // ~kShareWindowSeconds; 0 when the device ran nothing lately.
  double GpuTimeShare(int device, uint64_t job, double now_seconds) const;

  const std::map<absl::StatusCode, uint64_t>& errors_by_code() const { return errors_by_code_; }
  uint64_t reloads_ok() const { return reloads_ok_; }
  uint64_t reloads_failed() const { return reloads_failed_; }

 private:
  absl::flat_hash_map<uint64_t, JobMeasurements> jobs_;
  absl::flat_hash_map<int, DeviceMeasurements> devices_;
  std::map<absl::StatusCode, uint64_t> errors_by_code_;
  uint64_t reloads_ok_ = 0;
  uint64_t reloads_failed_ = 0;
};

// Builds a Prometheus text exposition. Call Family() once per metric name,
// then its samples; a family's samples must follow it without another
// family in between.
class PrometheusWriter {
 public:
  using Labels = std::vector<std::pair<std::string, std::string>>;

  // type: "counter", "gauge" or "histogram".
  void Family(absl::string_view name, absl::string_view type, absl::string_view help);
  void Sample(absl::string_view name, const Labels& labels, double value);
  // The _bucket, _sum and _count samples of a histogram family `name`.
  void HistogramSamples(absl::string_view name, const Labels& labels, const Histogram& histogram);
  const std::string& text() const { return text_; }

 private:
  std::string text_;
};

// A label value with backslash, double quote and newline escaped.
std::string EscapeLabelValue(absl::string_view value);
// A sample value: integers exactly, others with 12 significant digits,
// +Inf/-Inf/NaN spelled as Prometheus wants.
std::string FormatSampleValue(double value);

}  // namespace tandem::server

#endif  // TANDEM_SERVER_METRICS_H_
