// SystemdNotifier over libsystemd's sd_notify.
#include <systemd/sd-daemon.h>

#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "server/admin_notify.h"

namespace tandem::server {
namespace {

// A STATUS= value is one line.
std::string OneLine(absl::string_view text) { return absl::StrReplaceAll(text, {{"\n", " "}}); }

}  // namespace

bool SystemdNotifier::enabled() const {
  const char* socket = std::getenv("NOTIFY_SOCKET");
  return socket != nullptr && socket[0] != '\0';
}

void SystemdNotifier::Ready(absl::string_view status) const {
  if (enabled()) sd_notify(0, absl::StrCat("READY=1\nSTATUS=", OneLine(status)).c_str());
}

void SystemdNotifier::Status(absl::string_view status) const {
  if (enabled()) sd_notify(0, absl::StrCat("STATUS=", OneLine(status)).c_str());
}

void SystemdNotifier::Reloading() const {
  if (enabled()) sd_notify(0, "RELOADING=1\nSTATUS=reloading the configuration");
}

void SystemdNotifier::Stopping() const {
  if (enabled()) sd_notify(0, "STOPPING=1\nSTATUS=shutting down");
}

void SystemdNotifier::Watchdog() const {
  if (enabled()) sd_notify(0, "WATCHDOG=1");
}

std::optional<std::chrono::microseconds> SystemdNotifier::WatchdogInterval() const {
  uint64_t usec = 0;
  if (sd_watchdog_enabled(0, &usec) <= 0 || usec == 0) return std::nullopt;
  return std::chrono::microseconds(usec / 2);
}

}  // namespace tandem::server
