#include "tests/fault_device.h"

#include <cstdint>
#include <vector>

#include "client/client.h"
#include "client/graph_builder.h"

namespace tandem::testing {

absl::Status FaultTheDevice(const std::string& endpoint) {
  auto c = client::Client::Connect({.endpoint = endpoint, .name = "faulty"});
  if (!c.ok()) return c.status();
  client::GraphBuilder g("faulty");
  const std::string x = g.Feed("x", v1::FLOAT32, {4});
  const std::string trigger = g.Feed("trigger", v1::INT64, {});
  const std::string w = g.Persistent("w", client::HostTensor::Floats({4}, std::vector<float>(4, 0.0f)));
  const std::string y = g.Op("test_fault", {w, trigger});
  g.Update(w, g.Op("add.Tensor", {y, x}));
  g.Fetch(y);
  auto job = (*c)->RegisterJob(std::move(g).Build());
  if (!job.ok()) return job.status();
  auto r = (*c)->RunIteration(job->job_id(),
                              {{"x", client::HostTensor::Floats({4}, std::vector<float>(4, 1.0f))},
                               {"trigger", client::HostTensor::Int64s({}, std::vector<int64_t>{1})}},
                              {y});
  return r.ok() ? absl::InternalError("test_fault did not fault the device") : absl::OkStatus();
}

}  // namespace tandem::testing
