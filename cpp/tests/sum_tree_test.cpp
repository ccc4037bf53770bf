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
      if (mn == std::numeric_limits<double>::infinity()) {
        ASSERT_EQ(tree.min_positive(), mn);
      } else {
        ASSERT_NEAR(tree.min_positive(), mn, 1e-14 * mn);
      }
      ASSERT_EQ(tree.get(i), v);
      if (total > 0.0) {
        for (int q = 0; q < 5; ++q) {
          // Masses well inside a leaf (away from rounding at the edges).
          const std::size_t want = scan(ref, std::uniform_real_distribution<double>(0.0, total)(rng));
          double before = 0.0;
          for (std::size_t j = 0; j < want; ++j) before += ref[j];
          const double mass = before + 0.5 * ref[want];
          ASSERT_EQ(tree.find(mass / total), want) << "n=" << n << " mass=" << mass;
          ASSERT_GT(tree.get(tree.find(mass / total)), 0.0);
        }
        // The edges never land on an empty leaf.
        EXPECT_GT(tree.get(tree.find(0.0)), 0.0);
        EXPECT_GT(tree.get(tree.find(1.0)), 0.0);
        EXPECT_GT(tree.get(tree.find(2.0)), 0.0);
      }
    }
    for (std::size_t i = 0; i < n; ++i) EXPECT_EQ(tree.get(i), ref[i]);
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
  for (int k = 0; k < draws; ++k) ++counts[tree.find(unit(rng))];
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


/// Draw frequencies of `tree` over `draws` uniform draws.
std::vector<double> frequencies(const SumTree& tree, int draws, std::uint64_t seed) {
  std::vector<int> counts(tree.size(), 0);
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (int k = 0; k < draws; ++k) ++counts[tree.find(unit(rng))];
  std::vector<double> f;
  for (int c : counts) f.push_back(static_cast<double>(c) / draws);
  return f;
}

TEST(SumTree, HugeLeavesNeverOverflowTheTotal) {
  // Leaves of 1e308: a plain double sum is inf after two of them.
  SumTree tree(8);
  const std::vector<double> w{1e308, 0.0, 1e308, 5e307, 1.7976931348623157e308, 0.0, 1e308, 2.5e307};
  double share_total = 0.0;
  for (double v : w) share_total += v / 1e308;
  for (std::size_t i = 0; i < w.size(); ++i) tree.set(i, w[i]);
  EXPECT_TRUE(std::isfinite(tree.total_mass()));
  EXPECT_GT(tree.total_mass(), 0.0);
  EXPECT_EQ(tree.total(), std::numeric_limits<double>::infinity());  // the true total is beyond a double
  for (std::size_t i = 0; i < w.size(); ++i) {
    EXPECT_EQ(tree.get(i), w[i]);                                              // held exactly
    EXPECT_NEAR(tree.mass(i) / tree.total_mass(), w[i] / 1e308 / share_total, 1e-15);  // exact shares
  }
  const auto f = frequencies(tree, 200000, 1);
  for (std::size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(f[i], w[i] / 1e308 / share_total, 0.006) << i;
  EXPECT_NEAR(tree.min_positive() / 2.5e307, 1.0, 1e-12);  // (kept as log2: to its rounding)
}

TEST(SumTree, WeightsBeyondADoubleKeepTheirRatios) {
  // (1e308)^2 and (5e307)^2 are beyond any double: their ratio is still 4.
  SumTree tree(3);
  const auto a = SumTree::power(1e308, 2.0), b = SumTree::power(5e307, 2.0), c = SumTree::power(1e-300, 3.0);
  EXPECT_GT(a.e, 2000);
  EXPECT_LT(c.e, -2000);
  tree.set(0, a);
  tree.set(1, b);
  tree.set(2, c);
  EXPECT_NEAR(tree.mass(0) / tree.mass(1), 4.0, 1e-12);
  EXPECT_EQ(tree.mass(2), 0.0);  // a share of 1e-1516: rounds to 0, never up
  EXPECT_EQ(tree.get(0), std::numeric_limits<double>::infinity());
  EXPECT_NEAR(tree.log2_leaf(0) - tree.log2_leaf(1), 2.0, 1e-9);
  EXPECT_NEAR(tree.log2_min_positive(), 3.0 * std::log2(1e-300), 1e-9);  // the minimum holds every positive leaf
  const auto f = frequencies(tree, 100000, 2);
  EXPECT_NEAR(f[0], 0.8, 0.006);
  EXPECT_EQ(f[2], 0.0);
  // Where a double has the value, power is std::pow's.
  const auto d = SumTree::power(3.0, 0.6);
  EXPECT_EQ(std::ldexp(d.m, d.e), std::pow(3.0, 0.6));
  const auto one = SumTree::power(0.0, 0.0);
  EXPECT_EQ(std::ldexp(one.m, one.e), 1.0);  // 0^0 = 1, as std::pow
  EXPECT_EQ(SumTree::power(0.0, 0.5).m, 0.0);
}

TEST(SumTree, TinyAndZeroLeavesKeepTheDistribution) {
  // All leaves tiny (1e-300 and subnormal 1e-310): shares exact, nothing "all zero".
  SumTree tree(4);
  const std::vector<double> w{1e-300, 0.0, 3e-300, 4.9e-310};
  for (std::size_t i = 0; i < w.size(); ++i) tree.set(i, w[i]);
  EXPECT_GT(tree.total_mass(), 0.5);  // rescaled: the largest leaf's mass in [1/2, 1)
  EXPECT_NEAR(tree.mass(2) / tree.mass(0), 3.0, 1e-15);
  EXPECT_EQ(tree.get(3), 4.9e-310);
  const auto f = frequencies(tree, 100000, 3);
  EXPECT_NEAR(f[0], 0.25, 0.006);
  EXPECT_NEAR(f[2], 0.75, 0.006);
  EXPECT_EQ(f[1], 0.0);
  EXPECT_NEAR(tree.min_positive(), 4.9e-310, 1e-320);
}

TEST(SumTree, MixedHugeAndTinyRecoverWhenTheHugeOnesGo) {
  SumTree tree(4);
  tree.set(0, 3.0);
  tree.set(1, 5.0);
  tree.set(2, 1e-300);
  tree.set(3, SumTree::power(1e308, 4.0));  // 2^4092: every other share rounds to ~0
  EXPECT_EQ(frequencies(tree, 1000, 4)[3], 1.0);
  tree.set(3, 0.0);  // gone: the others come back with exact shares (they were held exactly)
  EXPECT_DOUBLE_EQ(tree.mass(1) / tree.mass(0), 5.0 / 3.0);
  EXPECT_NEAR(tree.total(), 8.0, 1e-12);
  const auto f = frequencies(tree, 100000, 5);
  EXPECT_NEAR(f[0], 3.0 / 8, 0.006);
  EXPECT_NEAR(f[1], 5.0 / 8, 0.006);
  tree.set(0, 0.0);
  tree.set(1, 0.0);
  EXPECT_EQ(tree.find(0.5), 2u);  // only the tiny one is left, and it is drawn
  EXPECT_GT(tree.total_mass(), 0.0);
}

TEST(SumTree, BatchedSetsEqualOneByOne) {
  std::mt19937_64 rng(11);
  for (std::size_t n : {1u, 5u, 64u, 1000u}) {
    SumTree a(n), b(n);
    std::uniform_int_distribution<std::size_t> idx(0, n - 1);
    std::uniform_real_distribution<double> lg(-3000.0, 3000.0);
    for (int round = 0; round < 20; ++round) {
      std::vector<std::size_t> rows;
      std::vector<SumTree::Weight> ws;
      for (int k = 0; k < 40; ++k) {
        rows.push_back(idx(rng));
        const double l = lg(rng);
        ws.push_back(k % 7 == 0 ? SumTree::Weight{} : SumTree::Weight{0.5 + (l - std::floor(l)) / 2,
                                                                     static_cast<std::int32_t>(std::floor(l))});
      }
      for (std::size_t k = 0; k < rows.size(); ++k) a.set(rows[k], ws[k]);  // later ones win
      b.set(rows, ws);
      for (std::size_t i = 0; i < n; ++i) {
        ASSERT_EQ(a.get(i), b.get(i));
        ASSERT_EQ(a.log2_leaf(i), b.log2_leaf(i));
        // (The scales may differ by when each moved: the shares agree.)
        if (a.total_mass() > 0) {
          ASSERT_NEAR(a.mass(i) / a.total_mass(), b.mass(i) / b.total_mass(), 1e-12);
        }
      }
      ASSERT_EQ(a.log2_min_positive(), b.log2_min_positive());
    }
  }
  SumTree t(4);
  const std::vector<std::size_t> rows{0, 9};
  const std::vector<SumTree::Weight> ws{{0.5, 1}, {0.5, 1}};
  EXPECT_THROW(t.set(rows, ws), std::out_of_range);  // checked before anything changes
  EXPECT_EQ(t.get(0), 0.0);
  const std::vector<SumTree::Weight> bad{{0.5, 1}, {0.25, 1}};
  EXPECT_THROW(t.set(std::vector<std::size_t>{0, 1}, bad), std::invalid_argument);
  EXPECT_EQ(t.get(0), 0.0);
}

}  // namespace
}  // namespace trajview
