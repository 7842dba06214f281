#include "server/device_journal.h"

#include <string>

#include "gtest/gtest.h"

namespace tandem::server {
namespace {

JournalEntry At(double t, JournalKind kind = JournalKind::kMove, uint64_t job = 1) {
  JournalEntry e;
  e.unix_seconds = t;
  e.kind = kind;
  e.job = job;
  return e;
}

TEST(DeviceJournalTest, KeepsTheNewestEntriesAndCountsTheDropped) {
  DeviceJournal journal(3);
  for (int i = 0; i < 5; ++i) journal.Add(At(100.0 + i, JournalKind::kCapture, static_cast<uint64_t>(i)));
  EXPECT_EQ(journal.size(), 3u);
  EXPECT_EQ(journal.dropped(), 2u);
  const std::vector<JournalEntry> all = journal.Since(0);
  ASSERT_EQ(all.size(), 3u);
  EXPECT_EQ(all[0].job, 2u);
  EXPECT_EQ(all[2].job, 4u);
}

TEST(DeviceJournalTest, SinceKeepsEntriesAtOrAfterTheBound) {
  DeviceJournal journal;
  journal.Add(At(10.0));
  journal.Add(At(11.0, JournalKind::kSlowWait, 2));
  journal.Add(At(12.5, JournalKind::kCapture, 3));
  const std::vector<JournalEntry> late = journal.Since(11.0);
  ASSERT_EQ(late.size(), 2u);
  EXPECT_EQ(late[0].job, 2u);
  EXPECT_EQ(late[1].job, 3u);
  EXPECT_TRUE(journal.Since(13.0).empty());
  EXPECT_EQ(journal.dropped(), 0u);
}

TEST(DeviceJournalTest, NamesEveryKindAndReadsTheSystemClock) {
  EXPECT_EQ(std::string(JournalKindName(JournalKind::kMove)), "move");
  EXPECT_EQ(std::string(JournalKindName(JournalKind::kCapture)), "capture");
  EXPECT_EQ(std::string(JournalKindName(JournalKind::kSlowWait)), "slow_wait");
  EXPECT_EQ(std::string(JournalKindName(JournalKind::kSegmented)), "segmented");
  // After 2020-01-01 and before 2100: seconds since the epoch, not a steady clock's.
  EXPECT_GT(DeviceJournal::UnixNow(), 1.577e9);
  EXPECT_LT(DeviceJournal::UnixNow(), 4.1e9);
}

}  // namespace
}  // namespace tandem::server
