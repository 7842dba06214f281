#include "server/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "server/metrics_http.h"

namespace tandem::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::StartsWith;

TEST(Histogram, CountsCumulativelyWithBoundsInclusive) {
  Histogram h({0.1, 1, 10});
  for (double v : {0.05, 0.1, 0.5, 3.0, 20.0}) h.Observe(v);
  EXPECT_THAT(h.CumulativeCounts(), ElementsAre(2, 3, 4));
  EXPECT_EQ(h.count(), 5u);
  EXPECT_DOUBLE_EQ(h.sum(), 23.65);
}

TEST(DecayingSum, FadesWithTheTimeConstant) {
  DecayingSum s;
  s.Add(2, 100, 10);
  EXPECT_DOUBLE_EQ(s.ValueAt(100, 10), 2);
  EXPECT_NEAR(s.ValueAt(110, 10), 2 * std::exp(-1.0), 1e-12);
  s.Add(1, 110, 10);
  EXPECT_NEAR(s.ValueAt(110, 10), 2 * std::exp(-1.0) + 1, 1e-12);
}

TEST(ServiceMeasurements, SharesSplitTheDeviceTimeAndFollowRecentWork) {
  ServiceMeasurements m;
  // Job 1 ran 3 s and job 2 1 s on device 0, at the same moment.
  m.OnIteration(0, 1, 3, 0.5, 1000);
  m.OnIteration(0, 2, 1, 0.1, 1000);
  EXPECT_NEAR(m.GpuTimeShare(0, 1, 1000), 0.75, 1e-9);
  EXPECT_NEAR(m.GpuTimeShare(0, 2, 1000), 0.25, 1e-9);
  // Much later only job 2 runs: its share approaches 1.
  m.OnIteration(0, 2, 1, 0, 1000 + 10 * kShareWindowSeconds);
  EXPECT_GT(m.GpuTimeShare(0, 2, 1000 + 10 * kShareWindowSeconds), 0.99);
  EXPECT_EQ(m.GpuTimeShare(1, 2, 1000), 0);  // a device that ran nothing
  ASSERT_NE(m.Job(1), nullptr);
  EXPECT_DOUBLE_EQ(m.Job(1)->queue_seconds.sum(), 0.5);
  EXPECT_DOUBLE_EQ(m.Device(0)->busy_seconds, 5);
  m.RetainJobs({2});
  EXPECT_EQ(m.Job(1), nullptr);
  EXPECT_NE(m.Job(2), nullptr);
  m.OnError(absl::StatusCode::kNotFound);
  m.OnError(absl::StatusCode::kNotFound);
  EXPECT_EQ(m.errors_by_code().at(absl::StatusCode::kNotFound), 2u);
}

TEST(PrometheusWriter, WritesFamiliesSamplesAndHistograms) {
  PrometheusWriter w;
  w.Family("tandem_x_total", "counter", "things");
  w.Sample("tandem_x_total", {{"device", "cpu"}, {"name", "a \"b\"\\c\nd"}}, 3);
  Histogram h({0.5, 1});
  h.Observe(0.25);
  h.Observe(2);
  w.Family("tandem_t_seconds", "histogram", "times");
  w.HistogramSamples("tandem_t_seconds", {{"job", "7"}}, h);
  EXPECT_EQ(w.text(),
            "# HELP tandem_x_total things\n"
            "# TYPE tandem_x_total counter\n"
            "tandem_x_total{device=\"cpu\",name=\"a \\\"b\\\"\\\\c\\nd\"} 3\n"
            "# HELP tandem_t_seconds times\n"
            "# TYPE tandem_t_seconds histogram\n"
            "tandem_t_seconds_bucket{job=\"7\",le=\"0.5\"} 1\n"
            "tandem_t_seconds_bucket{job=\"7\",le=\"1\"} 1\n"
            "tandem_t_seconds_bucket{job=\"7\",le=\"+Inf\"} 2\n"
            "tandem_t_seconds_sum{job=\"7\"} 2.25\n"
            "tandem_t_seconds_count{job=\"7\"} 2\n");
}

TEST(PrometheusWriter, FormatsValues) {
  EXPECT_EQ(FormatSampleValue(12345678901), "12345678901");
  EXPECT_EQ(FormatSampleValue(0.0025), "0.0025");
  EXPECT_EQ(FormatSampleValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatSampleValue(NAN), "NaN");
}

// One HTTP exchange over a fresh TCP connection; returns the whole response.
std::string HttpExchange(int port, const std::string& request) {
  int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ::inet_pton(AF_INET, "127.0.0.1", &addr.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    ::close(fd);
    return "connect failed";
  }
  (void)!::write(fd, request.data(), request.size());
  std::string response;
  char buf[4096];
  ssize_t n;
  while ((n = ::read(fd, buf, sizeof buf)) > 0) response.append(buf, static_cast<size_t>(n));
  ::close(fd);
  return response;
}

std::string Get(int port, const std::string& path, const std::string& method = "GET") {
  return HttpExchange(port, method + " " + path + " HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
}

TEST(MetricsHttpServer, ServesFreshTextOnEveryScrape) {
  auto snapshot = std::make_shared<MetricsSnapshot>();
  std::atomic<int> renders{0};
  // The refresh publishes at once, as the loop would.
  auto server = MetricsHttpServer::Start({.address = "127.0.0.1", .port = 0}, snapshot, [&]() {
    snapshot->Publish("tandem_scrapes " + std::to_string(++renders) + "\n");
  });
  ASSERT_TRUE(server.ok()) << server.status();
  int port = (*server)->port();
  ASSERT_GT(port, 0);
  std::string first = Get(port, "/metrics");
  EXPECT_THAT(first, StartsWith("HTTP/1.1 200 OK"));
  EXPECT_THAT(first, HasSubstr("Content-Type: text/plain; version=0.0.4; charset=utf-8"));
  EXPECT_THAT(first, HasSubstr("\r\n\r\ntandem_scrapes 1\n"));
  EXPECT_THAT(Get(port, "/metrics?x=1"), HasSubstr("tandem_scrapes 2\n"));
  EXPECT_THAT(Get(port, "/other"), StartsWith("HTTP/1.1 404"));
  EXPECT_THAT(Get(port, "/metrics", "POST"), StartsWith("HTTP/1.1 405"));
  std::string head = Get(port, "/metrics", "HEAD");
  EXPECT_THAT(head, StartsWith("HTTP/1.1 200"));
  EXPECT_THAT(head, ::testing::Not(HasSubstr("tandem_scrapes")));
  EXPECT_THAT(HttpExchange(port, "garbage\r\n\r\n"), ::testing::Not(HasSubstr("tandem_scrapes")));
  // Two requests on one keep-alive connection both get answers.
  std::string two = HttpExchange(port,
                                 "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"
                                 "GET /metrics HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
  EXPECT_THAT(two, HasSubstr("tandem_scrapes"));
  EXPECT_EQ(two.find("HTTP/1.1 200", two.find("HTTP/1.1 200") + 1) != std::string::npos, true) << two;
  (*server)->Stop();
  EXPECT_EQ(Get(port, "/metrics"), "connect failed");
}

TEST(MetricsHttpServer, SlowLoopGetsStaleTextOrUnavailable) {
  auto snapshot = std::make_shared<MetricsSnapshot>();
  auto server = MetricsHttpServer::Start(
      {.address = "127.0.0.1", .port = 0, .fresh_timeout = std::chrono::milliseconds(50)}, snapshot, []() {});
  ASSERT_TRUE(server.ok());
  EXPECT_THAT(Get((*server)->port(), "/metrics"), StartsWith("HTTP/1.1 503"));
  snapshot->Publish("tandem_old 1\n");
  EXPECT_THAT(Get((*server)->port(), "/metrics"), HasSubstr("tandem_old 1"));
}

TEST(MetricsHttpServer, BusyPortIsUnavailable) {
  auto snapshot = std::make_shared<MetricsSnapshot>();
  auto first = MetricsHttpServer::Start({.address = "127.0.0.1", .port = 0}, snapshot, []() {});
  ASSERT_TRUE(first.ok());
  auto second = MetricsHttpServer::Start({.address = "127.0.0.1", .port = (*first)->port()}, snapshot, []() {});
  EXPECT_EQ(second.status().code(), absl::StatusCode::kUnavailable);
  EXPECT_THAT(std::string(second.status().message()), HasSubstr("metrics_port"));
}

}  // namespace
}  // namespace tandem::server
