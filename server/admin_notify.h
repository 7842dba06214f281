// Readiness, status and watchdog notifications to systemd (sd_notify), for
// a daemon started by a Type=notify unit.
//
// When systemd did not start the daemon ($NOTIFY_SOCKET unset) every call is
// a no-op. Built against libsystemd (admin_notify.cc) where the build finds
// it, else against a stand-in that only says, once, that notifications are
// not available (admin_notify_none.cc).
//
// Thread-safety: every method may be called from any thread.
#ifndef TANDEM_SERVER_ADMIN_NOTIFY_H_
#define TANDEM_SERVER_ADMIN_NOTIFY_H_

#include <chrono>
#include <optional>

#include "absl/strings/string_view.h"

namespace tandem::server {

class SystemdNotifier {
 public:
  // True when the service manager listens ($NOTIFY_SOCKET is set) and this
  // build can talk to it.
  bool enabled() const;
  // READY=1 with a STATUS= line: the daemon accepts connections.
  void Ready(absl::string_view status) const;
  // STATUS=: the one-line summary `systemctl status` shows.
  void Status(absl::string_view status) const;
  // RELOADING=1 before a config reload; Ready() again after it.
  void Reloading() const;
  // STOPPING=1 when shutdown begins.
  void Stopping() const;
  // WATCHDOG=1: the control loop is alive.
  void Watchdog() const;
  // How often to call Watchdog(): half the unit's WatchdogSec; nullopt when
  // the watchdog is off.
  std::optional<std::chrono::microseconds> WatchdogInterval() const;
};

}  // namespace tandem::server

#endif  // TANDEM_SERVER_ADMIN_NOTIFY_H_
