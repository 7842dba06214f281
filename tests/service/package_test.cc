// The .deb: built with CPack from this build tree, inspected with dpkg-deb,
// unpacked into a scratch root, and its daemon and config run from there.
#include <sys/stat.h>

#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/daemon_process.h"
#include "tests/service/service_test_util.h"

namespace tandem::testing {
namespace {

using ::testing::HasSubstr;

bool Exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

TEST(PackageTest, DebInstallsTheDaemonCliLibraryUnitsAndConfig) {
  if (!Exists("/usr/bin/dpkg-deb")) GTEST_SKIP() << "dpkg-deb is not installed; the .deb was not built";
  std::string dir = MakeTempDir();
  ProcessResult cpack = RunProcess(
      {CMAKE_CPACK_COMMAND, "-G", "DEB", "--config", TANDEM_BINARY_DIR "/CPackConfig.cmake", "-B", dir + "/out"}, {},
      600);
  ASSERT_EQ(cpack.exit_code, 0) << cpack.out << cpack.err;
  ProcessResult find = RunProcess({"/bin/sh", "-c", "ls " + dir + "/out/*.deb"});
  ASSERT_EQ(find.exit_code, 0) << find.err;
  std::string deb(absl::StripAsciiWhitespace(find.out));
  EXPECT_THAT(deb, HasSubstr("tandem_0.1.0_"));

  // The contents.
  ProcessResult contents = RunProcess({"/usr/bin/dpkg-deb", "-c", deb});
  ASSERT_EQ(contents.exit_code, 0) << contents.err;
  for (const char* file :
       {"./usr/bin/tandemd", "./usr/bin/tandemctl", "./usr/lib/libtandem.so.0", "./usr/include/tandem/tandem_c.h",
        "./usr/lib/systemd/system/tandemd.service", "./usr/lib/systemd/system/tandemd@.service",
        "./etc/tandem/tandemd.conf", "./usr/lib/sysusers.d/tandem.conf", "./usr/lib/pkgconfig/tandem.pc",
        "./usr/share/doc/tandem/deploy.md"}) {
    EXPECT_THAT(contents.out, HasSubstr(file));
  }
  for (const char* file : {"tandem/__init__.py", "tandem/torch/__init__.py", "tandem/libtandem.so"}) {
    EXPECT_THAT(contents.out, HasSubstr(std::string("./usr/lib/python3/dist-packages/") + file));
  }

  // The control data: dependencies found by dpkg-shlibdeps, the config as a
  // conffile, the maintainer scripts.
  ProcessResult info = RunProcess({"/usr/bin/dpkg-deb", "-I", deb});
  ASSERT_EQ(info.exit_code, 0);
  EXPECT_THAT(info.out, HasSubstr("Package: tandem"));
  EXPECT_THAT(info.out, HasSubstr("libzmq5"));
  EXPECT_THAT(info.out, HasSubstr("postinst"));
  ProcessResult conffiles = RunProcess({"/bin/sh", "-c", "dpkg-deb --ctrl-tarfile " + deb + " | tar -xO ./conffiles"});
  EXPECT_EQ(conffiles.out, "/etc/tandem/tandemd.conf\n");

  // Unpacked into a scratch root, it runs.
  std::string root = dir + "/root";
  ProcessResult unpack = RunProcess({"/usr/bin/dpkg-deb", "-x", deb, root});
  ASSERT_EQ(unpack.exit_code, 0) << unpack.err;
  std::string unit = ReadFile(root + "/usr/lib/systemd/system/tandemd@.service");
  EXPECT_THAT(unit, HasSubstr("ExecStart=/usr/bin/tandemd --config=/etc/tandem/tandemd.conf --device=cuda --gpus=%i"));
  ProcessResult version = RunProcess({root + "/usr/bin/tandemd", "--version"});
  EXPECT_EQ(version.exit_code, 0) << version.err;
  EXPECT_THAT(version.out, HasSubstr("tandemd 0.1.0"));
  ProcessResult check =
      RunProcess({root + "/usr/bin/tandemd", "--config=" + root + "/etc/tandem/tandemd.conf", "--check_config"});
  EXPECT_EQ(check.exit_code, 0) << check.err;
  ProcessResult ctl = RunProcess({root + "/usr/bin/tandemctl", "--endpoint=ipc://" + dir + "/none.sock", "status"});
  EXPECT_EQ(ctl.exit_code, 1);
  EXPECT_THAT(ctl.err, HasSubstr("tandemd is not running"));
  if (std::getenv("TANDEM_KEEP_TEST_DIRS") == nullptr) (void)!std::system(("rm -rf '" + dir + "'").c_str());
}

}  // namespace
}  // namespace tandem::testing
