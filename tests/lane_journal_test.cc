// The device journal through a real tandemd (CPU device): a training job
// that keeps three iterations in flight makes each wait behind the ones
// before it, and the stats reply lists those waits as "slow_wait" events
// of that job with wall-clock times inside the run; nothing moved and
// nothing was captured (one job under FIFO, CPU programs have no graphs).
// Moves and captures are checked on the GPU (tests/gpu/daemon_gpu_test.cc).
// Also the lanes' staging buffers: allocated when a lane opens, grown only
// when an iteration outgrows one; "arena" events, when a lane's arena
// moves because a larger job joined it; and the lanes' warm-up steps.
#include <signal.h>
#include <sys/wait.h>

#include <chrono>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "client/client.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"

namespace tandem::testing {
namespace {

double UnixNow() { return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count(); }

// Runs mlp_train with `flags` through `daemon` to its end (its output in
// <name>.log); fails unless it exits 0.
void Train(DaemonProcess& daemon, const std::string& name, const std::vector<std::string>& flags) {
  std::vector<std::string> argv = {MlpTrainPath(), "--endpoint=" + daemon.endpoint()};
  argv.insert(argv.end(), flags.begin(), flags.end());
  const std::string log = daemon.dir() + "/" + name + ".log";
  const pid_t pid = Spawn(argv, log);
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << ReadFile(log) << "\ndaemon log:\n" << daemon.Log();
}

TEST(LaneJournal, ListsIterationsThatWaitedInTheDaemon) {
  DaemonProcess daemon({"--policy=fifo"});
  const double started = UnixNow();
  // Products of 256 x 512 x 512 per layer: milliseconds per iteration on
  // one core, so the third iteration in flight waits well over 5 ms.
  ASSERT_NO_FATAL_FAILURE(Train(daemon, "mlp",
                                {"--iterations=12", "--batch=256", "--inputs=512", "--hidden=512", "--layers=3",
                                 "--classes=10", "--inflight=3"}));
  const double ended = UnixNow();

  auto client = client::Client::Connect({.endpoint = daemon.endpoint(), .name = "journal-test"});
  ASSERT_TRUE(client.ok()) << client.status();
  auto stats = (*client)->Stats();
  ASSERT_TRUE(stats.ok()) << stats.status();
  ASSERT_GE(stats->devices_size(), 1);
  const v1::DeviceStats& dev = stats->devices(0);
  int waits = 0;
  for (const v1::DeviceEvent& e : dev.events()) {
    EXPECT_NE(e.kind(), "move");
    EXPECT_NE(e.kind(), "capture");
    if (e.kind() != "slow_wait") continue;
    ++waits;
    EXPECT_GT(e.job(), 0u);
    EXPECT_GE(e.lane(), 0);
    EXPECT_EQ(e.from_lane(), -1);
    EXPECT_GE(e.seconds(), 0.005);
    EXPECT_GE(e.unix_seconds(), started);
    EXPECT_LE(e.unix_seconds(), ended);
  }
  EXPECT_GE(waits, 1) << "daemon log:\n" << daemon.Log();
  EXPECT_EQ(dev.events_dropped(), 0u);
}

// Runs mlp_train through `daemon` with one iteration in flight; the device's stats afterwards.
v1::DeviceStats TrainAndReadStats(DaemonProcess& daemon, const std::string& name, int batch) {
  Train(daemon, name,
        {"--iterations=4", "--batch=" + std::to_string(batch), "--inputs=512", "--hidden=32", "--layers=2",
         "--classes=10", "--inflight=1"});
  auto client = client::Client::Connect({.endpoint = daemon.endpoint(), .name = "staging-test"});
  EXPECT_TRUE(client.ok()) << client.status();
  if (!client.ok()) return {};
  auto stats = (*client)->Stats();
  EXPECT_TRUE(stats.ok()) << stats.status();
  if (!stats.ok() || stats->devices_size() == 0) return {};
  return stats->devices(0);
}

// Each lane's staging slots get their page-locked buffers when the lane
// opens (an allocation synchronizes the device, so none happens while
// small models are served): with one iteration in flight only slot 0 of a
// lane is ever used, yet every slot has its buffer. A batch whose feeds
// outgrow a slot (1024 x 512 floats, 2 MiB) grows that one slot, once.
TEST(LaneStaging, BuffersComeWithTheirLaneAndGrowOnlyWhenOutgrown) {
  // Over TCP the client has no shared memory region, so its feeds travel
  // in the iteration's staging slot.
  std::random_device rd;
  const int port = 20000 + static_cast<int>(rd() % 30000);
  DaemonProcess daemon("tcp://127.0.0.1:" + std::to_string(port), {"--policy=fifo", "--max_inflight_per_lane=2"});
  // FIFO places every job in lane 0: one lane of two slots in all.
  const v1::DeviceStats small = TrainAndReadStats(daemon, "small", 16);  // 32 KiB of feeds
  EXPECT_EQ(small.staging_allocations(), 2u);
  const v1::DeviceStats large = TrainAndReadStats(daemon, "large", 1024);
  EXPECT_EQ(large.staging_allocations(), 3u);
}

// A small job trains in lane 0 (the only one); a larger one joins it while
// it runs. Without lane slack the arena fits the small job exactly, so it
// grows for the larger one, and it cannot grow in place at its base (lanes
// sit at the top of the region): the arena moves, which the journal lists
// as an "arena" event naming the larger job, and arena_moves counts. With
// the slack the lane opened at its share (256 MiB here) and stays put.
v1::DeviceStats LargeJoinsSmall(const std::vector<std::string>& flags) {
  DaemonProcess daemon(flags);
  auto client = client::Client::Connect({.endpoint = daemon.endpoint(), .name = "arena-test"});
  EXPECT_TRUE(client.ok()) << client.status();
  if (!client.ok()) return {};
  const pid_t small = Spawn({MlpTrainPath(), "--endpoint=" + daemon.endpoint(), "--iterations=1000000", "--batch=4",
                             "--inputs=64", "--hidden=16", "--layers=1", "--classes=4", "--inflight=1"},
                            daemon.dir() + "/small.log");
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (std::chrono::steady_clock::now() < deadline) {
    auto stats = (*client)->Stats();
    if (stats.ok() && stats->jobs() >= 1) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  Train(
      daemon, "large",
      {"--iterations=3", "--batch=256", "--inputs=512", "--hidden=512", "--layers=2", "--classes=10", "--inflight=1"});
  auto stats = (*client)->Stats();
  ::kill(small, SIGKILL);
  int status = 0;
  ::waitpid(small, &status, 0);
  EXPECT_TRUE(stats.ok()) << stats.status();
  if (!stats.ok() || stats->devices_size() == 0) return {};
  return stats->devices(0);
}

TEST(LaneJournal, ListsALaneArenaThatMovedForALargerJob) {
  const double started = UnixNow();
  const v1::DeviceStats dev =
      LargeJoinsSmall({"--policy=fair", "--max_lanes=1", "--cpu_memory_mib=4096", "--lane_slack_mib=0"});
  EXPECT_EQ(dev.arena_moves(), 1u);
  int arena_events = 0;
  for (const v1::DeviceEvent& e : dev.events()) {
    if (e.kind() != "arena") continue;
    ++arena_events;
    EXPECT_EQ(e.lane(), 0);
    EXPECT_GT(e.job(), 1u) << "the larger job, which registered second";
    EXPECT_GE(e.unix_seconds(), started);
  }
  EXPECT_EQ(arena_events, 1);
}

TEST(LaneJournal, TheLaneSlackKeepsTheArenaInPlace) {
  const v1::DeviceStats dev = LargeJoinsSmall({"--policy=fair", "--max_lanes=1", "--cpu_memory_mib=4096"});
  EXPECT_EQ(dev.arena_moves(), 0u);
  for (const v1::DeviceEvent& e : dev.events()) EXPECT_NE(e.kind(), "arena");
}

// Lane warm-up: under PACK the two jobs of LargeJoinsSmall train in lanes
// of their own (the larger one's closes when it leaves; its executor
// thread stays), and each is readied on the other's lane (once the larger
// one's lane opens, for the small job; after its first iteration, for the
// larger one). CPU programs have nothing to set up per stream, so each
// job's warm-up is one step; the steps are counted all the same.
TEST(LaneWarmUp, ReadiesEachJobOnTheOtherLane) {
  const v1::DeviceStats dev = LargeJoinsSmall({"--policy=pack", "--max_lanes=2", "--cpu_memory_mib=4096"});
  ASSERT_EQ(dev.executors_size(), 2) << "one per lane opened; " << dev.DebugString();
  // One step per job on the other job's lane; none for a job that PACK
  // moved to that lane before its step ran there.
  EXPECT_GE(dev.warm_steps(), 1u);
  EXPECT_LE(dev.warm_steps(), 2u);
}

TEST(LaneWarmUp, NoneWithTheFlagOff) {
  const v1::DeviceStats dev =
      LargeJoinsSmall({"--policy=pack", "--max_lanes=2", "--cpu_memory_mib=4096", "--warm_lanes=false"});
  ASSERT_EQ(dev.executors_size(), 2) << "one per lane opened; " << dev.DebugString();
  EXPECT_EQ(dev.warm_steps(), 0u);
}

}  // namespace
}  // namespace tandem::testing
