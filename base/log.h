// Structured logging: one line per event, `key=value` pairs after a message.
//
//   TLOG(INFO, "session opened").With("session", id).With("peer", peer);
//
// Lines go to stderr as
//   2026-11-29T23:40:01.123Z I session opened session=7 peer=ipc
// The minimum level is process-wide (SetMinLogLevel); thread-safe. When
// stderr is a journald stream (systemd's JOURNAL_STREAM names it), each line
// starts with its syslog priority, "<3>" for errors, "<4>" warnings, "<6>"
// info, "<7>" debug, which journald takes as the entry's priority (so
// `journalctl -p err` works) and strips.
#ifndef TANDEM_BASE_LOG_H_
#define TANDEM_BASE_LOG_H_

#include <string>
#include "absl/strings/string_view.h"

#include "absl/strings/str_cat.h"

namespace tandem {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void SetMinLogLevel(LogLevel level);
LogLevel MinLogLevel();
// Parses "debug", "info", "warning", "error".
bool ParseLogLevel(absl::string_view text, LogLevel* level);
// The syslog priority of a level (3 error ... 7 debug).
int SyslogPriority(LogLevel level);
// Looks again whether stderr is the journald stream JOURNAL_STREAM names
// (done once on the first line; tests call it after moving stderr).
void DetectJournalStream();

// One log line, written when the object is destroyed.
class LogLine {
 public:
  LogLine(LogLevel level, absl::string_view message);
  ~LogLine();
  LogLine(const LogLine&) = delete;
  LogLine& operator=(const LogLine&) = delete;

  template <typename T>
  LogLine& With(absl::string_view key, const T& value) {
    if (enabled_) absl::StrAppend(&line_, " ", key, "=", value);
    return *this;
  }
  LogLine& With(absl::string_view key, absl::string_view value);
  LogLine& With(absl::string_view key, const std::string& value) { return With(key, absl::string_view(value)); }
  LogLine& With(absl::string_view key, const char* value) { return With(key, absl::string_view(value)); }

 private:
  bool enabled_;
  LogLevel level_;
  std::string line_;
};

}  // namespace tandem

#define TLOG(level, message) ::tandem::LogLine(::tandem::LogLevel::k##level, message)
#define TLOG_DEBUG(message) TLOG(Debug, message)
#define TLOG_INFO(message) TLOG(Info, message)
#define TLOG_WARNING(message) TLOG(Warning, message)
#define TLOG_ERROR(message) TLOG(Error, message)

#endif  // TANDEM_BASE_LOG_H_
