// SumTree: a segment tree of non-negative leaf weights with O(log n) update,
// total, minimum and proportional search, the structure under prioritized
// replay. Any weight a double can name, and those beyond it (given by their
// base-2 logarithm), keeps the sampling distribution right: sums never
// overflow to inf.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace trajview {

/// `size` leaves (all 0 at first) in a complete binary tree of sums and of
/// minimums.
///
/// Each leaf is a weight w = m x 2^e >= 0 held exactly as given (m in
/// [0.5, 1), e an int; w may lie far beyond a double's range, e.g. a priority
/// of 1e308 raised to alpha = 2). The sums are kept in a shared power-of-two
/// scale: node sums add m x 2^(e - scale), and `scale` moves (all sums rebuilt,
/// O(size)) when the largest leaf leaves a band: a leaf above 2^982 in scale
/// (so a total of up to 2^40 leaves stays below 2^1022), or a total below
/// 2^-100. So the relative weights stay exact to double rounding for every leaf
/// within 2^-882 of the largest (a leaf further below has a share under 1e-265
/// and rounds towards 0, never up), and the total never overflows. The minimum
/// is kept over log2 of the leaves, so it holds for every positive leaf.
///
/// Invariant: every inner node holds the scaled sum and the minimum log2 over
/// its positive leaves (+inf where none is positive) of its subtree, so the
/// total and the minimum are O(1) and `set` and `find` are O(log size). Not
/// thread safe: the owner locks.
class SumTree {
 public:
  /// A leaf weight m x 2^e (m == 0: a zero leaf).
  struct Weight {
    double m = 0.0;
    std::int32_t e = 0;
  };
  /// The weight x^alpha for x >= 0 finite and alpha in [0, kMaxAlpha] (0^0 is
  /// 1), exactly std::pow's value where that is a normal double, and the
  /// same value beyond a double's range otherwise.
  static Weight power(double x, double alpha) noexcept;
  /// Exponents of `power` stay below 2^31 for alpha up to this.
  static constexpr double kMaxAlpha = 1e6;

  /// Throws std::invalid_argument for size < 1 or a size whose tree would
  /// not fit kMaxAllocBytes.
  explicit SumTree(std::size_t size);

  std::size_t size() const noexcept { return size_; }
  /// Sets leaf i (i < size) to v; v must be finite and >= 0
  /// (std::invalid_argument / std::out_of_range otherwise).
  void set(std::size_t i, double v);
  /// Sets leaf i to w (m in [0.5, 1) or 0; std::invalid_argument otherwise).
  void set(std::size_t i, Weight w);
  /// Sets leaves idx[k] to w[k] in one pass over the tree (each inner node
  /// recomputed once); a later entry for the same leaf wins. Validates every
  /// entry before changing anything.
  void set(std::span<const std::size_t> idx, std::span<const Weight> w);
  /// The leaf's weight as a double (+inf beyond a double's range).
  double get(std::size_t i) const;
  /// The leaf's weight, exactly.
  Weight weight(std::size_t i) const;
  /// log2 of the leaf's weight (-inf for 0).
  double log2_leaf(std::size_t i) const;
  /// The leaf's share in the current scale (what `find` draws by; 0 for a
  /// zero leaf, and for one under 2^-1074 in scale).
  double mass(std::size_t i) const noexcept { return nodes_[base_ + i].sum; }
  /// Sum of all masses (in the current scale): > 0 iff some leaf can be drawn.
  double total_mass() const noexcept { return nodes_[1].sum; }
  /// Sum of all leaves (+inf beyond a double's range).
  double total() const noexcept;
  /// log2 of the smallest positive leaf (+inf when none is positive).
  double log2_min_positive() const noexcept { return nodes_[1].min_lg; }
  /// The smallest positive leaf (+inf when none is positive; to double
  /// rounding of its log2).
  double min_positive() const noexcept;
  /// The leaf i with prefix(i) <= u x total_mass() < prefix(i) + mass(i),
  /// where prefix(i) is the sum of masses before i; always a leaf with
  /// mass > 0. Requires total_mass() > 0; u is clamped into [0, 1).
  std::size_t find(double u) const noexcept;
  /// find(u[k]) for every k into out[k], descending the tree one level at a
  /// time for all of them (their memory reads overlap: a batch of draws from
  /// a large tree waits for memory once per level, not once per node).
  void find(std::span<const double> u, std::span<std::size_t> out) const noexcept;
  /// log2 of leaf i from its mass where that is exact enough (a normal
  /// double), else from the leaf itself: the importance weights' input,
  /// without a second memory read per draw.
  double log2_leaf_fast(std::size_t i) const noexcept;
  /// The current scale (sums are in units of 2^scale).
  std::int64_t scale() const noexcept { return scale_; }

 private:
  void check(std::size_t i, Weight w) const;
  void put(std::size_t i, Weight w) noexcept;
  void pull(std::size_t k) noexcept;
  /// Rebuilds every sum at the scale that puts the largest leaf in [1/2, 1).
  void rescale() noexcept;
  /// Moves the scale if the leaves left its band (`grew`: a leaf set above it).
  void keep_in_band(bool grew) noexcept;

  std::size_t size_;
  std::size_t base_;  // first leaf node (a power of two >= size)
  /// Per node: the scaled sum of its leaves' masses and the smallest log2 of its positive leaves (+inf: none),
  /// side by side (an update reads and writes both: one cache line per level).
  struct Node {
    double sum;
    double min_lg;
  };
  std::vector<Node> nodes_;
  std::vector<Weight> w_;  // per leaf, exactly
  std::int64_t scale_ = 0;
  std::vector<std::size_t> scratch_;
};

}  // namespace trajview
