#include "server/config.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::server {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

absl::StatusOr<DaemonCommandLine> Parse(std::vector<const char*> args) {
  args.insert(args.begin(), "tandemd");
  return ParseDaemonCommandLine(static_cast<int>(args.size()), args.data());
}

TEST(ConfigText, ReadsKeysCommentsAndBlankLines) {
  DaemonOptions o;
  ASSERT_TRUE(ApplyConfigText("# tandemd\n"
                              "\n"
                              "policy = fair   # weighted shares\n"
                              "  max_job_memory_mib=512\n"
                              "gpus = 0, 2\n"
                              "session_timeout = 2.5\n"
                              "endpoint = ipc:///tmp/x#y.sock\n",
                              "t.conf", &o)
                  .ok());
  EXPECT_EQ(o.policy, "fair");
  EXPECT_EQ(o.max_job_bytes, uint64_t{512} << 20);
  EXPECT_THAT(o.gpus, ElementsAre(0, 2));
  EXPECT_DOUBLE_EQ(o.session_timeout_seconds, 2.5);
  // '#' inside a value (not after whitespace) is part of it.
  EXPECT_EQ(o.endpoint, "ipc:///tmp/x#y.sock");
  EXPECT_EQ(o.device, "auto");  // untouched keys keep their defaults
}

TEST(ConfigText, UnknownKeyNamesTheLineAndSuggests) {
  DaemonOptions o;
  absl::Status s = ApplyConfigText("device = cpu\n# comment\n\npolcy = fair\n", "/etc/tandem/tandemd.conf", &o);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(s.message(), "/etc/tandem/tandemd.conf:4: unknown key 'polcy' (did you mean 'policy'?)");
}

TEST(ConfigText, UnknownKeyWithoutNeighbourHasNoSuggestion) {
  DaemonOptions o;
  absl::Status s = ApplyConfigText("favourite_colour = blue\n", "a.conf", &o);
  EXPECT_EQ(s.message(), "a.conf:1: unknown key 'favourite_colour'");
}

TEST(ConfigText, BadValuesNameLineKeyAndExpectation) {
  struct Case {
    const char* text;
    const char* want;
  };
  for (const Case& c : std::vector<Case>{
           {"policy = fastest", "c.conf:1: policy = fastest: expected one of fifo, pack, fair, srtf, priority"},
           {"max_lanes = 0", "c.conf:1: max_lanes = 0: expected an integer in [1, 64]"},
           {"session_timeout = -3", "c.conf:1: session_timeout = -3: expected seconds > 0"},
           {"gpus = 0,x", "expected comma-separated GPU ordinals ('x' is not one)"},
           {"gpus = 1,1", "each GPU once"},
           {"endpoint = http://x", "expected ipc://PATH or tcp://HOST:PORT"},
           {"metrics_port = 70000", "metrics_port = 70000: expected an integer in [0, 65535]"},
           {"metrics_address = localhost", "expected an IPv4 or IPv6 address"},
           {"socket_group = no-such-group-xyz", "'no-such-group-xyz' does not exist"},
           {"cpu_memory_mib = 12GiB", "cpu_memory_mib = 12GiB: expected an integer"},
           {"just words", "c.conf:1: expected 'key = value', got 'just words'"},
           {"= 3", "expected 'key = value'"},
       }) {
    DaemonOptions o;
    absl::Status s = ApplyConfigText(c.text, "c.conf", &o);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.text;
    EXPECT_THAT(std::string(s.message()), HasSubstr(c.want)) << c.text;
  }
}

TEST(ConfigText, KeySetTwiceIsAnError) {
  DaemonOptions o;
  absl::Status s = ApplyConfigText("policy = fair\nmax_lanes = 2\npolicy = pack\n", "d.conf", &o);
  EXPECT_EQ(s.message(), "d.conf:3: 'policy' is already set on line 1");
}

TEST(ConfigFile, MissingFileIsNotFound) {
  DaemonOptions o;
  absl::Status s = ApplyConfigFile("/nonexistent/tandemd.conf", &o);
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(std::string(s.message()), HasSubstr("/nonexistent/tandemd.conf"));
}

TEST(CommandLine, FlagsOverrideFilesAndLaterFilesOverrideEarlier) {
  char dir_template[] = "/tmp/tandem-config-test-XXXXXX";
  std::string dir = ::mkdtemp(dir_template);
  std::string a = dir + "/a.conf", b = dir + "/b.conf";
  FILE* f = std::fopen(a.c_str(), "w");
  std::fputs("policy = fair\nmax_lanes = 3\nlog_level = debug\n", f);
  std::fclose(f);
  f = std::fopen(b.c_str(), "w");
  std::fputs("max_lanes = 5\n", f);
  std::fclose(f);
  std::string config_a = "--config=" + a;
  auto cl = Parse({config_a.c_str(), "--config", b.c_str(), "--policy=pack", "--device", "cpu"});
  ASSERT_TRUE(cl.ok()) << cl.status();
  auto options = LoadDaemonOptions(*cl);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->policy, "pack");      // the flag wins over a.conf
  EXPECT_EQ(options->max_lanes, 5);        // b.conf wins over a.conf
  EXPECT_EQ(options->log_level, "debug");  // from a.conf
  EXPECT_EQ(options->device, "cpu");
  std::remove(a.c_str());
  std::remove(b.c_str());
  ::rmdir(dir.c_str());
}

TEST(CommandLine, LastFlagWins) {
  auto cl = Parse({"--device=cpu", "--device=cuda"});
  ASSERT_TRUE(cl.ok());
  auto options = LoadDaemonOptions(*cl);
  ASSERT_TRUE(options.ok());
  EXPECT_EQ(options->device, "cuda");
}

TEST(CommandLine, Errors) {
  EXPECT_EQ(Parse({"--polcy=fair"}).status().message(), "--polcy: unknown flag (did you mean --policy?); see --help");
  EXPECT_THAT(std::string(Parse({"--max-lanes=2"}).status().message()), HasSubstr("did you mean --max_lanes?"));
  EXPECT_THAT(std::string(Parse({"fair"}).status().message()), HasSubstr("unexpected argument 'fair'"));
  EXPECT_THAT(std::string(Parse({"--policy"}).status().message()), HasSubstr("--policy needs a value"));
  EXPECT_THAT(std::string(Parse({"--help=yes"}).status().message()), HasSubstr("takes no value"));
  auto cl = Parse({"--max_lanes=0"});
  ASSERT_TRUE(cl.ok());
  EXPECT_EQ(LoadDaemonOptions(*cl).status().message(), "--max_lanes=0: expected an integer in [1, 64]");
  auto missing = Parse({"--config=/nonexistent/x.conf"});
  ASSERT_TRUE(missing.ok());
  EXPECT_EQ(LoadDaemonOptions(*missing).status().code(), absl::StatusCode::kNotFound);
}

TEST(CommandLine, BareSwitches) {
  auto cl = Parse({"--check_config", "--version", "-h"});
  ASSERT_TRUE(cl.ok());
  EXPECT_TRUE(cl->check_config);
  EXPECT_TRUE(cl->version);
  EXPECT_TRUE(cl->help);
}

TEST(Keys, EveryKeyRoundTripsItsDefaultAndIsDocumented) {
  DaemonOptions defaults;
  for (const ConfigKey& key : ConfigKeys()) {
    DaemonOptions o;
    ASSERT_TRUE(key.set(key.get(defaults), &o).ok()) << key.name << " = " << key.get(defaults);
    EXPECT_EQ(key.get(o), key.get(defaults)) << key.name;
    EXPECT_THAT(DaemonUsage(), HasSubstr(std::string("--") + key.name + "=")) << key.name;
  }
  // The formatted settings read back as the same settings.
  DaemonOptions custom;
  custom.policy = "srtf";
  custom.gpus = {1, 3};
  custom.max_job_bytes = uint64_t{7} << 20;
  DaemonOptions read;
  ASSERT_TRUE(ApplyConfigText(FormatDaemonOptions(custom), "formatted", &read).ok());
  EXPECT_TRUE(ChangedConfigKeys(custom, read).empty());
}

TEST(Keys, ChangedKeysListsOnlyDifferences) {
  DaemonOptions a, b;
  b.policy = "fair";
  b.endpoint = "tcp://127.0.0.1:5555";
  EXPECT_THAT(ChangedConfigKeys(a, b), ElementsAre("endpoint", "policy"));
  EXPECT_TRUE(FindConfigKey("policy")->live);
  EXPECT_FALSE(FindConfigKey("endpoint")->live);
  EXPECT_EQ(FindConfigKey("nope"), nullptr);
}

}  // namespace
}  // namespace tandem::server
