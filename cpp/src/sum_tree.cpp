// SumTree (sum_tree.h): an array-backed segment tree, node k's children at 2k and 2k + 1,
// its sums in a power-of-two scale that follows the largest leaf.
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
/// A leaf may reach 2^kHigh in scale: 2^40 leaves (kMaxCapacity) then sum below 2^1022.
constexpr std::int64_t kHigh = 982;
/// A total mass below 2^kLow (but some leaf positive) rescales.
constexpr double kLow = 0x1p-100;

double lg_of(const SumTree::Weight& w) noexcept {
  return w.m > 0.0 ? static_cast<double>(w.e) + std::log2(w.m) : -kInf;
}

std::string leaf_name(std::size_t i) { return "SumTree: leaf " + std::to_string(i); }
}  // namespace

SumTree::Weight SumTree::power(double x, double alpha) noexcept {
  if (alpha == 0.0) return {0.5, 1};  // x^0 = 1, 0^0 included (std::pow's convention)
  if (!(x > 0.0)) return {};
  int e = 0;
  const double v = std::pow(x, alpha);
  if (std::isnormal(v)) {
    const double m = std::frexp(v, &e);
    return {m, static_cast<std::int32_t>(e)};
  }
  // Beyond a double's range: x = mx 2^ex, x^alpha = 2^(alpha ex + alpha log2 mx).
  const double mx = std::frexp(x, &e);
  const double lg = alpha * static_cast<double>(e) + alpha * std::log2(mx);
  const double whole = std::floor(lg);
  return {std::exp2(lg - whole) * 0.5, static_cast<std::int32_t>(whole) + 1};
}

SumTree::SumTree(std::size_t size) : size_(size), base_(1) {
  if (size_ < 1) throw std::invalid_argument("SumTree: size must be >= 1, got 0");
  while (base_ < size_) base_ = checked_mul(base_, std::size_t{2}, "SumTree: leaves");
  const std::size_t nodes = checked_mul(base_, std::size_t{2}, "SumTree: nodes");
  (void)check_bytes(checked_add(checked_mul(nodes, sizeof(Node), "SumTree: bytes"),
                                checked_mul(size_, sizeof(Weight), "SumTree: bytes"), "SumTree: bytes"),
                    kMaxAllocBytes, "SumTree: bytes");
  nodes_.assign(nodes, Node{0.0, kInf});
  w_.assign(size_, Weight{});
}

void SumTree::check(std::size_t i, Weight w) const {
  if (i >= size_)
    throw std::out_of_range(leaf_name(i) + " out of range [0, " + std::to_string(size_) + ")");
  if (!(w.m == 0.0 || (w.m >= 0.5 && w.m < 1.0)))
    throw std::invalid_argument(leaf_name(i) + ": a weight's mantissa must be 0 or in [0.5, 1), got " +
                                std::to_string(w.m));
}

void SumTree::put(std::size_t i, Weight w) noexcept {
  if (w.m == 0.0) w.e = 0;
  w_[i] = w;
  const std::size_t k = base_ + i;
  nodes_[k].sum = w.m == 0.0 ? 0.0 : std::ldexp(w.m, static_cast<int>(std::clamp<std::int64_t>(w.e - scale_, -2000, 2000)));
  nodes_[k].min_lg = w.m > 0.0 ? lg_of(w) : kInf;
}

void SumTree::pull(std::size_t k) noexcept {
  const Node& l = nodes_[2 * k];
  const Node& r = nodes_[2 * k + 1];
  nodes_[k] = Node{l.sum + r.sum, std::min(l.min_lg, r.min_lg)};
}

void SumTree::set(std::size_t i, double v) {
  if (!(v >= 0.0) || !std::isfinite(v))
    throw std::invalid_argument(leaf_name(i) + ": a leaf value must be finite and >= 0, got " + std::to_string(v));
  int e = 0;
  const double m = std::frexp(v, &e);
  set(i, Weight{m, static_cast<std::int32_t>(e)});
}

void SumTree::set(std::size_t i, Weight w) {
  check(i, w);
  put(i, w);
  for (std::size_t k = (base_ + i) / 2; k >= 1; k /= 2) pull(k);
  keep_in_band(w.m > 0.0 && w.e - scale_ > kHigh);
}

void SumTree::set(std::span<const std::size_t> idx, std::span<const Weight> w) {
  if (idx.size() != w.size())
    throw std::invalid_argument("SumTree: " + std::to_string(idx.size()) + " leaves but " + std::to_string(w.size()) +
                                " weights");
  for (std::size_t k = 0; k < idx.size(); ++k) check(idx[k], w[k]);
  for (std::size_t i : idx) {  // the leaves, fetched together (random leaves of a large tree)
    __builtin_prefetch(&nodes_[base_ + i]);
    __builtin_prefetch(&w_[i]);
  }
  bool grew = false;
  scratch_.clear();
  for (std::size_t k = 0; k < idx.size(); ++k) {
    put(idx[k], w[k]);
    grew = grew || (w[k].m > 0.0 && w[k].e - scale_ > kHigh);
    scratch_.push_back((base_ + idx[k]) / 2);
  }
  // Level by level (all leaves are on the last one): each parent once.
  std::sort(scratch_.begin(), scratch_.end());
  scratch_.erase(std::unique(scratch_.begin(), scratch_.end()), scratch_.end());
  while (!scratch_.empty()) {
    std::size_t out = 0;
    for (std::size_t k : scratch_) {
      pull(k);
      if (k > 1 && (out == 0 || scratch_[out - 1] != k / 2)) scratch_[out++] = k / 2;
    }
    scratch_.resize(out);
  }
  keep_in_band(grew);
}

void SumTree::keep_in_band(bool grew) noexcept {
  if (grew || (nodes_[1].min_lg < kInf && nodes_[1].sum < kLow)) rescale();
}

void SumTree::rescale() noexcept {
  std::int64_t top = std::numeric_limits<std::int64_t>::min();
  for (const auto& w : w_)
    if (w.m > 0.0) top = std::max<std::int64_t>(top, w.e);
  if (top == std::numeric_limits<std::int64_t>::min()) return;
  scale_ = top;
  for (std::size_t i = 0; i < size_; ++i) put(i, w_[i]);
  for (std::size_t k = base_ - 1; k >= 1; --k) pull(k);
}

double SumTree::get(std::size_t i) const {
  const Weight w = weight(i);
  if (w.m == 0.0) return 0.0;
  return w.e > 1100 ? kInf : std::ldexp(w.m, static_cast<int>(std::max<std::int32_t>(w.e, -1100)));
}

SumTree::Weight SumTree::weight(std::size_t i) const {
  if (i >= size_) throw std::out_of_range(leaf_name(i) + " out of range [0, " + std::to_string(size_) + ")");
  return w_[i];
}

double SumTree::log2_leaf(std::size_t i) const { return lg_of(weight(i)); }

double SumTree::total() const noexcept {
  const double s = nodes_[1].sum;
  if (s == 0.0) return 0.0;
  int e = 0;
  const double m = std::frexp(s, &e);
  const std::int64_t ex = e + scale_;
  return ex > 1100 ? kInf : std::ldexp(m, static_cast<int>(std::max<std::int64_t>(ex, -1100)));
}

double SumTree::min_positive() const noexcept {
  const double lg = nodes_[1].min_lg;
  return lg == kInf ? kInf : std::exp2(lg);
}

std::size_t SumTree::find(double u) const noexcept {
  std::size_t out = 0;
  find(std::span<const double>(&u, 1), std::span<std::size_t>(&out, 1));
  return out;
}

void SumTree::find(std::span<const double> u, std::span<std::size_t> out) const noexcept {
  // Level-synchronous: out[q] holds query q's node, mass[q] what is left of its mass. Within a level the
  // queries are independent, so their reads of the (large) tree are in flight together.
  constexpr std::size_t kBlock = 256;
  double mass[kBlock];
  for (std::size_t b0 = 0; b0 < u.size(); b0 += kBlock) {
    const std::size_t nb = std::min(kBlock, u.size() - b0);
    for (std::size_t q = 0; q < nb; ++q) {
      mass[q] = std::clamp(u[b0 + q], 0.0, 1.0) * nodes_[1].sum;
      out[b0 + q] = 1;
    }
    for (std::size_t level = base_; level > 1; level /= 2) {
      for (std::size_t q = 0; q < nb; ++q) {
        const std::size_t k = out[b0 + q];
        const double left = nodes_[2 * k].sum;
        // Go right only when the right subtree has mass: rounding can never lead into an empty subtree.
        const bool right = !(mass[q] < left) && nodes_[2 * k + 1].sum > 0.0;
        mass[q] -= right ? left : 0.0;
        out[b0 + q] = 2 * k + (right ? 1 : 0);
      }
    }
    for (std::size_t q = 0; q < nb; ++q) {
      std::size_t i = out[b0 + q] - base_;
      // Rounding at the very end (mass >= total): step back to the last leaf with mass.
      while (i > 0 && nodes_[base_ + i].sum <= 0.0) --i;
      out[b0 + q] = i;
    }
  }
}

double SumTree::log2_leaf_fast(std::size_t i) const noexcept {
  const double m = nodes_[base_ + i].sum;
  if (std::isnormal(m)) return std::log2(m) + static_cast<double>(scale_);
  return lg_of(w_[i]);
}

}  // namespace trajview
