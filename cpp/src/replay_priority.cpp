// ReplayStore's priorities (replay.h): the sum tree over ring rows, TorchRL's
// leaf (p + eps)^alpha with the max priority as the default of new steps, and
// update_priority's rules (bad priorities and indices that never held a step
// are errors; steps overwritten since they were sampled are skipped, counted).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <stdexcept>
#include <string>
#include <vector>

#include "trajview/replay.h"

namespace trajview {

namespace {

std::string num(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  return buf;
}

}  // namespace

SumTree::Weight ReplayStore::leaf_of_priority(double p) const noexcept {
  // p + eps without overflowing: both are finite and >= 0, the sum may pass DBL_MAX.
  const double x = p + eps_;
  if (std::isfinite(x)) return SumTree::power(x, alpha_);
  // (p + eps)^alpha = (p/2 + eps/2)^alpha x 2^alpha.
  SumTree::Weight w = SumTree::power(p * 0.5 + eps_ * 0.5, alpha_);
  if (w.m == 0.0) return w;
  const double lg = std::log2(w.m) + static_cast<double>(w.e) + alpha_;
  const double whole = std::floor(lg);
  return {std::exp2(lg - whole) * 0.5, static_cast<std::int32_t>(whole) + 1};
}

SumTree::Weight ReplayStore::default_leaf() const noexcept { return leaf_of_priority(max_priority_); }

void ReplayStore::enable_priorities(double alpha, double eps) {
  if (!(alpha >= 0.0) || !(alpha <= SumTree::kMaxAlpha))
    throw std::invalid_argument("alpha must be in [0, " + num(SumTree::kMaxAlpha) + "], got " + num(alpha));
  if (!(eps >= 0.0) || !std::isfinite(eps)) throw std::invalid_argument("eps must be finite and >= 0, got " + num(eps));
  auto tree = std::make_unique<SumTree>(static_cast<std::size_t>(capacity_));
  std::unique_lock lock(mu_);
  alpha_ = alpha;
  eps_ = eps;
  max_priority_ = 1.0;
  const SumTree::Weight leaf = default_leaf();
  std::vector<std::size_t> rows;
  for (std::size_t r = 0; r < row_step_.size(); ++r)
    if (row_step_[r] >= 0 && find(row_uid_[r]) != nullptr) rows.push_back(r);
  tree->set(rows, std::vector<SumTree::Weight>(rows.size(), leaf));
  prio_ = std::move(tree);
  skipped_updates_ = 0;
}

std::int64_t ReplayStore::update_priority(std::span<const std::int64_t> rows, std::span<const double> priorities) {
  if (rows.size() != priorities.size())
    throw std::invalid_argument("update_priority: " + std::to_string(rows.size()) + " indices but " +
                                std::to_string(priorities.size()) + " priorities");
  for (std::size_t i = 0; i < priorities.size(); ++i)
    if (!(priorities[i] >= 0.0) || !std::isfinite(priorities[i]))
      throw std::invalid_argument("update_priority: the priority of index " + std::to_string(rows[i]) +
                                  " (position " + std::to_string(i) + ") must be finite and >= 0, got " +
                                  num(priorities[i]));
  std::unique_lock lock(mu_);
  if (!prio_) throw std::invalid_argument("update_priority: this replay buffer has no priorities (not prioritized)");
  // Every index is checked before anything changes.
  const std::int64_t lo = std::max<std::int64_t>(0, head_ - capacity_);
  std::int64_t skipped = 0;
  for (std::int64_t g : rows) {
    if (g < 0 || g >= head_)
      throw std::invalid_argument("update_priority: index " + std::to_string(g) +
                                  " never held a row (indices are the stored rows of info['index'], 0 to " +
                                  std::to_string(head_ - 1) + " so far)");
    if (g >= lo && row_step_[static_cast<std::size_t>(g % capacity_)] == kTailRow)
      throw std::invalid_argument("update_priority: index " + std::to_string(g) +
                                  " holds a final observation, never a step (indices are info['index'] of a sample)");
  }
  for (std::int64_t g : rows) {  // the rows' bookkeeping, fetched together (random rows of a large ring)
    const auto r = static_cast<std::size_t>(g % capacity_);
    __builtin_prefetch(&row_uid_[r]);
    __builtin_prefetch(&row_step_[r]);
  }
  upd_rows_.clear();
  upd_leaves_.clear();
  double mx = max_priority_;
  for (std::size_t i = 0; i < rows.size(); ++i) {
    std::int64_t step = 0;
    if (step_at(rows[i], &step) == nullptr) {  // overwritten or dropped since it was sampled
      ++skipped;
      continue;
    }
    mx = std::max(mx, priorities[i]);
    upd_rows_.push_back(static_cast<std::size_t>(rows[i] % capacity_));
    upd_leaves_.push_back(leaf_of_priority(priorities[i]));
  }
  prio_->set(upd_rows_, upd_leaves_);
  max_priority_ = mx;
  skipped_updates_ += skipped;
  return skipped;
}

std::vector<double> ReplayStore::priority_leaves(std::span<const std::int64_t> rows) const {
  std::shared_lock lock(mu_);
  if (!prio_) throw std::invalid_argument("priorities: this replay buffer has no priorities (not prioritized)");
  std::vector<double> out;
  out.reserve(rows.size());
  for (std::int64_t g : rows) {
    std::int64_t step = 0;
    out.push_back(step_at(g, &step) == nullptr ? 0.0 : prio_->get(static_cast<std::size_t>(g % capacity_)));
  }
  return out;
}

double ReplayStore::max_priority() const {
  std::shared_lock lock(mu_);
  return max_priority_;
}

std::int64_t ReplayStore::skipped_priority_updates() const {
  std::shared_lock lock(mu_);
  return skipped_updates_;
}

}  // namespace trajview
