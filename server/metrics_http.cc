#include "server/metrics_http.h"

#include <boost/asio/ip/tcp.hpp>
#include <boost/beast/core.hpp>
#include <boost/beast/http.hpp>

#include "absl/strings/str_cat.h"
#include "base/log.h"

namespace tandem::server {

namespace asio = boost::asio;
namespace beast = boost::beast;
namespace http = boost::beast::http;
using tcp = boost::asio::ip::tcp;

void MetricsSnapshot::Publish(std::string text) {
  absl::MutexLock lock(&mu_);
  text_ = std::move(text);
  generation_++;
}

uint64_t MetricsSnapshot::generation() const {
  absl::MutexLock lock(&mu_);
  return generation_;
}

std::optional<std::string> MetricsSnapshot::WaitNewer(uint64_t after_generation, std::chrono::milliseconds timeout) {
  absl::MutexLock lock(&mu_);
  auto ready = [this, after_generation]()
                   ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return cancelled_ || generation_ > after_generation; };
  mu_.AwaitWithTimeout(absl::Condition(&ready), absl::FromChrono(timeout));
  if (generation_ == 0) return std::nullopt;
  return text_;
}

void MetricsSnapshot::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_ = true;
}

namespace {

// One client connection: reads requests (keep-alive) and answers each.
class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  HttpConnection(tcp::socket socket, std::shared_ptr<MetricsSnapshot> snapshot, MetricsHttpServer::RefreshFn* refresh,
                 std::chrono::milliseconds fresh_timeout)
      : stream_(std::move(socket)), snapshot_(std::move(snapshot)), refresh_(refresh), fresh_timeout_(fresh_timeout) {}

  void Read() {
    request_ = {};
    parser_.emplace();
    parser_->header_limit(8 * 1024);
    parser_->body_limit(8 * 1024);
    stream_.expires_after(std::chrono::seconds(30));
    http::async_read(stream_, buffer_, *parser_,
                     [self = shared_from_this()](beast::error_code error, size_t) { self->OnRead(error); });
  }

 private:
  void OnRead(beast::error_code error) {
    if (error) {
      // A closed or idle connection, or a malformed request: close it.
      if (error != http::error::end_of_stream && error != beast::error::timeout) {
        TLOG_DEBUG("metrics request dropped").With("error", error.message());
      }
      beast::error_code ignored;
      stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
      return;
    }
    request_ = parser_->release();
    Answer();
  }

  void Answer() {
    response_ = {};
    response_.version(request_.version());
    response_.keep_alive(request_.keep_alive());
    response_.set(http::field::server, "tandemd");
    std::string target(request_.target());
    if (size_t q = target.find('?'); q != std::string::npos) target.resize(q);
    if (request_.method() != http::verb::get && request_.method() != http::verb::head) {
      Text(http::status::method_not_allowed, "only GET and HEAD are served\n");
      response_.set(http::field::allow, "GET, HEAD");
    } else if (target == "/metrics") {
      uint64_t before = snapshot_->generation();
      (*refresh_)();
      std::optional<std::string> text = snapshot_->WaitNewer(before, fresh_timeout_);
      if (!text) {
        Text(http::status::service_unavailable, "tandemd has not rendered its metrics yet; try again\n");
      } else {
        Text(http::status::ok, *std::move(text));
        response_.set(http::field::content_type, "text/plain; version=0.0.4; charset=utf-8");
      }
    } else if (target == "/") {
      Text(http::status::ok, "tandemd: Prometheus metrics at /metrics\n");
    } else {
      Text(http::status::not_found, "not found; the metrics are at /metrics\n");
    }
    if (request_.method() == http::verb::head) {
      size_t length = response_.body().size();
      response_.body().clear();
      response_.content_length(length);
    }
    stream_.expires_after(std::chrono::seconds(30));
    http::async_write(stream_, response_, [self = shared_from_this()](beast::error_code error, size_t) {
      if (error || !self->response_.keep_alive()) {
        beast::error_code ignored;
        self->stream_.socket().shutdown(tcp::socket::shutdown_both, ignored);
        return;
      }
      self->Read();
    });
  }

  void Text(http::status status, std::string body) {
    response_.result(status);
    response_.set(http::field::content_type, "text/plain; charset=utf-8");
    response_.body() = std::move(body);
    response_.prepare_payload();
  }

  beast::tcp_stream stream_;
  beast::flat_buffer buffer_;
  std::optional<http::request_parser<http::string_body>> parser_;
  http::request<http::string_body> request_;
  http::response<http::string_body> response_;
  std::shared_ptr<MetricsSnapshot> snapshot_;
  MetricsHttpServer::RefreshFn* refresh_;
  std::chrono::milliseconds fresh_timeout_;
};

}  // namespace

struct MetricsHttpServer::Impl {
  asio::io_context context;
  tcp::acceptor acceptor{context};
  std::shared_ptr<MetricsSnapshot> snapshot;
  RefreshFn refresh;
  std::chrono::milliseconds fresh_timeout{2000};

  void Accept() {
    acceptor.async_accept([this](beast::error_code error, tcp::socket socket) {
      if (error == asio::error::operation_aborted) return;
      if (!error) {
        std::make_shared<HttpConnection>(std::move(socket), snapshot, &refresh, fresh_timeout)->Read();
      }
      Accept();
    });
  }
};

MetricsHttpServer::MetricsHttpServer(std::unique_ptr<Impl> impl, int port) : impl_(std::move(impl)), port_(port) {}

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(const MetricsHttpOptions& options,
                                                                            std::shared_ptr<MetricsSnapshot> snapshot,
                                                                            RefreshFn refresh) {
  auto impl = std::make_unique<Impl>();
  impl->snapshot = std::move(snapshot);
  impl->refresh = std::move(refresh);
  impl->fresh_timeout = options.fresh_timeout;
  beast::error_code error;
  asio::ip::address address = asio::ip::make_address(options.address, error);
  if (error) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics_address '", options.address, "' is not an IP address: ", error.message()));
  }
  tcp::endpoint endpoint(address, static_cast<unsigned short>(options.port));
  impl->acceptor.open(endpoint.protocol(), error);
  if (!error) impl->acceptor.set_option(asio::socket_base::reuse_address(true), error);
  if (!error) impl->acceptor.bind(endpoint, error);
  if (!error) impl->acceptor.listen(asio::socket_base::max_listen_connections, error);
  if (error) {
    return absl::UnavailableError(absl::StrCat("cannot serve metrics on ", options.address, ":", options.port, ": ",
                                               error.message(), " (set metrics_port to a free port, or 0 for none)"));
  }
  int port = impl->acceptor.local_endpoint().port();
  std::unique_ptr<MetricsHttpServer> server(new MetricsHttpServer(std::move(impl), port));
  server->impl_->Accept();
  server->thread_ = std::thread([raw = server->impl_.get()] { raw->context.run(); });
  return server;
}

void MetricsHttpServer::Stop() {
  if (!thread_.joinable()) return;
  impl_->snapshot->Cancel();
  impl_->context.stop();
  thread_.join();
  beast::error_code ignored;
  impl_->acceptor.close(ignored);
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

}  // namespace tandem::server
