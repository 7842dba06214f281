// `cmake --install` into a scratch prefix: every file in place, the systemd
// units naming the installed paths and passing `systemd-analyze verify`,
// the sample config valid, libtandem usable through its pkg-config file,
// the C++ SDK through its CMake package (find_package(Tandem)).
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
  for (const char* file :
       {"bin/tandemd", "bin/tandemctl", "lib/libtandem.so", "include/tandem/tandem_c.h",
        "include/tandem/client/client.h", "lib/cmake/Tandem/TandemConfig.cmake", "lib/systemd/system/tandemd.service",
        "lib/systemd/system/tandemd@.service", "etc/tandem/tandemd.conf", "lib/sysusers.d/tandem.conf",
        "lib/pkgconfig/tandem.pc", "share/doc/tandem/deploy.md", "share/tandem/proto/tandem.proto"}) {
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
                             "/etc/tandem/tandemd.conf --device=cuda --gpus=%i --state_dir=/var/lib/tandem/gpu%i "
                             "--endpoint=ipc:///run/tandem/gpu%i/tandemd.sock"));
  for (const char* line : {"Type=notify", "WatchdogSec=", "ExecReload=/bin/kill -HUP $MAINPID", "Restart=on-failure",
                           "Group=tandem", "RuntimeDirectory=tandem/gpu%i", "RuntimeDirectoryMode=0750",
                           "StateDirectory=tandem/gpu%i", "StateDirectoryMode=0700", "DevicePolicy=closed",
                           "DeviceAllow=char-nvidia* rw", "DeviceAllow=/dev/nvidiactl rw",
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

// An outside project: its CMakeLists.txt finds the install's package by
// CMAKE_PREFIX_PATH, its main.cc uses the SDK as the project's own code
// does (GraphBuilder, Client, the project's include spelling) and prints
// the value it fetches from a daemon.
constexpr char kOutsideCMakeLists[] = R"cmake(cmake_minimum_required(VERSION 3.25)
project(outside LANGUAGES CXX)
find_package(Tandem 0.1 REQUIRED)
message(STATUS "Tandem_DIR=${Tandem_DIR}")
add_executable(outside main.cc)
target_link_libraries(outside PRIVATE Tandem::client)
)cmake";

constexpr char kOutsideMain[] = R"main(#include <cstdio>
#include <string>
#include <utility>

#include "base/status_macros.h"
#include "client/client.h"
#include "client/graph_builder.h"

namespace v1 = tandem::v1;
using tandem::client::Client;
using tandem::client::GraphBuilder;
using tandem::client::HostTensor;

// Tandem::client asks for C++20 (g++ 12 defaults to C++17).
static_assert(__cplusplus >= 202002L);

absl::Status Run(const std::string& endpoint) {
  GraphBuilder b("outside");
  std::string x = b.Feed("x", v1::FLOAT32, {3});
  std::string w = b.Persistent("w", HostTensor::Floats({3}, {1.5f, 2.f, -1.f}));
  b.Fetch(b.Op("mul.Tensor", {x, w}, {}, "y"));
  ASSIGN_OR_RETURN(auto client, Client::Connect({.endpoint = endpoint, .name = "outside"}));
  ASSIGN_OR_RETURN(auto job, client->RegisterJob(std::move(b).Build()));
  ASSIGN_OR_RETURN(auto result,
                   client->RunIteration(job.job_id(), {{"x", HostTensor::Floats({3}, {2.f, 3.f, 4.f})}}, {"y"}));
  std::printf("y =");
  for (float v : result.fetches.at("y").values<float>()) std::printf(" %g", v);
  std::printf("\n");
  return absl::OkStatus();
}

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: outside ENDPOINT\n");
    return 2;
  }
  absl::Status status = Run(argv[1]);
  if (!status.ok()) {
    std::fprintf(stderr, "outside: %s\n", status.ToString().c_str());
    return 1;
  }
  return 0;
}
)main";

TEST_F(InstallTest, CxxSdkBuildsAnOutsideProject) {
  ASSERT_EQ(install_->exit_code, 0) << install_->out << install_->err;
  const std::string& p = *prefix_;
  const std::string dir = p.substr(0, p.rfind('/')) + "/outside";
  ASSERT_EQ(::mkdir(dir.c_str(), 0755), 0) << dir;
  WriteFile(dir + "/CMakeLists.txt", kOutsideCMakeLists);
  WriteFile(dir + "/main.cc", kOutsideMain);
  // The generator, make program and compiler of this build; no build type
  // (no optimization: the quickest compile).
  ProcessResult configure = RunProcess({CMAKE_COMMAND, "-S", dir, "-B", dir + "/build", "-G", TANDEM_CMAKE_GENERATOR,
                                        "-DCMAKE_MAKE_PROGRAM=" TANDEM_MAKE_PROGRAM,
                                        "-DCMAKE_CXX_COMPILER=" TANDEM_CXX_COMPILER, "-DCMAKE_PREFIX_PATH=" + p},
                                       {}, 120);
  ASSERT_EQ(configure.exit_code, 0) << configure.out << configure.err;
  // The package found is the one just installed, not another on the system.
  EXPECT_THAT(configure.out, HasSubstr("Tandem_DIR=" + p + "/lib/cmake/Tandem\n"));
  ProcessResult build = RunProcess({CMAKE_COMMAND, "--build", dir + "/build"}, {}, 240);
  ASSERT_EQ(build.exit_code, 0) << build.out << build.err;

  DaemonProcess daemon;
  ProcessResult run = RunProcess({dir + "/build/outside", daemon.endpoint()}, {}, 60);
  EXPECT_EQ(run.exit_code, 0) << run.err << "\n" << daemon.Log();
  EXPECT_EQ(run.out, "y = 3 6 -4\n");
}

}  // namespace
}  // namespace tandem::testing
