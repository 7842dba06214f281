// SystemdNotifier for builds without libsystemd: notifications are not sent.
// A Type=notify unit would then time out at start, so say so once.
#include <cstdlib>

#include "base/log.h"
#include "server/admin_notify.h"

namespace tandem::server {
namespace {

void WarnOnce() {
  static const bool warned = [] {
    const char* socket = std::getenv("NOTIFY_SOCKET");
    if (socket != nullptr && socket[0] != '\0') {
      TLOG_WARNING("systemd asked for notifications but tandemd was built without libsystemd; use Type=simple")
          .With("notify_socket", socket);
    }
    return true;
  }();
  (void)warned;
}

}  // namespace

bool SystemdNotifier::enabled() const {
  WarnOnce();
  return false;
}
void SystemdNotifier::Ready(absl::string_view) const { WarnOnce(); }
void SystemdNotifier::Status(absl::string_view) const {}
void SystemdNotifier::Reloading() const {}
void SystemdNotifier::Stopping() const {}
void SystemdNotifier::Watchdog() const {}
std::optional<std::chrono::microseconds> SystemdNotifier::WatchdogInterval() const { return std::nullopt; }

}  // namespace tandem::server
