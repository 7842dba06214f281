#include "client/tandemctl/format.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::ctl {
namespace {

TEST(TextTable, PadsColumnsAndRightAlignsNumbers) {
  TextTable t({"NAME", ">ITERS"});
  t.AddRow({"mlp-a", "5"});
  t.AddRow({"a-longer-name", "1234"});
  t.AddRow({"short"});  // missing cells are empty
  EXPECT_EQ(t.Render(),
            "NAME           ITERS\n"
            "mlp-a              5\n"
            "a-longer-name   1234\n"
            "short               \n");
  EXPECT_EQ(t.rows(), 3u);
}

TEST(Units, ReadLikeAHuman) {
  EXPECT_EQ(HumanBytes(0), "0 B");
  EXPECT_EQ(HumanBytes(1023), "1023 B");
  EXPECT_EQ(HumanBytes(1536), "1.5 KiB");
  EXPECT_EQ(HumanBytes(uint64_t{8} << 30), "8.0 GiB");
  EXPECT_EQ(HumanSeconds(0), "-");
  EXPECT_EQ(HumanSeconds(0.00085), "850us");
  EXPECT_EQ(HumanSeconds(0.0123), "12.3ms");
  EXPECT_EQ(HumanSeconds(1.25), "1.25s");
  EXPECT_EQ(HumanDuration(42), "42s");
  EXPECT_EQ(HumanDuration(307), "5m07s");
  EXPECT_EQ(HumanDuration(3 * 3600 + 120), "3h02m");
  EXPECT_EQ(HumanDuration(2 * 86400 + 4 * 3600), "2d04h");
  EXPECT_EQ(Percent(0), "-");
  EXPECT_EQ(Percent(0.375), "37.5%");
  EXPECT_EQ(Factor(1.834), "1.83x");
  EXPECT_EQ(Factor(0), "-");
}

}  // namespace
}  // namespace tandem::ctl
