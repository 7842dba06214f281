// tandemd: the composition root. Reads the settings (config files, then
// flags), builds the control loop, the service (devices, memory,
// schedulers, executors), the transport and the metrics endpoint, wires
// them, tells systemd it is ready, and runs the loop until SIGINT or
// SIGTERM. SIGHUP reloads the config files and applies what can change
// while running.
#include <grp.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <map>
#include <memory>
#include <string>

#include <boost/asio/signal_set.hpp>
#include <boost/asio/steady_timer.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/endpoint.h"
#include "base/log.h"
#include "ir/op_registry.h"
#include "server/admin_notify.h"
#include "server/config.h"
#include "server/event_loop.h"
#include "server/fd_socket.h"
#include "server/metrics_http.h"
#include "server/options.h"
#include "server/self_restart.h"
#include "server/service.h"
#include "server/standby.h"
#include "server/transport.h"

namespace tandem::server {
namespace {

constexpr int kExitUsage = 2;  // bad flags or config: a restart would not help
constexpr int kExitFailure = 1;
constexpr int kExitDeviceFault = 75;  // EX_TEMPFAIL: a restart will help

int Fail(int code, absl::string_view message) {
  std::fprintf(stderr, "tandemd: %s\n", std::string(message).c_str());
  return code;
}

// Every op of the registry, one line each: its name, then its aliases.
std::string OpListing() {
  const OpRegistry& registry = OpRegistry::Global();
  std::map<std::string, std::vector<std::string>> names;  // canonical -> aliases
  for (const std::string& name : registry.Names()) {
    const std::string& canonical = registry.Find(name)->name;
    if (name != canonical) names[canonical].push_back(name);
    names.try_emplace(canonical);
  }
  std::string out;
  for (const auto& [name, aliases] : names) {
    absl::StrAppend(&out, name, aliases.empty() ? "" : " ", absl::StrJoin(aliases, " "), "\n");
  }
  return out;
}

// Hands a socket file to `group` (its mode is already 0660).
absl::Status SetSocketGroup(const std::string& path, const std::string& group) {
  if (group.empty() || path.empty()) return absl::OkStatus();
  struct group* g = ::getgrnam(group.c_str());
  if (g == nullptr) return absl::NotFoundError(absl::StrCat("socket_group '", group, "' does not exist"));
  if (::chown(path.c_str(), static_cast<uid_t>(-1), g->gr_gid) != 0) {
    return absl::PermissionDeniedError(absl::StrCat("cannot give ", path, " to group '", group,
                                                    "': ", std::strerror(errno),
                                                    " (run tandemd as a member of the group, or as root)"));
  }
  return absl::OkStatus();
}

// Reloads the config files on SIGHUP: applies the live keys that changed
// since the last load, logs the others as needing a restart. A config that
// does not load leaves everything as it was.
class ConfigReloader {
 public:
  ConfigReloader(DaemonCommandLine command_line, DaemonOptions loaded, Service* service,
                 const SystemdNotifier* notifier)
      : command_line_(std::move(command_line)),
        started_with_(loaded),
        loaded_(std::move(loaded)),
        service_(service),
        notifier_(notifier) {}

  void Reload() {
    notifier_->Reloading();
    absl::StatusOr<DaemonOptions> fresh = LoadDaemonOptions(command_line_);
    if (!fresh.ok()) {
      TLOG_ERROR("config reload failed; the running settings stay").With("error", fresh.status().message());
      service_->OnConfigReload(false);
      notifier_->Ready(service_->StatusLine());
      return;
    }
    std::vector<std::string> live, restart;
    for (const std::string& key : ChangedConfigKeys(loaded_, *fresh)) {
      if (FindConfigKey(key)->live) live.push_back(key);
    }
    for (const std::string& key : ChangedConfigKeys(started_with_, *fresh)) {
      const ConfigKey* k = FindConfigKey(key);
      if (k->live) continue;
      restart.push_back(key);
      TLOG_WARNING("config change needs a restart")
          .With("key", key)
          .With("running", k->get(started_with_))
          .With("configured", k->get(*fresh));
    }
    service_->ApplyLiveOptions(*fresh, live);
    service_->OnConfigReload(true);
    loaded_ = *std::move(fresh);
    TLOG_INFO("config reloaded")
        .With("applied", live.empty() ? "none" : absl::StrJoin(live, ","))
        .With("needs_restart", restart.empty() ? "none" : absl::StrJoin(restart, ","));
    notifier_->Ready(service_->StatusLine());
  }

 private:
  const DaemonCommandLine command_line_;
  const DaemonOptions started_with_;
  DaemonOptions loaded_;
  Service* const service_;
  const SystemdNotifier* const notifier_;
};

int Run(int argc, char** argv) {
  absl::StatusOr<DaemonCommandLine> command_line = ParseDaemonCommandLine(argc, argv);
  if (!command_line.ok()) return Fail(kExitUsage, command_line.status().message());
  if (command_line->help) {
    std::fputs(DaemonUsage().c_str(), stdout);
    return 0;
  }
  if (command_line->list_ops) {
    std::fputs(OpListing().c_str(), stdout);
    return 0;
  }
  if (command_line->version) {
    std::printf("tandemd %s (protocol %d)\n", kDaemonVersion, static_cast<int>(v1::PROTOCOL_VERSION_CURRENT));
    return 0;
  }
  absl::StatusOr<DaemonOptions> loaded = LoadDaemonOptions(*command_line);
  if (!loaded.ok()) return Fail(kExitUsage, loaded.status().message());
  if (command_line->check_config) {
    std::fputs(FormatDaemonOptions(*loaded).c_str(), stdout);
    return 0;
  }
  LogLevel level;
  ParseLogLevel(loaded->log_level, &level);  // validated by the config
  SetMinLogLevel(level);
  // Before any thread or device: the keeper and its standby fork here, and
  // only a worker returns (server/standby.h).
  if (loaded->restart_on_fault && loaded->standby && SelfRestarts() == 0) RunUnderKeeper();
  // Where a start's time goes (the restart after a device fault counts
  // it): from here to "device ready" and "tandemd listening".
  TLOG_INFO("tandemd starting").With("pid", ::getpid()).With("restarts", SelfRestarts());

  DaemonOptions options = *loaded;
  if (options.endpoint.empty()) {
    absl::StatusOr<std::string> endpoint = DaemonDefaultEndpoint();
    if (!endpoint.ok()) return Fail(kExitFailure, endpoint.status().message());
    options.endpoint = *std::move(endpoint);
  }

  EventLoop loop;
  // Signals first: a SIGHUP during a slow device start must not kill the daemon.
  boost::asio::signal_set stop_signals(loop.context(), SIGINT, SIGTERM);
  boost::asio::signal_set reload_signal(loop.context(), SIGHUP);
  AcceptSignals();  // under a keeper they were held until now
  SystemdNotifier notifier;

  std::unique_ptr<ZmqTransport> transport;
  auto service = Service::Create(options, loop, [&transport](std::string peer, std::string payload) {
    transport->Send(std::move(peer), std::move(payload));
  });
  // The devices are open (or failed to open): the GPUs' files the process
  // before a restart held for this one have done their work.
  if (const int held = ReleaseHeldDeviceFiles(); held > 0) {
    TLOG_INFO("GPU device files held across the restart released").With("files", held);
  }
  if (!service.ok()) return Fail(kExitFailure, service.status().message());
  Service* svc = service->get();
  // The metrics endpoint before the transport: once the socket exists (what
  // clients and tests wait for), every listener of the daemon is up.
  std::unique_ptr<MetricsHttpServer> metrics;
  if (options.metrics_port > 0) {
    auto snapshot = std::make_shared<MetricsSnapshot>();
    auto started = MetricsHttpServer::Start(
        {.address = options.metrics_address, .port = options.metrics_port}, snapshot, [&loop, svc, snapshot]() {
          loop.Post("Metrics.Render", [svc, snapshot]() { snapshot->Publish(svc->RenderMetrics()); });
        });
    if (!started.ok()) return Fail(kExitFailure, started.status().message());
    metrics = *std::move(started);
  }

  // The side socket for file descriptors (sealed memfds of shared memory),
  // beside an ipc endpoint; bound before the endpoint, whose socket file is
  // what clients wait for.
  std::unique_ptr<FdSocket> fd_socket;
  if (const std::string ipc = IpcPath(options.endpoint); !ipc.empty()) {
    auto bound = FdSocket::Create(v1::FdSocketPath(ipc), [&loop, svc](ReceivedFd received) {
      loop.Post("FdSocket.OnReceived", [svc, received]() mutable { svc->OnFdReceived(std::move(received)); });
    });
    if (!bound.ok()) return Fail(kExitFailure, bound.status().message());
    fd_socket = *std::move(bound);
    svc->SetFdSocketPath(fd_socket->path());
    if (absl::Status s = SetSocketGroup(fd_socket->path(), options.socket_group); !s.ok()) {
      return Fail(kExitFailure, s.message());
    }
  }

  auto created = ZmqTransport::Create(
      {.endpoint = options.endpoint, .max_message_bytes = options.max_message_bytes},
      [&loop, svc](std::string peer, PeerIdentity identity, std::string payload,
                   std::shared_ptr<const RequestFrames> frames) {
        loop.Post("Transport.OnMessage", [svc, peer = std::move(peer), identity = std::move(identity),
                                          payload = std::move(payload), frames = std::move(frames)]() mutable {
          svc->HandleMessage(peer, identity, std::move(payload), std::move(frames));
        });
      },
      [&loop, svc](std::string peer) {
        loop.Post("Transport.OnPeerGone", [svc, peer = std::move(peer)]() { svc->HandlePeerGone(peer); });
      },
      [&loop, svc]() { loop.Post("Transport.OnDisconnect", [svc]() { svc->HandleConnectionClosed(); }); });
  if (!created.ok()) return Fail(kExitFailure, created.status().message());
  transport = *std::move(created);
  svc->SetQueuedReplyBytes([raw = transport.get()](const std::string& peer) { return raw->QueuedBytes(peer); });
  if (absl::Status s = SetSocketGroup(IpcPath(transport->endpoint()), options.socket_group); !s.ok()) {
    return Fail(kExitFailure, s.message());
  }

  bool stopping = false;
  auto stop = [&]() {
    if (stopping) return;
    stopping = true;
    notifier.Stopping();
    if (metrics) metrics->Stop();
    svc->Shutdown();
    // Shutdown waited for the devices: the completions it let through are
    // queued on the loop now, and the transport then queues every request
    // clients had sent before the signal (each answered UNAVAILABLE). The
    // loop stops after all of them have run, so every request gets its
    // reply and every shared region goes while the devices exist; the
    // transport flushes the replies as it stops.
    transport->DrainThen([&]() {
      loop.Post("Daemon.Stop", [&]() {
        svc->FinishShutdown();
        transport->Stop();
        loop.Stop();
      });
    });
  };
  stop_signals.async_wait([&](const boost::system::error_code& error, int signal) {
    if (error) return;
    TLOG_INFO("shutting down").With("signal", signal == SIGINT ? "SIGINT" : "SIGTERM");
    stop();
  });
  // A device fault: the same stop, then a fresh start (below).
  svc->SetOnDeviceFault([&]() { loop.Post("Daemon.StopAfterFault", stop); });

  ConfigReloader reloader(*command_line, *loaded, svc, &notifier);
  std::function<void()> arm_reload = [&]() {
    reload_signal.async_wait([&](const boost::system::error_code& error, int) {
      if (error) return;
      TLOG_INFO("SIGHUP: reloading the config").With("files", absl::StrJoin(command_line->config_files, ","));
      reloader.Reload();
      arm_reload();
    });
  };
  arm_reload();

  // Idle sessions are swept a few times per timeout (which a reload may change).
  boost::asio::steady_timer sweep(loop.context());
  std::function<void()> arm_sweep = [&]() {
    sweep.expires_after(std::chrono::milliseconds(
        std::max<int64_t>(50, static_cast<int64_t>(svc->options().session_timeout_seconds * 1000 / 4))));
    sweep.async_wait([&](const boost::system::error_code& error) {
      if (error) return;
      svc->ExpireIdleSessions();
      arm_sweep();
    });
  };
  arm_sweep();

  // Checkpoints nobody resumed expire: swept at start, then every ttl/4 (at
  // most hourly, at least every second; a reload may change the ttl).
  boost::asio::steady_timer checkpoint_sweep(loop.context());
  std::function<void()> arm_checkpoint_sweep = [&]() {
    const double every = std::clamp(svc->options().checkpoint_ttl_seconds / 4, 1.0, 3600.0);
    checkpoint_sweep.expires_after(std::chrono::milliseconds(static_cast<int64_t>(every * 1000)));
    checkpoint_sweep.async_wait([&](const boost::system::error_code& error) {
      if (error) return;
      svc->SweepCheckpoints();
      arm_checkpoint_sweep();
    });
  };
  loop.Post("Service.SweepCheckpoints", [&]() { svc->SweepCheckpoints(); });
  arm_checkpoint_sweep();
  boost::asio::steady_timer checkpoint_tick(loop.context());
  std::function<void()> arm_checkpoint_tick = [&]() {
    checkpoint_tick.expires_after(std::chrono::seconds(1));
    checkpoint_tick.async_wait([&](const boost::system::error_code& error) {
      if (error) return;
      svc->CheckpointPausedJobs();
      arm_checkpoint_tick();
    });
  };
  arm_checkpoint_tick();

  // systemd: the watchdog is fed from the loop (a stuck loop stops feeding
  // it), and the status line refreshed.
  std::chrono::microseconds tick = std::chrono::seconds(5);
  if (auto watchdog = notifier.WatchdogInterval()) tick = std::min(tick, *watchdog);
  boost::asio::steady_timer status_timer(loop.context());
  std::function<void()> arm_status = [&]() {
    status_timer.expires_after(tick);
    status_timer.async_wait([&](const boost::system::error_code& error) {
      if (error) return;
      notifier.Watchdog();
      notifier.Status(svc->StatusLine());
      arm_status();
    });
  };
  arm_status();

  TLOG_INFO("tandemd listening")
      .With("endpoint", transport->endpoint())
      .With("devices", absl::StrJoin(svc->DeviceNames(), ","))
      .With("policy", options.policy)
      .With("metrics", metrics ? absl::StrCat(options.metrics_address, ":", metrics->port()) : "off")
      .With("config", command_line->config_files.empty() ? "none" : absl::StrJoin(command_line->config_files, ","))
      .With("pid", ::getpid());
  if (const int restarts = SelfRestarts(); restarts > 0) {
    const std::vector<std::string> suspects = TakeFaultSuspects();
    TLOG_WARNING("tandemd started again after a device fault")
        .With("restarts", restarts)
        .With("suspects", suspects.size());
    svc->SetFaultSuspects(suspects);
  }
  notifier.Ready(svc->StatusLine());
  loop.Run();
  metrics.reset();
  transport.reset();
  fd_socket.reset();
  if (svc->DeviceFaulted()) {
    // The faulted device cannot be used, nor its context destroyed cleanly,
    // by this process: the service is left to the exec (or the exit).
    (void)service->release();
    if (options.restart_on_fault && UnderKeeper()) {
      TLOG_WARNING("tandemd starts again after a device fault").With("by", "standby");
      HandOverToSpare(svc->FaultSuspects());
      std::fflush(nullptr);
      std::_Exit(kExitDeviceFault);
    }
    if (options.restart_on_fault) {
      TLOG_WARNING("tandemd starts again after a device fault").With("by", "exec");
      const absl::Status s = ExecSelf(argv, svc->FaultSuspects());
      TLOG_ERROR("tandemd could not start again").With("error", s.message());
    }
    TLOG_WARNING("tandemd stopped after a device fault").With("exit_status", kExitDeviceFault);
    // The service's threads still run: no static destructors under them.
    std::fflush(nullptr);
    std::_Exit(kExitDeviceFault);
  }
  service->reset();
  TLOG_INFO("tandemd stopped");
  return 0;
}

}  // namespace
}  // namespace tandem::server

int main(int argc, char** argv) { return tandem::server::Run(argc, argv); }
