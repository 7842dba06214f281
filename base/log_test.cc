// The logger's line format, and the syslog priority prefix it adds when
// stderr is journald's stream.
#include "base/log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem {
namespace {

using ::testing::HasSubstr;
using ::testing::StartsWith;

// Runs `log` with stderr moved to a file; with `journal`, JOURNAL_STREAM
// names that file as systemd names the journal's stream. Returns what was
// written.
template <typename Fn>
std::string CaptureStderr(bool journal, Fn log) {
  char path[] = "/tmp/tandem-log-test-XXXXXX";
  const int fd = ::mkstemp(path);
  EXPECT_GE(fd, 0);
  std::fflush(stderr);
  const int saved = ::dup(STDERR_FILENO);
  ::dup2(fd, STDERR_FILENO);
  struct stat st;
  ::fstat(fd, &st);
  if (journal) {
    ::setenv("JOURNAL_STREAM", absl::StrCat(st.st_dev, ":", st.st_ino).c_str(), 1);
  } else {
    ::unsetenv("JOURNAL_STREAM");
  }
  DetectJournalStream();
  log();
  std::fflush(stderr);
  ::dup2(saved, STDERR_FILENO);
  ::close(saved);
  ::close(fd);
  ::unsetenv("JOURNAL_STREAM");
  DetectJournalStream();
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  ::unlink(path);
  return text.str();
}

TEST(Log, LineHasLevelMessageAndQuotedValues) {
  std::string out = CaptureStderr(false, [] { TLOG_WARNING("disk low").With("free", 3).With("path", "/a b"); });
  EXPECT_THAT(out, HasSubstr(" W disk low free=3 path=\"/a b\"\n"));
  EXPECT_THAT(out, ::testing::Not(StartsWith("<")));
}

TEST(Log, JournalStreamLinesCarryTheirSyslogPriority) {
  std::string out = CaptureStderr(true, [] {
    TLOG_ERROR("broken");
    TLOG_WARNING("odd");
    TLOG_INFO("fine");
  });
  std::istringstream lines(out);
  std::string error, warning, info;
  std::getline(lines, error);
  std::getline(lines, warning);
  std::getline(lines, info);
  EXPECT_THAT(error, StartsWith("<3>"));
  EXPECT_THAT(error, HasSubstr(" E broken"));
  EXPECT_THAT(warning, StartsWith("<4>"));
  EXPECT_THAT(info, StartsWith("<6>"));
}

TEST(Log, AStaleJournalStreamIsIgnored) {
  // JOURNAL_STREAM inherited by a process whose stderr went elsewhere.
  ::setenv("JOURNAL_STREAM", "1:1", 1);
  std::string out = CaptureStderr(false, [] { TLOG_ERROR("elsewhere"); });
  EXPECT_THAT(out, ::testing::Not(StartsWith("<")));
}

TEST(Log, SyslogPriorities) {
  EXPECT_EQ(SyslogPriority(LogLevel::kError), 3);
  EXPECT_EQ(SyslogPriority(LogLevel::kWarning), 4);
  EXPECT_EQ(SyslogPriority(LogLevel::kInfo), 6);
  EXPECT_EQ(SyslogPriority(LogLevel::kDebug), 7);
}

}  // namespace
}  // namespace tandem
