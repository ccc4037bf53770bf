// SumTree (sum_tree.h): an array-backed segment tree, node k's children at 2k and 2k + 1.
#include "trajview/sum_tree.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <stdexcept>
#include <string>

#include "trajview/buffer.h"
#include "trajview/checked.h"

namespace trajview {

namespace {
constexpr double kInf = std::numeric_limits<double>::infinity();
}  // namespace

SumTree::SumTree(std::size_t size) : size_(size), base_(1) {
  if (size_ < 1) throw std::invalid_argument("SumTree: size must be >= 1, got 0");
  while (base_ < size_) base_ = checked_mul(base_, std::size_t{2}, "SumTree: leaves");
  const std::size_t nodes = checked_mul(base_, std::size_t{2}, "SumTree: nodes");
  (void)check_bytes(checked_mul(nodes, 2 * sizeof(double), "SumTree: bytes"), kMaxAllocBytes, "SumTree: bytes");
  sum_.assign(nodes, 0.0);
  min_.assign(nodes, kInf);
}

void SumTree::set(std::size_t i, double v) {
  if (i >= size_)
    throw std::out_of_range("SumTree: leaf " + std::to_string(i) + " out of range [0, " + std::to_string(size_) + ")");
  if (!(v >= 0.0) || !std::isfinite(v))
    throw std::invalid_argument("SumTree: a leaf value must be finite and >= 0, got " + std::to_string(v));
  std::size_t k = base_ + i;
  sum_[k] = v;
  min_[k] = v > 0.0 ? v : kInf;
  for (k /= 2; k >= 1; k /= 2) {
    sum_[k] = sum_[2 * k] + sum_[2 * k + 1];
    min_[k] = std::min(min_[2 * k], min_[2 * k + 1]);
  }
}

double SumTree::get(std::size_t i) const {
  if (i >= size_)
    throw std::out_of_range("SumTree: leaf " + std::to_string(i) + " out of range [0, " + std::to_string(size_) + ")");
  return sum_[base_ + i];
}

std::size_t SumTree::find(double mass) const noexcept {
  mass = std::max(0.0, mass);
  std::size_t k = 1;
  while (k < base_) {
    const double left = sum_[2 * k];
    // Go right only when the right subtree has mass: rounding can never lead into an empty subtree.
    if (mass < left || sum_[2 * k + 1] <= 0.0) {
      k = 2 * k;
    } else {
      mass -= left;
      k = 2 * k + 1;
    }
  }
  std::size_t i = k - base_;
  // Rounding at the very end (mass >= total): step back to the last positive leaf.
  while (i > 0 && sum_[base_ + i] <= 0.0) --i;
  return i;
}

std::vector<double> SumTree::leaves() const {
  return {sum_.begin() + static_cast<std::ptrdiff_t>(base_),
          sum_.begin() + static_cast<std::ptrdiff_t>(base_ + size_)};
}

}  // namespace trajview
