// The C ABI over tandem::client::Client.
#include "client/tandem_c.h"

#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <google/protobuf/util/json_util.h>

#include "absl/strings/str_cat.h"
#include "client/client.h"

using tandem::client::Client;
using tandem::client::HostTensor;

struct tandem_client {
  std::unique_ptr<Client> impl;
};

struct tandem_result {
  std::vector<std::pair<std::string, HostTensor>> tensors;
  double run_seconds = 0;
  double queue_seconds = 0;
};

namespace {

thread_local std::string g_last_error;

int Fail(const absl::Status& status) {
  g_last_error = std::string(status.message());
  return static_cast<int>(status.code());
}

int Fail(absl::StatusCode code, std::string message) { return Fail(absl::Status(code, message)); }

// A tensor's pointers and rank are usable; `what` names it in the error.
absl::Status CheckTensor(const tandem_tensor& t, absl::string_view what) {
  if (t.rank < 0 || (t.rank > 0 && t.shape == nullptr) || (t.nbytes > 0 && t.data == nullptr)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", t.name ? t.name : "", "': bad shape or data pointer"));
  }
  return absl::OkStatus();
}

char* CopyString(const std::string& s) {
  char* out = static_cast<char*>(std::malloc(s.size() + 1));
  std::memcpy(out, s.data(), s.size() + 1);
  return out;
}

template <typename Message>
int ToJson(const Message& message, char** json) {
  std::string out;
  google::protobuf::util::JsonPrintOptions options;
  options.preserve_proto_field_names = true;
  auto status = google::protobuf::util::MessageToJsonString(message, &out, options);
  if (!status.ok()) return Fail(absl::StatusCode::kInternal, std::string(status.message()));
  *json = CopyString(out);
  return 0;
}

}  // namespace

extern "C" {

int tandem_c_api_version(void) { return TANDEM_C_API_VERSION; }
const char* tandem_last_error(void) { return g_last_error.c_str(); }

int tandem_connect(const char* endpoint, const char* client_name, double connect_timeout_seconds, tandem_client** out) {
  tandem::client::ClientOptions options;
  if (endpoint != nullptr) options.endpoint = endpoint;
  if (client_name != nullptr) options.name = client_name;
  if (connect_timeout_seconds > 0) options.connect_timeout = absl::Seconds(connect_timeout_seconds);
  auto client = Client::Connect(options);
  if (!client.ok()) return Fail(client.status());
  *out = new tandem_client{*std::move(client)};
  return 0;
}

void tandem_disconnect(tandem_client* client) { delete client; }

uint64_t tandem_session_id(const tandem_client* client) { return client->impl->session_id(); }

int tandem_register_job(tandem_client* client, const char* request_json, const tandem_tensor* persistent,
                        size_t num_persistent, uint64_t* job_id, char** response_json) {
  tandem::v1::RegisterJobRequest request;
  auto parsed = google::protobuf::util::JsonStringToMessage(request_json, &request);
  if (!parsed.ok()) {
    return Fail(absl::StatusCode::kInvalidArgument, absl::StrCat("request_json: ", std::string(parsed.message())));
  }
  // By reference: each value is copied once, into its message frame.
  std::vector<tandem::client::FeedView> views;
  views.reserve(num_persistent);
  for (size_t i = 0; i < num_persistent; ++i) {
    const tandem_tensor& t = persistent[i];
    if (absl::Status s = CheckTensor(t, "persistent tensor"); !s.ok()) return Fail(s);
    views.push_back({t.name ? t.name : "", static_cast<tandem::v1::DType>(t.dtype),
                     std::vector<int64_t>(t.shape, t.shape + t.rank), t.data, t.nbytes});
  }
  auto response = client->impl->RegisterJob(std::move(request), views);
  if (!response.ok()) return Fail(response.status());
  *job_id = response->job_id();
  if (response_json != nullptr) return ToJson(*response, response_json);
  return 0;
}

int tandem_submit(tandem_client* client, uint64_t job_id, const tandem_tensor* feeds, size_t num_feeds,
                  const char* const* fetches, size_t num_fetches, uint64_t iteration, uint64_t* ticket) {
  return tandem_submit_variant(client, job_id, nullptr, feeds, num_feeds, fetches, num_fetches, iteration, ticket);
}

int tandem_submit_variant(tandem_client* client, uint64_t job_id, const char* variant, const tandem_tensor* feeds,
                          size_t num_feeds, const char* const* fetches, size_t num_fetches, uint64_t iteration,
                          uint64_t* ticket) {
  // Feeds by reference: their bytes are copied once, into the message or
  // the shared-memory region, before this returns.
  std::vector<tandem::client::FeedView> views;
  for (size_t i = 0; i < num_feeds; ++i) {
    const tandem_tensor& t = feeds[i];
    if (absl::Status s = CheckTensor(t, "feed"); !s.ok()) return Fail(s);
    views.push_back({t.name ? t.name : "", static_cast<tandem::v1::DType>(t.dtype),
                     std::vector<int64_t>(t.shape, t.shape + t.rank), t.data, t.nbytes});
  }
  std::vector<std::string> names(fetches, fetches + num_fetches);
  auto t = client->impl->SubmitIteration(job_id, views, names, iteration, variant != nullptr ? variant : "");
  if (!t.ok()) return Fail(t.status());
  *ticket = *t;
  return 0;
}

int tandem_wait(tandem_client* client, uint64_t ticket, tandem_result** out) {
  auto result = client->impl->WaitIteration(ticket);
  if (!result.ok()) return Fail(result.status());
  auto* r = new tandem_result;
  r->run_seconds = result->run_seconds;
  r->queue_seconds = result->queue_seconds;
  for (auto& [name, tensor] : result->fetches) r->tensors.emplace_back(name, std::move(tensor));
  *out = r;
  return 0;
}

int tandem_read_tensor(tandem_client* client, uint64_t job_id, const char* name, tandem_result** out) {
  auto tensor = client->impl->ReadTensor(job_id, name ? name : "");
  if (!tensor.ok()) return Fail(tensor.status());
  auto* r = new tandem_result;
  r->tensors.emplace_back(name, *std::move(tensor));
  *out = r;
  return 0;
}

int tandem_close_job(tandem_client* client, uint64_t job_id) {
  absl::Status s = client->impl->CloseJob(job_id);
  return s.ok() ? 0 : Fail(s);
}

int tandem_stats_json(tandem_client* client, char** json) {
  auto stats = client->impl->Stats();
  if (!stats.ok()) return Fail(stats.status());
  return ToJson(*stats, json);
}

int tandem_list_sessions_json(tandem_client* client, char** json) {
  auto list = client->impl->ListSessions();
  if (!list.ok()) return Fail(list.status());
  return ToJson(*list, json);
}

size_t tandem_result_count(const tandem_result* result) { return result->tensors.size(); }

int tandem_result_tensor(const tandem_result* result, size_t i, tandem_tensor* out) {
  if (i >= result->tensors.size()) {
    return Fail(absl::StatusCode::kOutOfRange, absl::StrCat("result has ", result->tensors.size(), " tensors"));
  }
  const auto& [name, t] = result->tensors[i];
  out->name = name.c_str();
  out->dtype = t.dtype;
  out->shape = t.shape.data();
  out->rank = static_cast<int32_t>(t.shape.size());
  out->data = t.data.data();
  out->nbytes = t.data.size();
  return 0;
}

double tandem_result_run_seconds(const tandem_result* result) { return result->run_seconds; }
double tandem_result_queue_seconds(const tandem_result* result) { return result->queue_seconds; }
void tandem_result_free(tandem_result* result) { delete result; }
void tandem_free_string(char* s) { std::free(s); }

}  // extern "C"
