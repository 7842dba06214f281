// The C ABI (client/tandem_c.h) end to end against a real daemon: a job
// registered from JSON, pipelined iterations, reading a tensor back, and
// the error codes and messages of bad calls.
#include <cstring>
#include <string>
#include <vector>

#include "client/tandem_c.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"

namespace tandem::testing {
namespace {

// y = x @ w; w <- w + x^T @ y * 0 + 1 (a visible update: w + ones).
constexpr char kJobJson[] = R"({
  "name": "c-api",
  "graph": {
    "feeds": [{"name": "x", "dtype": "FLOAT32", "shape": ["2", "3"]}],
    "nodes": [
      {"op": "mm", "inputs": ["x", "w"], "outputs": ["y"]},
      {"op": "add.Scalar", "inputs": ["w"], "outputs": ["w_next"], "attrs": {"other": {"f": 1.0}}}
    ],
    "fetches": ["y"],
    "updates": [{"persistent": "w", "value": "w_next"}]
  },
  "persistent": [{"spec": {"name": "w", "dtype": "FLOAT32", "shape": ["3", "2"]}}]
})";

TEST(CApi, RegisterSubmitWaitRead) {
  DaemonProcess daemon;
  EXPECT_EQ(tandem_c_api_version(), TANDEM_C_API_VERSION);
  tandem_client* client = nullptr;
  ASSERT_EQ(tandem_connect(daemon.endpoint().c_str(), "c-test", 5, &client), 0) << tandem_last_error();
  EXPECT_GT(tandem_session_id(client), 0u);

  const float w[6] = {1, 2, 3, 4, 5, 6};
  const int64_t w_shape[2] = {3, 2};
  tandem_tensor persistent{"w", 1, w_shape, 2, w, sizeof(w)};
  uint64_t job = 0;
  char* response = nullptr;
  ASSERT_EQ(tandem_register_job(client, kJobJson, &persistent, 1, &job, &response), 0) << tandem_last_error();
  ASSERT_NE(response, nullptr);
  EXPECT_NE(std::string(response).find("\"fetchable\""), std::string::npos) << response;
  tandem_free_string(response);

  // Two iterations in flight; the second sees w + 1.
  const float x[6] = {1, 0, 0, 0, 1, 1};
  const int64_t x_shape[2] = {2, 3};
  tandem_tensor feed{"x", 1, x_shape, 2, x, sizeof(x)};
  const char* fetch = "y";
  uint64_t t1 = 0, t2 = 0;
  ASSERT_EQ(tandem_submit(client, job, &feed, 1, &fetch, 1, 0, &t1), 0) << tandem_last_error();
  ASSERT_EQ(tandem_submit(client, job, &feed, 1, &fetch, 1, 1, &t2), 0) << tandem_last_error();
  const float want1[4] = {1, 2, 3 + 5, 4 + 6};
  const float want2[4] = {2, 3, 4 + 6, 5 + 7};
  for (auto [ticket, want] : {std::pair{t1, want1}, std::pair{t2, want2}}) {
    tandem_result* result = nullptr;
    ASSERT_EQ(tandem_wait(client, ticket, &result), 0) << tandem_last_error();
    ASSERT_EQ(tandem_result_count(result), 1u);
    tandem_tensor y{};
    ASSERT_EQ(tandem_result_tensor(result, 0, &y), 0);
    EXPECT_STREQ(y.name, "y");
    ASSERT_EQ(y.rank, 2);
    EXPECT_EQ(y.shape[0], 2);
    EXPECT_EQ(y.shape[1], 2);
    ASSERT_EQ(y.nbytes, 16u);
    const float* got = static_cast<const float*>(y.data);
    for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(got[i], want[i]) << i;
    EXPECT_GE(tandem_result_run_seconds(result), 0);
    tandem_result_free(result);
  }

  tandem_result* read = nullptr;
  ASSERT_EQ(tandem_read_tensor(client, job, "w", &read), 0) << tandem_last_error();
  tandem_tensor wt{};
  ASSERT_EQ(tandem_result_tensor(read, 0, &wt), 0);
  ASSERT_EQ(wt.nbytes, sizeof(w));
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(static_cast<const float*>(wt.data)[i], w[i] + 2) << i;
  EXPECT_NE(tandem_result_tensor(read, 1, &wt), 0);
  tandem_result_free(read);

  // Errors carry absl codes and messages.
  EXPECT_EQ(tandem_read_tensor(client, job, "nope", &read), 5);
  EXPECT_NE(std::string(tandem_last_error()).find("nope"), std::string::npos);
  EXPECT_EQ(tandem_close_job(client, job + 100), 5);
  uint64_t bad_job = 0;
  EXPECT_EQ(tandem_register_job(client, "{not json", nullptr, 0, &bad_job, nullptr), 3);

  char* stats = nullptr;
  ASSERT_EQ(tandem_stats_json(client, &stats), 0);
  EXPECT_NE(std::string(stats).find("\"iterations\":\"2\""), std::string::npos) << stats;
  tandem_free_string(stats);
  EXPECT_EQ(tandem_close_job(client, job), 0) << tandem_last_error();
  tandem_disconnect(client);
}

TEST(CApi, ConnectToNoDaemonSaysSo) {
  tandem_client* client = nullptr;
  int code = tandem_connect("ipc:///tmp/tandem-no-such-dir/tandemd.sock", "c-test", 1, &client);
  EXPECT_EQ(code, 14);  // UNAVAILABLE
  EXPECT_NE(std::string(tandem_last_error()).find("not running"), std::string::npos) << tandem_last_error();
}

}  // namespace
}  // namespace tandem::testing
