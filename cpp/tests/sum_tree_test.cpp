// SumTree: totals, minimums and prefix search against a linear scan, bad input.
#include "trajview/sum_tree.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <limits>
#include <random>
#include <stdexcept>
#include <vector>

namespace trajview {
namespace {

/// The leaf a linear scan finds for `mass` (the reference).
std::size_t scan(const std::vector<double>& v, double mass) {
  double acc = 0.0;
  std::size_t last = 0;
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (v[i] <= 0.0) continue;
    last = i;
    acc += v[i];
    if (mass < acc) return i;
  }
  return last;
}

TEST(SumTree, TotalsMinAndSearchMatchALinearScan) {
  for (std::size_t n : {1u, 2u, 3u, 7u, 8u, 9u, 100u, 1000u}) {
    SumTree tree(n);
    std::vector<double> ref(n, 0.0);
    std::mt19937_64 rng(n);
    std::uniform_real_distribution<double> val(0.0, 10.0);
    std::uniform_int_distribution<std::size_t> idx(0, n - 1);
    for (int step = 0; step < 400; ++step) {
      const std::size_t i = idx(rng);
      const double v = step % 5 == 0 ? 0.0 : val(rng);
      tree.set(i, v);
      ref[i] = v;
      double total = 0.0, mn = std::numeric_limits<double>::infinity();
      for (double x : ref) {
        total += x;
        if (x > 0.0) mn = std::min(mn, x);
      }
      ASSERT_NEAR(tree.total(), total, 1e-9 * (1 + total));
      ASSERT_EQ(tree.min_positive(), mn);
      ASSERT_EQ(tree.get(i), v);
      if (total > 0.0) {
        for (int q = 0; q < 5; ++q) {
          // Masses well inside a leaf (away from rounding at the edges).
          const std::size_t want = scan(ref, std::uniform_real_distribution<double>(0.0, total)(rng));
          double before = 0.0;
          for (std::size_t j = 0; j < want; ++j) before += ref[j];
          const double mass = before + 0.5 * ref[want];
          ASSERT_EQ(tree.find(mass), want) << "n=" << n << " mass=" << mass;
          ASSERT_GT(tree.get(tree.find(mass)), 0.0);
        }
        // The edges never land on an empty leaf.
        EXPECT_GT(tree.get(tree.find(0.0)), 0.0);
        EXPECT_GT(tree.get(tree.find(total)), 0.0);
        EXPECT_GT(tree.get(tree.find(total * 2)), 0.0);
      }
    }
    EXPECT_EQ(tree.leaves(), ref);
  }
}

TEST(SumTree, SamplingFrequenciesFollowTheLeaves) {
  SumTree tree(5);
  const std::vector<double> w{1.0, 0.0, 2.0, 3.0, 4.0};
  for (std::size_t i = 0; i < w.size(); ++i) tree.set(i, w[i]);
  std::vector<int> counts(w.size(), 0);
  std::mt19937_64 rng(7);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  const int draws = 100000;
  for (int k = 0; k < draws; ++k) ++counts[tree.find(unit(rng) * tree.total())];
  EXPECT_EQ(counts[1], 0);
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(counts[i] / double(draws), w[i] / 10.0, 0.01);
}

TEST(SumTree, BadInput) {
  EXPECT_THROW(SumTree(0), std::invalid_argument);
  SumTree tree(4);
  EXPECT_THROW(tree.set(4, 1.0), std::out_of_range);
  EXPECT_THROW(tree.set(0, -1.0), std::invalid_argument);
  EXPECT_THROW(tree.set(0, std::nan("")), std::invalid_argument);
  EXPECT_THROW(tree.set(0, std::numeric_limits<double>::infinity()), std::invalid_argument);
  EXPECT_THROW((void)tree.get(9), std::out_of_range);
  EXPECT_EQ(tree.total(), 0.0);
}

}  // namespace
}  // namespace trajview
