// `cmake --install` into a scratch prefix: every file in place, the systemd
// units naming the installed paths and passing `systemd-analyze verify`,
// the sample config valid, libtandem usable through its pkg-config file.
#include <sys/stat.h>
#include <unistd.h>

#include <string>

#include "absl/strings/str_cat.h"
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

class InstallTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    prefix_ = new std::string(MakeTempDir() + "/prefix");
    install_ =
        new ProcessResult(RunProcess({CMAKE_COMMAND, "--install", TANDEM_BINARY_DIR, "--prefix", *prefix_}, {}, 300));
  }
  static void TearDownTestSuite() {
    (void)!std::system(("rm -rf '" + prefix_->substr(0, prefix_->rfind('/')) + "'").c_str());
    delete prefix_;
    delete install_;
  }
  static std::string* prefix_;
  static ProcessResult* install_;
};
std::string* InstallTest::prefix_ = nullptr;
ProcessResult* InstallTest::install_ = nullptr;

TEST_F(InstallTest, PutsEveryPartInPlace) {
  ASSERT_EQ(install_->exit_code, 0) << install_->out << install_->err;
  const std::string& p = *prefix_;
  for (const char* file : {"bin/tandemd", "bin/tandemctl", "lib/libtandem.so", "include/tandem/tandem_c.h",
                           "lib/systemd/system/tandemd.service", "lib/systemd/system/tandemd@.service",
                           "etc/tandem/tandemd.conf", "lib/sysusers.d/tandem.conf", "lib/pkgconfig/tandem.pc",
                           "share/doc/tandem/deploy.md", "share/tandem/proto/tandem.proto"}) {
    EXPECT_TRUE(Exists(p + "/" + file)) << file;
  }
  // The Python package: its framework-free part (client/python), its
  // PyTorch adaptor (adaptor/pytorch) inside it, and the library it loads.
  for (const char* file : {"__init__.py", "client.py", "libtandem.so", "torch/__init__.py", "torch/capture.py"}) {
    EXPECT_TRUE(Exists(p + "/lib/python3/dist-packages/tandem/" + file)) << file;
  }
  ProcessResult version = RunProcess({p + "/bin/tandemd", "--version"});
  EXPECT_EQ(version.exit_code, 0);
  EXPECT_THAT(version.out, HasSubstr("tandemd 0.1.0"));
  // The installed config is the sample, and valid.
  ProcessResult check =
      RunProcess({p + "/bin/tandemd", "--config=" + p + "/etc/tandem/tandemd.conf", "--check_config"});
  EXPECT_EQ(check.exit_code, 0) << check.err;
}

TEST_F(InstallTest, UnitsNameTheInstalledPaths) {
  ASSERT_EQ(install_->exit_code, 0);
  const std::string& p = *prefix_;
  std::string gpu = ReadFile(p + "/lib/systemd/system/tandemd@.service");
  EXPECT_THAT(gpu, HasSubstr("ExecStart=" + p + "/bin/tandemd --config=" + p +
                             "/etc/tandem/tandemd.conf --device=cuda --gpus=%i "
                             "--endpoint=ipc:///run/tandem/gpu%i/tandemd.sock"));
  for (const char* line : {"Type=notify", "WatchdogSec=", "ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure",
                           "Group=tandem", "RuntimeDirectory=tandem/gpu%i", "RuntimeDirectoryMode=0750",
                           "DevicePolicy=closed", "DeviceAllow=char-nvidia* rw", "DeviceAllow=/dev/nvidiactl rw",
                           "DeviceAllow=/dev/nvidia-uvm rw", "Environment=CUDA_DEVICE_ORDER=PCI_BUS_ID"}) {
    EXPECT_THAT(gpu, HasSubstr(line));
  }
  std::string all = ReadFile(p + "/lib/systemd/system/tandemd.service");
  EXPECT_THAT(all, HasSubstr("ExecStart=" + p + "/bin/tandemd --config=" + p + "/etc/tandem/tandemd.conf"));
  EXPECT_THAT(all, HasSubstr("DeviceAllow=char-nvidia* rw"));
  EXPECT_THAT(all, HasSubstr("Environment=CUDA_DEVICE_ORDER=PCI_BUS_ID"));
  EXPECT_THAT(all, ::testing::Not(HasSubstr("@TANDEM_")));
}

TEST_F(InstallTest, UnitsPassSystemdAnalyzeVerify) {
  ASSERT_EQ(install_->exit_code, 0);
  std::string analyze = Exists("/usr/bin/systemd-analyze") ? "/usr/bin/systemd-analyze" : "/bin/systemd-analyze";
  if (!Exists(analyze)) {
    GTEST_SKIP() << "systemd-analyze is not installed (apt-get install systemd); the units were not verified";
  }
  std::string units = *prefix_ + "/lib/systemd/system";
  for (const char* unit : {"tandemd.service", "tandemd@0.service", "tandemd@3.service"}) {
    ProcessResult r = RunProcess({analyze, "verify", units + "/" + unit}, {}, 60);
    EXPECT_EQ(r.exit_code, 0) << unit << "\n" << r.out << r.err;
    EXPECT_EQ(r.out + r.err, "") << unit;
  }
  // The check can fail: a unit with a mistake is reported.
  std::string broken = ReadFile(units + "/tandemd.service");
  broken.replace(broken.find("Type=notify"), 11, "Type=notifx");
  WriteFile(units + "/broken.service", broken);
  ProcessResult r = RunProcess({analyze, "verify", units + "/broken.service"}, {}, 60);
  EXPECT_THAT(r.out + r.err, HasSubstr("notifx"));
  ::unlink((units + "/broken.service").c_str());
}

TEST_F(InstallTest, LibtandemLinksThroughPkgConfig) {
  ASSERT_EQ(install_->exit_code, 0);
  const std::string& p = *prefix_;
  ProcessResult flags = RunProcess({"/usr/bin/pkg-config", "--cflags", "--libs", p + "/lib/pkgconfig/tandem.pc"});
  ASSERT_EQ(flags.exit_code, 0) << flags.err;
  EXPECT_THAT(flags.out, HasSubstr("-I" + p + "/include/tandem"));
  EXPECT_THAT(flags.out, HasSubstr("-L" + p + "/lib -ltandem"));
  std::string dir = p.substr(0, p.rfind('/'));
  WriteFile(dir + "/hello.c",
            "#include <stdio.h>\n#include <tandem_c.h>\n"
            "int main(void) { printf(\"c api %d\\n\", tandem_c_api_version()); return 0; }\n");
  ProcessResult cc = RunProcess(
      {"/bin/sh", "-c",
       "cc -o " + dir + "/hello " + dir + "/hello.c $(pkg-config --cflags --libs " + p + "/lib/pkgconfig/tandem.pc)"});
  ASSERT_EQ(cc.exit_code, 0) << cc.err;
  ProcessResult run = RunProcess({dir + "/hello"}, {"LD_LIBRARY_PATH=" + p + "/lib"});
  EXPECT_EQ(run.exit_code, 0) << run.err;
  EXPECT_THAT(run.out, HasSubstr("c api "));
}

}  // namespace
}  // namespace tandem::testing
