// $TANDEM_MEMORY_QUOTA_MIB: the per-job memory quota a batch system's
// prolog hands a job (cluster/slurm/). Unset, empty or 0 is no quota; a
// value that is not a whole number of MiB is an error naming the variable,
// never a silently lifted quota. (tests/admission_test.cc checks that
// RegisterJob applies it against a real daemon.)
#include <cstdlib>
#include <optional>
#include <string>

#include "client/client.h"
#include "gtest/gtest.h"

namespace tandem::client {
namespace {

class MemoryQuotaEnvTest : public ::testing::Test {
 protected:
  void SetUp() override {
    if (const char* v = std::getenv("TANDEM_MEMORY_QUOTA_MIB")) saved_ = v;
  }
  void TearDown() override {
    if (saved_) {
      ::setenv("TANDEM_MEMORY_QUOTA_MIB", saved_->c_str(), 1);
    } else {
      ::unsetenv("TANDEM_MEMORY_QUOTA_MIB");
    }
  }
  std::optional<std::string> saved_;
};

TEST_F(MemoryQuotaEnvTest, UnsetEmptyOrZeroIsNoQuota) {
  ::unsetenv("TANDEM_MEMORY_QUOTA_MIB");
  auto quota = MemoryQuotaFromEnvironment();
  ASSERT_TRUE(quota.ok()) << quota.status();
  EXPECT_EQ(*quota, 0u);
  for (const char* value : {"", "0"}) {
    ::setenv("TANDEM_MEMORY_QUOTA_MIB", value, 1);
    quota = MemoryQuotaFromEnvironment();
    ASSERT_TRUE(quota.ok()) << value << ": " << quota.status();
    EXPECT_EQ(*quota, 0u) << value;
  }
}

TEST_F(MemoryQuotaEnvTest, MiBBecomeBytes) {
  ::setenv("TANDEM_MEMORY_QUOTA_MIB", "24", 1);
  auto quota = MemoryQuotaFromEnvironment();
  ASSERT_TRUE(quota.ok()) << quota.status();
  EXPECT_EQ(*quota, uint64_t{24} << 20);
  ::setenv("TANDEM_MEMORY_QUOTA_MIB", "81920", 1);  // an H100's 80 GiB
  quota = MemoryQuotaFromEnvironment();
  ASSERT_TRUE(quota.ok()) << quota.status();
  EXPECT_EQ(*quota, uint64_t{80} << 30);
}

TEST_F(MemoryQuotaEnvTest, BadValuesAreErrorsNamingTheVariable) {
  for (const char* value : {"abc", "-1", "1.5", "8MiB", "18446744073709551615", "99999999999999999999999"}) {
    ::setenv("TANDEM_MEMORY_QUOTA_MIB", value, 1);
    auto quota = MemoryQuotaFromEnvironment();
    ASSERT_FALSE(quota.ok()) << value << " gave " << *quota;
    EXPECT_EQ(quota.status().code(), absl::StatusCode::kInvalidArgument) << value;
    EXPECT_NE(std::string(quota.status().message()).find("TANDEM_MEMORY_QUOTA_MIB"), std::string::npos)
        << quota.status();
  }
}

}  // namespace
}  // namespace tandem::client
