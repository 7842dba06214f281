#include "codegen/kernel_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"

namespace tandem::codegen {
namespace {

using ::testing::HasSubstr;

GeneratedKernel Kernel(float scale) {
  PointwiseSpec spec;
  spec.dtype = DType::kFloat32;
  spec.program.num_inputs = 1;
  FusedInstruction ins;
  ins.op = FusedOpcode::kMulScalar;
  ins.dst = 1;
  ins.a = 0;
  ins.other = scale;
  spec.program.code = {ins};
  spec.program.outputs = {1};
  spec.scalar = {false};
  spec.input_dtypes = {DType::kFloat32};
  return GeneratePointwiseKernel(spec);
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class KernelCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!NvrtcAvailable()) GTEST_SKIP() << "this build has no NVRTC: generated kernels are not compiled here";
    char pattern[] = "/tmp/tandem-kernel-cache-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    root_ = pattern;
    folder_ = root_ + "/a/b";  // made by the cache
  }
  void TearDown() override {
    if (!root_.empty()) std::system(absl::StrCat("rm -rf '", root_, "'").c_str());
  }
  std::string CubinPath(const GeneratedKernel& k) const { return absl::StrCat(folder_, "/", k.name, ".sm90.cubin"); }

  std::string root_, folder_;
  const CompileTarget target_{90, 13000};
};

TEST_F(KernelCacheTest, CompilesOnceThenServesFromMemoryAndFromTheFolder) {
  const GeneratedKernel k = Kernel(0.5f);
  {
    KernelCache cache(folder_);
    auto first = cache.Cubin(k, target_);
    ASSERT_TRUE(first.ok()) << first.status();
    auto second = cache.Cubin(k, target_);
    ASSERT_TRUE(second.ok());
    EXPECT_EQ(first->get(), second->get());  // the same bytes, not a copy
    EXPECT_EQ(cache.counters().compiles, 1);
    EXPECT_EQ(cache.counters().memory_hits, 1);
    EXPECT_GT(cache.counters().compile_seconds, 0.0);
  }
  struct stat st;
  ASSERT_EQ(stat(folder_.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0700u);
  EXPECT_EQ(Slurp(absl::StrCat(folder_, "/", k.name, ".cu")), k.source);  // readable beside the binary
  // A new cache over the folder (a restarted daemon) compiles nothing.
  KernelCache restarted(folder_);
  auto again = restarted.Cubin(k, target_);
  ASSERT_TRUE(again.ok()) << again.status();
  EXPECT_EQ(restarted.counters().compiles, 0);
  EXPECT_EQ(restarted.counters().disk_hits, 1);
  KernelCache memory_only;
  auto fresh = memory_only.Cubin(k, target_);
  ASSERT_TRUE(fresh.ok());
  EXPECT_EQ(**fresh, **again);
}

TEST_F(KernelCacheTest, ADriverOrArchitectureOfItsOwnIsAnotherEntry) {
  const GeneratedKernel k = Kernel(0.5f);
  KernelCache cache(folder_);
  ASSERT_TRUE(cache.Cubin(k, target_).ok());
  ASSERT_TRUE(cache.Cubin(k, CompileTarget{90, 13010}).ok());
  ASSERT_TRUE(cache.Cubin(k, CompileTarget{80, 13000}).ok());
  EXPECT_EQ(cache.counters().compiles, 3);
  EXPECT_EQ(access(absl::StrCat(folder_, "/", k.name, ".sm80.cubin").c_str(), F_OK), 0);
  // The folder holds one file per architecture: a new driver's entry
  // replaced the old one, which is compiled again when asked for.
  KernelCache restarted(folder_);
  ASSERT_TRUE(restarted.Cubin(k, target_).ok());
  EXPECT_EQ(restarted.counters().compiles, 1);
}

TEST_F(KernelCacheTest, DamagedOrForeignFilesAreCompiledAgain) {
  const GeneratedKernel k = Kernel(0.25f);
  {
    KernelCache cache(folder_);
    ASSERT_TRUE(cache.Cubin(k, target_).ok());
  }
  const std::string path = CubinPath(k);
  const std::string good = Slurp(path);
  ASSERT_GT(good.size(), k.source.size());
  // Cut short at a few places, then a file of another kernel's source
  // under this kernel's name (a hash collision), then garbage.
  GeneratedKernel other = Kernel(0.75f);
  std::string foreign = good;
  const size_t at = foreign.find(k.source);
  ASSERT_NE(at, std::string::npos);
  foreign.replace(at, k.source.size(), std::string(k.source.size(), 'x'));
  for (const std::string& damaged : {good.substr(0, 10), good.substr(0, good.size() / 2),
                                     good.substr(0, good.size() - 1), foreign, std::string("garbage")}) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << damaged;
    KernelCache cache(folder_);
    auto cubin = cache.Cubin(k, target_);
    ASSERT_TRUE(cubin.ok()) << cubin.status();
    EXPECT_EQ(cache.counters().disk_hits, 0);
    EXPECT_EQ(cache.counters().compiles, 1);
    EXPECT_EQ(Slurp(path), good);  // replaced by a whole file
  }
}

TEST_F(KernelCacheTest, AFolderThatCannotBeWrittenKeepsKernelsInMemory) {
  KernelCache cache("/proc/tandem-no-such-folder");
  auto cubin = cache.Cubin(Kernel(2.0f), target_);
  ASSERT_TRUE(cubin.ok()) << cubin.status();
  EXPECT_TRUE(cache.Cubin(Kernel(2.0f), target_).ok());
  EXPECT_EQ(cache.counters().compiles, 1);
}

TEST_F(KernelCacheTest, ASourceThatDoesNotCompileIsRefusedWithTheLog) {
  KernelCache cache(folder_);
  GeneratedKernel bad{"tandem_pw_bad", "extern \"C\" __global__ void tandem_pw_bad() { undeclared_name = 1; }\n"};
  auto cubin = cache.Cubin(bad, target_);
  ASSERT_FALSE(cubin.ok());
  EXPECT_EQ(cubin.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(cubin.status().message(), HasSubstr("undeclared_name"));
  EXPECT_EQ(cache.counters().compile_failures, 1);
  EXPECT_NE(access(CubinPath(bad).c_str(), F_OK), 0);
}

}  // namespace
}  // namespace tandem::codegen
