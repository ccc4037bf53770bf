// SumTree: a segment tree of non-negative leaf values with O(log n) update,
// total, minimum and prefix-sum search, the structure under prioritized replay.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trajview {

/// `size` leaves (all 0 at first) in a complete binary tree of sums and of
/// minimums. Invariant: every inner node holds the sum (sum tree) and the
/// minimum over its positive leaves (min tree; +inf where none is positive)
/// of its subtree, so `total()` and `min_positive()` are O(1) and `set` and
/// `find` are O(log size). Not thread safe: the owner locks.
class SumTree {
 public:
  /// Throws std::invalid_argument for size < 1 or a size whose tree would
  /// not fit kMaxAllocBytes.
  explicit SumTree(std::size_t size);

  std::size_t size() const noexcept { return size_; }
  /// Sets leaf i (i < size) to v; v must be finite and >= 0
  /// (std::invalid_argument / std::out_of_range otherwise).
  void set(std::size_t i, double v);
  double get(std::size_t i) const;
  /// Sum of all leaves.
  double total() const noexcept { return sum_[1]; }
  /// Minimum over the positive leaves (+inf when none is positive).
  double min_positive() const noexcept { return min_[1]; }
  /// The leaf i with prefix(i) <= mass < prefix(i) + leaf(i), where prefix(i)
  /// is the sum of leaves before i; always a positive leaf. Requires
  /// total() > 0; mass is clamped into [0, total()).
  std::size_t find(double mass) const noexcept;
  /// All leaf values, in order (for persistence).
  std::vector<double> leaves() const;

 private:
  std::size_t size_;
  std::size_t base_;  // first leaf node (a power of two >= size)
  std::vector<double> sum_;
  std::vector<double> min_;
};

}  // namespace trajview
