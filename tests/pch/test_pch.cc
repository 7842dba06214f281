// The host of the tests' precompiled header (tests/pch/CMakeLists.txt): a
// test that checks the header it carries is usable.
#include "gmock/gmock.h"
#include "gtest/gtest.h"

TEST(PrecompiledHeader, GoogleTestAndMockAreThere) {
  EXPECT_THAT(std::vector<int>({1, 2}), ::testing::ElementsAre(1, 2));
}
