#include "base/log.h"
#include "absl/strings/string_view.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/match.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tandem {
namespace {

std::atomic<int> g_min_level{static_cast<int>(LogLevel::kInfo)};
// 1: stderr is journald's stream (lines carry "<priority>"); 0: not; -1: not looked yet.
std::atomic<int> g_journal{-1};

bool StderrIsJournal() {
  const char* stream = std::getenv("JOURNAL_STREAM");  // "<device>:<inode>" of the stream
  if (stream == nullptr) return false;
  struct stat st;
  if (::fstat(STDERR_FILENO, &st) != 0) return false;
  return absl::StrCat(st.st_dev, ":", st.st_ino) == stream;
}

char LevelLetter(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return 'D';
    case LogLevel::kInfo:
      return 'I';
    case LogLevel::kWarning:
      return 'W';
    case LogLevel::kError:
      return 'E';
  }
  return '?';
}

bool NeedsQuotes(absl::string_view v) {
  if (v.empty()) return true;
  for (char c : v) {
    if (c == ' ' || c == '"' || c == '=' || c == '\n') return true;
  }
  return false;
}

}  // namespace

void SetMinLogLevel(LogLevel level) { g_min_level.store(static_cast<int>(level)); }

int SyslogPriority(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug:
      return 7;
    case LogLevel::kInfo:
      return 6;
    case LogLevel::kWarning:
      return 4;
    case LogLevel::kError:
      return 3;
  }
  return 6;
}

void DetectJournalStream() { g_journal.store(StderrIsJournal() ? 1 : 0); }
LogLevel MinLogLevel() { return static_cast<LogLevel>(g_min_level.load()); }

bool ParseLogLevel(absl::string_view text, LogLevel* level) {
  if (absl::EqualsIgnoreCase(text, "debug"))
    *level = LogLevel::kDebug;
  else if (absl::EqualsIgnoreCase(text, "info"))
    *level = LogLevel::kInfo;
  else if (absl::EqualsIgnoreCase(text, "warning"))
    *level = LogLevel::kWarning;
  else if (absl::EqualsIgnoreCase(text, "error"))
    *level = LogLevel::kError;
  else
    return false;
  return true;
}

LogLine::LogLine(LogLevel level, absl::string_view message)
    : enabled_(static_cast<int>(level) >= g_min_level.load()), level_(level) {
  if (!enabled_) return;
  if (g_journal.load(std::memory_order_relaxed) < 0) DetectJournalStream();
  if (g_journal.load(std::memory_order_relaxed) == 1) line_ = absl::StrCat("<", SyslogPriority(level), ">");
  absl::StrAppend(&line_, absl::FormatTime("%Y-%m-%dT%H:%M:%E3SZ", absl::Now(), absl::UTCTimeZone()), " ",
                  std::string(1, LevelLetter(level_)), " ", message);
}

LogLine& LogLine::With(absl::string_view key, absl::string_view value) {
  if (!enabled_) return *this;
  if (NeedsQuotes(value)) {
    std::string quoted;
    for (char c : value) {
      if (c == '"' || c == '\\') quoted.push_back('\\');
      quoted.push_back(c == '\n' ? ' ' : c);
    }
    absl::StrAppend(&line_, " ", key, "=\"", quoted, "\"");
  } else {
    absl::StrAppend(&line_, " ", key, "=", value);
  }
  return *this;
}

LogLine::~LogLine() {
  if (!enabled_) return;
  line_.push_back('\n');
  std::fwrite(line_.data(), 1, line_.size(), stderr);
}

}  // namespace tandem
