// The Prometheus endpoint: a small HTTP/1.1 server (Boost.Beast) on its own
// thread that answers GET /metrics with the latest text the control loop
// published.
//
// The server never touches loop state. For each scrape it calls `refresh`
// (which posts a render to the loop; the loop Publish()es fresh text into
// the MetricsSnapshot) and waits up to `fresh_timeout` for text newer than
// the scrape; if the loop is slow it serves the last text it has, or 503
// when there is none yet. Other paths get 404, other methods 405.
//
// Thread-safety: MetricsSnapshot is thread-safe. MetricsHttpServer's Stop()
// and destructor from any thread except its own.
#ifndef TANDEM_SERVER_METRICS_HTTP_H_
#define TANDEM_SERVER_METRICS_HTTP_H_

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"

namespace tandem::server {

// The latest rendered metrics text, handed from the loop to the HTTP thread.
class MetricsSnapshot {
 public:
  // Stores `text` as the newest; wakes waiters.
  void Publish(std::string text);
  // The generation of the newest text (0: none yet).
  uint64_t generation() const;
  // Waits until text newer than `after_generation` exists, the timeout ends
  // or Cancel() is called; returns the newest text then (nullopt: none).
  std::optional<std::string> WaitNewer(uint64_t after_generation, std::chrono::milliseconds timeout);
  // Wakes every waiter now and from then on returns at once.
  void Cancel();

 private:
  mutable absl::Mutex mu_;
  std::string text_ ABSL_GUARDED_BY(mu_);
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
};

struct MetricsHttpOptions {
  std::string address = "127.0.0.1";
  int port = 9464;  // 0: any free port (see port())
  std::chrono::milliseconds fresh_timeout{2000};
};

class MetricsHttpServer {
 public:
  using RefreshFn = std::function<void()>;

  // Binds and starts the server thread. UNAVAILABLE when the port is taken.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const MetricsHttpOptions& options,
                                                                  std::shared_ptr<MetricsSnapshot> snapshot,
                                                                  RefreshFn refresh);
  ~MetricsHttpServer();

  int port() const { return port_; }
  void Stop();

 private:
  struct Impl;
  explicit MetricsHttpServer(std::unique_ptr<Impl> impl, int port);

  std::unique_ptr<Impl> impl_;
  const int port_;
  std::thread thread_;
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_METRICS_HTTP_H_
