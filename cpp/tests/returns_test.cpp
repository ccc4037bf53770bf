#include "trajview/returns.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

namespace trajview {
namespace {

// The reference: each segment on its own, the textbook backward loop.
std::vector<double> reference(const std::vector<double>& x, const std::vector<std::int64_t>& lengths, double f) {
  std::vector<double> out(x.size());
  std::size_t start = 0;
  for (const std::int64_t len : lengths) {
    const auto n = static_cast<std::size_t>(len);
    double acc = 0.0;
    for (std::size_t i = 0; i < n; ++i) {
      const std::size_t t = start + n - 1 - i;
      acc = x[t] + f * acc;
      out[t] = acc;
    }
    start += n;
  }
  return out;
}

TEST(DiscountedSums, KnownValues) {
  const std::vector<double> x = {1, 1, 1, 2, 3};
  const std::vector<std::int64_t> lengths = {3, 0, 2};
  std::vector<double> out(x.size());
  discounted_sums(x, lengths, 0.5, out);
  EXPECT_EQ(out, (std::vector<double>{1.75, 1.5, 1.0, 3.5, 3.0}));
}

TEST(DiscountedSums, MatchesTheReferenceBitForBit) {
  std::mt19937_64 rng(7);
  std::uniform_int_distribution<std::int64_t> len(0, 40);
  std::normal_distribution<double> val(0.0, 3.0);
  for (int round = 0; round < 200; ++round) {
    std::vector<std::int64_t> lengths(static_cast<std::size_t>(len(rng) % 9));
    std::size_t n = 0;
    for (auto& l : lengths) n += static_cast<std::size_t>(l = len(rng));
    std::vector<double> x(n);
    for (auto& v : x) v = val(rng);
    const double f = 0.98 * 0.8;
    std::vector<double> out(n);
    discounted_sums(x, lengths, f, out);
    EXPECT_EQ(out, reference(x, lengths, f));
    discounted_sums(x, lengths, f, x);  // in place
    EXPECT_EQ(x, out);
  }
}

TEST(DiscountedSums, RefusesLengthsThatDoNotCoverTheRows) {
  const std::vector<double> x = {1, 2, 3};
  std::vector<double> out = {9, 9, 9};
  EXPECT_THROW(discounted_sums(x, std::vector<std::int64_t>{2}, 0.9, out), std::length_error);
  EXPECT_THROW(discounted_sums(x, std::vector<std::int64_t>{2, 2}, 0.9, out), std::length_error);
  EXPECT_THROW(discounted_sums(x, std::vector<std::int64_t>{4, -1}, 0.9, out), std::length_error);
  std::vector<double> short_out(2);
  EXPECT_THROW(discounted_sums(x, std::vector<std::int64_t>{3}, 0.9, short_out), std::length_error);
  EXPECT_EQ(out, (std::vector<double>{9, 9, 9}));  // nothing written
}

}  // namespace
}  // namespace trajview
