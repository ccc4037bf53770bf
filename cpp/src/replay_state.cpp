// ReplayStore persistence: meta() (the bookkeeping besides the rows) and
// restore(), which checks every field of a ReplayMeta against the store's
// capacity and against itself before changing anything: a restored state read
// from a file (damaged or crafted) raises std::invalid_argument naming the
// field instead of leaving indices that read out of bounds later.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <stdexcept>
#include <string>
#include <unordered_set>
#include <vector>

#include "trajview/replay.h"

namespace trajview {

namespace {

[[noreturn]] void refuse(const std::string& what) { throw std::invalid_argument("restore: " + what); }

std::string str(std::int64_t v) { return std::to_string(v); }

void check_real(double v, const char* name) {
  if (!std::isfinite(v) || v < 0.0) refuse(std::string(name) + " must be finite and >= 0, got " + std::to_string(v));
}

/// What a ring row holds in a checked meta.
enum RowUse : std::uint8_t { kFree = 0, kStep = 1, kFinalObs = 2 };

}  // namespace

ReplayMeta ReplayStore::meta() const {
  std::shared_lock lock(mu_);
  ReplayMeta m;
  m.head = head_;
  m.next_uid = next_uid_;
  m.trajectories.assign(trajs_.begin(), trajs_.end());
  m.prioritized = prio_ != nullptr;
  m.alpha = alpha_;
  m.eps = eps_;
  m.max_priority = max_priority_;
  if (prio_) {
    m.leaves.reserve(static_cast<std::size_t>(capacity_));
    for (std::size_t r = 0; r < static_cast<std::size_t>(capacity_); ++r) m.leaves.push_back(prio_->weight(r));
  }
  return m;
}

void ReplayStore::check_meta(const ReplayMeta& m) const {
  if (m.head < 0 || m.head > kMaxRestoreCount) refuse("head must be in [0, 2^62], got " + str(m.head));
  if (m.next_uid < 0 || m.next_uid > kMaxRestoreCount) refuse("next_uid must be in [0, 2^62], got " + str(m.next_uid));
  const std::int64_t lo = std::max<std::int64_t>(0, m.head - capacity_);
  std::vector<std::uint8_t> use(static_cast<std::size_t>(capacity_), kFree);
  std::unordered_set<std::int64_t> open_keys;
  for (std::size_t i = 0; i < m.trajectories.size(); ++i) {
    const ReplayTrajectory& tr = m.trajectories[i];
    const std::string who = "trajectory " + std::to_string(i) + " (uid " + str(tr.uid) + ")";
    if (tr.uid < 0 || tr.uid >= m.next_uid)
      refuse(who + ": a uid must be in [0, next_uid=" + str(m.next_uid) + ")");
    if (i > 0 && tr.uid != m.trajectories[i - 1].uid + 1)
      refuse(who + ": uids must be consecutive, oldest first (the one before is " + str(m.trajectories[i - 1].uid) + ")");
    if (tr.pieces.empty()) refuse(who + " has no pieces");
    if (tr.first_g != tr.pieces.front().g0)
      refuse(who + ": first row " + str(tr.first_g) + " is not its first piece's (" + str(tr.pieces.front().g0) + ")");
    if (i > 0 && tr.first_g <= m.trajectories[i - 1].first_g)
      refuse(who + ": trajectories must be ordered by their first row (oldest first)");
    std::int64_t steps = 0;
    std::int64_t end = lo;  // rows before this one are taken by the trajectory's earlier pieces
    for (std::size_t j = 0; j < tr.pieces.size(); ++j) {
      const ReplayPiece& pc = tr.pieces[j];
      const std::string piece = who + " piece " + std::to_string(j);
      const std::int64_t tail = pc.tail ? 1 : 0;
      if (pc.n < 1) refuse(piece + ": must hold >= 1 step, got " + str(pc.n));
      if (pc.step0 != steps) refuse(piece + ": starts at step " + str(pc.step0) + ", expected " + str(steps));
      // g0 in [lo, head) first, so that head - g0 - tail cannot overflow.
      if (pc.g0 < end || pc.g0 >= m.head || pc.n > m.head - pc.g0 - tail)
        refuse(piece + ": " + str(pc.n) + " rows from row " + str(pc.g0) + (pc.tail ? " and a final observation" : "") +
               " are not within the stored rows [" + str(lo) + ", head=" + str(m.head) + ") after its earlier pieces");
      for (std::int64_t g = pc.g0; g < pc.g0 + pc.n + tail; ++g) {
        auto& u = use[static_cast<std::size_t>(g % capacity_)];
        if (u != kFree) refuse(piece + ": row " + str(g) + " is claimed by another piece too");
        u = g < pc.g0 + pc.n ? kStep : kFinalObs;
      }
      steps += pc.n;  // <= capacity: the rows are distinct
      end = pc.g0 + pc.n + tail;
    }
    if (steps != tr.steps) refuse(who + ": holds " + str(tr.steps) + " steps, its pieces " + str(steps));
    if (tr.open && !open_keys.insert(tr.key).second)
      refuse(who + ": a second open trajectory with key " + str(tr.key));
  }
  if (!m.trajectories.empty() && m.next_uid != m.trajectories.back().uid + 1)
    refuse("next_uid must be the newest trajectory's uid + 1 (" + str(m.trajectories.back().uid + 1) + "), got " +
           str(m.next_uid));
  check_real(m.alpha, "alpha");
  check_real(m.eps, "eps");
  check_real(m.max_priority, "max_priority");
  if (!m.prioritized) {
    if (!m.leaves.empty()) refuse("priority leaves given to a store that is not prioritized");
    return;
  }
  if (m.leaves.size() != static_cast<std::size_t>(capacity_))
    refuse("expected " + str(capacity_) + " priority leaves, got " + std::to_string(m.leaves.size()));
  for (std::size_t r = 0; r < m.leaves.size(); ++r) {
    const SumTree::Weight w = m.leaves[r];
    if (!(w.m == 0.0 || (w.m >= 0.5 && w.m < 1.0)))
      refuse("priority leaf " + std::to_string(r) + ": mantissa must be 0 or in [0.5, 1), got " + std::to_string(w.m));
    if (use[r] != kStep && w.m != 0.0)
      refuse("priority leaf " + std::to_string(r) + " is " + std::to_string(w.m) + " x 2^" + std::to_string(w.e) +
             " but the row holds no step (it must be 0)");
  }
}

void ReplayStore::reindex_rows() {
  std::fill(row_uid_.begin(), row_uid_.end(), -1);
  std::fill(row_step_.begin(), row_step_.end(), -1);
  for (const auto& tr : trajs_) {
    for (const auto& pc : tr.pieces) {
      for (std::int64_t i = 0; i < pc.n; ++i) {
        const auto r = static_cast<std::size_t>((pc.g0 + i) % capacity_);
        row_uid_[r] = tr.uid;
        row_step_[r] = pc.step0 + i;
      }
      if (pc.tail) row_step_[static_cast<std::size_t>((pc.g0 + pc.n) % capacity_)] = kTailRow;
    }
  }
}

void ReplayStore::restore(ReplayMeta m) {
  check_meta(m);  // everything first: a restore that throws changes nothing
  std::int64_t live = 0;
  for (const auto& tr : m.trajectories) live += tr.steps;
  std::unique_ptr<SumTree> tree;
  if (m.prioritized) {
    tree = std::make_unique<SumTree>(static_cast<std::size_t>(capacity_));
    std::vector<std::size_t> rows(m.leaves.size());
    for (std::size_t r = 0; r < rows.size(); ++r) rows[r] = r;
    tree->set(rows, m.leaves);  // one pass, one rescale at most
  }
  std::unique_lock lock(mu_);
  head_ = m.head;
  next_uid_ = m.next_uid;
  trajs_.assign(m.trajectories.begin(), m.trajectories.end());
  live_steps_ = live;
  open_.clear();
  for (const auto& tr : trajs_)
    if (tr.open) open_[tr.key] = tr.uid;
  prio_ = std::move(tree);
  alpha_ = m.alpha;
  eps_ = m.eps;
  max_priority_ = m.max_priority;
  reindex_rows();
  skipped_updates_ = 0;
}

}  // namespace trajview
