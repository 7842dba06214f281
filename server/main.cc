// tandemd: the composition root. Parses flags, builds the control loop, the
// service (devices, memory, schedulers, executors) and the transport, wires
// them, and runs the loop until SIGINT or SIGTERM.
#include <unistd.h>

#include <chrono>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>

#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "base/endpoint.h"
#include "base/log.h"
#include "server/event_loop.h"
#include "server/options.h"
#include "server/service.h"
#include "server/transport.h"

ABSL_FLAG(std::string, endpoint, "",
          "ZeroMQ endpoint to listen on (ipc://PATH or tcp://HOST:PORT); default "
          "ipc:///run/tandem/tandemd.sock, or a per-user runtime dir when /run/tandem is not writable");
ABSL_FLAG(std::string, device, "auto", "auto (every GPU, else the CPU), cpu, or cuda");
ABSL_FLAG(std::string, gpus, "", "comma-separated CUDA ordinals to use (default: all)");
ABSL_FLAG(std::string, policy, "fifo", "scheduling policy: fifo, pack, fair, srtf, priority");
ABSL_FLAG(uint64_t, max_message_bytes, uint64_t{256} << 20, "largest request accepted, in bytes");
ABSL_FLAG(double, session_timeout, 30, "seconds without a message after which an idle session ends");
ABSL_FLAG(uint64_t, cpu_memory_mib, 8192, "memory the CPU device offers, in MiB");
ABSL_FLAG(uint64_t, reserve_mib, 0, "device memory kept back per device, in MiB (0: measured at start)");
ABSL_FLAG(int, max_lanes, 4, "most lanes (concurrent arenas and streams) per device");
ABSL_FLAG(uint64_t, max_job_memory_mib, 0, "per-job memory quota in MiB (0: none)");
ABSL_FLAG(std::string, log_level, "info", "debug, info, warning or error");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("tandemd: shares GPUs among deep-learning jobs at iteration granularity");
  absl::ParseCommandLine(argc, argv);
  using tandem::server::DaemonOptions;

  tandem::LogLevel level;
  if (!tandem::ParseLogLevel(absl::GetFlag(FLAGS_log_level), &level)) {
    std::fprintf(stderr, "tandemd: --log_level=%s: expected debug, info, warning or error\n",
                 absl::GetFlag(FLAGS_log_level).c_str());
    return 2;
  }
  tandem::SetMinLogLevel(level);

  DaemonOptions options;
  options.endpoint = absl::GetFlag(FLAGS_endpoint);
  if (options.endpoint.empty()) options.endpoint = tandem::DaemonDefaultEndpoint();
  options.device = absl::GetFlag(FLAGS_device);
  for (absl::string_view part : absl::StrSplit(absl::GetFlag(FLAGS_gpus), ',', absl::SkipEmpty())) {
    int ordinal;
    if (!absl::SimpleAtoi(part, &ordinal) || ordinal < 0) {
      std::fprintf(stderr, "tandemd: --gpus: '%s' is not a GPU ordinal\n", std::string(part).c_str());
      return 2;
    }
    options.gpus.push_back(ordinal);
  }
  options.policy = absl::GetFlag(FLAGS_policy);
  options.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  options.session_timeout_seconds = absl::GetFlag(FLAGS_session_timeout);
  options.cpu_memory_bytes = absl::GetFlag(FLAGS_cpu_memory_mib) << 20;
  options.reserve_bytes = absl::GetFlag(FLAGS_reserve_mib) << 20;
  options.max_lanes = absl::GetFlag(FLAGS_max_lanes);
  options.max_job_bytes = absl::GetFlag(FLAGS_max_job_memory_mib) << 20;
  if (options.session_timeout_seconds <= 0 || options.max_lanes < 1 || options.max_message_bytes < 1024) {
    std::fprintf(stderr, "tandemd: --session_timeout must be > 0, --max_lanes >= 1, --max_message_bytes >= 1024\n");
    return 2;
  }

  tandem::server::EventLoop loop;
  std::unique_ptr<tandem::server::ZmqTransport> transport;
  auto service = tandem::server::Service::Create(options, loop, [&transport](std::string peer, std::string payload) {
    transport->Send(std::move(peer), std::move(payload));
  });
  if (!service.ok()) {
    std::fprintf(stderr, "tandemd: %s\n", std::string(service.status().message()).c_str());
    return 1;
  }
  tandem::server::Service* svc = service->get();
  auto created = tandem::server::ZmqTransport::Create(
      {.endpoint = options.endpoint, .max_message_bytes = options.max_message_bytes},
      [&loop, svc](std::string peer, std::string payload, bool multipart) {
        loop.Post("Transport.OnMessage", [svc, peer = std::move(peer), payload = std::move(payload), multipart]() {
          svc->HandleMessage(peer, payload, multipart);
        });
      },
      [&loop, svc](std::string peer) {
        loop.Post("Transport.OnPeerGone", [svc, peer = std::move(peer)]() { svc->HandlePeerGone(peer); });
      });
  if (!created.ok()) {
    std::fprintf(stderr, "tandemd: %s\n", std::string(created.status().message()).c_str());
    return 1;
  }
  transport = *std::move(created);

  boost::asio::signal_set signals(loop.context(), SIGINT, SIGTERM);
  signals.async_wait([&](const boost::system::error_code& error, int signal) {
    if (error) return;
    TLOG_INFO("shutting down").With("signal", signal == SIGINT ? "SIGINT" : "SIGTERM");
    svc->Shutdown();
    transport->Stop();
    loop.Stop();
  });

  // Idle sessions are swept a few times per timeout.
  boost::asio::steady_timer sweep(loop.context());
  auto period = std::chrono::milliseconds(
      std::max<int64_t>(50, static_cast<int64_t>(options.session_timeout_seconds * 1000 / 4)));
  std::function<void()> arm = [&]() {
    sweep.expires_after(period);
    sweep.async_wait([&](const boost::system::error_code& error) {
      if (error) return;
      svc->ExpireIdleSessions();
      arm();
    });
  };
  arm();

  TLOG_INFO("tandemd listening")
      .With("endpoint", transport->endpoint())
      .With("devices", absl::StrJoin(svc->DeviceNames(), ","))
      .With("policy", options.policy)
      .With("pid", ::getpid());
  loop.Run();
  transport.reset();
  service->reset();
  TLOG_INFO("tandemd stopped");
  return 0;
}
