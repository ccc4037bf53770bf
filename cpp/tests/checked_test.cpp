// checked.h: the checked size arithmetic both stores size their buffers with.
#include "trajview/checked.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <limits>

#include "test_util.h"

namespace trajview {
namespace {

using testing::throws_length_error;

constexpr auto kSizeMax = std::numeric_limits<std::size_t>::max();
constexpr auto kI64Max = std::numeric_limits<std::int64_t>::max();
constexpr auto kI64Min = std::numeric_limits<std::int64_t>::min();

TEST(Checked, MulReturnsTheProductOrNamesWhatOverflowed) {
  EXPECT_EQ(checked_mul(std::size_t{6}, std::size_t{7}, "x"), 42u);
  EXPECT_EQ(checked_mul(std::size_t{0}, kSizeMax, "x"), 0u);
  EXPECT_EQ(checked_mul(std::size_t{1}, kSizeMax, "x"), kSizeMax);
  EXPECT_TRUE(throws_length_error([] { (void)checked_mul(std::size_t{1} << 32, std::size_t{1} << 32, "rows x bytes"); },
                                  {"rows x bytes", "4294967296 x 4294967296", "overflows"}));
  EXPECT_EQ(checked_mul(std::int64_t{-3}, std::int64_t{4}, "x"), -12);
  EXPECT_TRUE(throws_length_error([] { (void)checked_mul(kI64Min, std::int64_t{-1}, "negated"); },
                                  {"negated", "overflows"}));
}

TEST(Checked, AddReturnsTheSumOrNamesWhatOverflowed) {
  EXPECT_EQ(checked_add(std::size_t{40}, std::size_t{2}, "x"), 42u);
  EXPECT_TRUE(throws_length_error([] { (void)checked_add(kSizeMax, std::size_t{1}, "positions"); },
                                  {"positions", "+ 1", "overflows"}));
  EXPECT_EQ(checked_add(kI64Max, std::int64_t{-1}, "x"), kI64Max - 1);
  EXPECT_TRUE(throws_length_error([] { (void)checked_add(kI64Max, std::int64_t{1}, "t + shift"); },
                                  {"t + shift", "9223372036854775807 + 1"}));
  EXPECT_TRUE(throws_length_error([] { (void)checked_add(kI64Min, std::int64_t{-1}, "t + shift"); },
                                  {"t + shift"}));
}

TEST(Checked, ToSizeRejectsNegativeCounts) {
  EXPECT_EQ(to_size(0, "x"), 0u);
  EXPECT_EQ(to_size(kI64Max, "x"), static_cast<std::size_t>(kI64Max));
  EXPECT_TRUE(throws_length_error([] { (void)to_size(-1, "rows"); }, {"rows", "got -1"}));
  EXPECT_TRUE(throws_length_error([] { (void)to_size(kI64Min, "rows"); }, {"rows", "-9223372036854775808"}));
}

TEST(Checked, CheckBytesEnforcesTheLimit) {
  EXPECT_EQ(check_bytes(100, 100, "x"), 100u);
  EXPECT_TRUE(throws_length_error([] { check_bytes(101, 100, "column 'obs'"); },
                                  {"column 'obs'", "needs 101 bytes", "limit of 100 bytes"}));
}

}  // namespace
}  // namespace trajview
