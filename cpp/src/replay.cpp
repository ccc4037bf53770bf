// ReplayStore: the ring of rows and the trajectories in it: construction,
// add (cutting rows into pieces, joining open trajectories, writing final
// observations), dropping overwritten trajectories, and the accessors.
// Sampling and view building are in replay_sample.cpp, persistence (meta,
// restore and its checks) in replay_state.cpp.
#include "trajview/replay.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <utility>

#include "trajview/checked.h"

namespace trajview {

namespace {

/// Whether timestep b is the one after a (without overflowing at the int64 ends).
bool follows(std::int64_t a, std::int64_t b) noexcept {
  return a != std::numeric_limits<std::int64_t>::max() && b == a + 1;
}

}  // namespace

std::vector<std::int64_t> piece_starts(std::int64_t n, const std::int64_t* keys, const std::uint8_t* done) {
  std::vector<std::int64_t> starts;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto ui = static_cast<std::size_t>(i);
    if (i == 0 || keys[ui] != keys[ui - 1] || done[ui - 1] != 0) starts.push_back(i);
  }
  return starts;
}

std::int64_t ReplayTrajectory::tail_g() const noexcept {
  if (pieces.empty() || !pieces.back().tail) return -1;
  return pieces.back().g0 + pieces.back().n;
}

ReplayStore::ReplayStore(std::int64_t capacity, std::vector<ColumnSpec> columns)
    : ReplayStore(capacity, std::move(columns), {}, nullptr) {}

ReplayStore::ReplayStore(std::int64_t capacity, std::vector<ColumnSpec> columns, std::vector<std::byte*> rings,
                         std::shared_ptr<const void> owner)
    : capacity_(capacity), columns_(std::move(columns)), owner_(std::move(owner)) {
  if (capacity_ < 1) throw std::invalid_argument("capacity must be >= 1, got " + std::to_string(capacity_));
  if (capacity_ > kMaxCapacity)
    throw std::invalid_argument("capacity must be <= " + std::to_string(kMaxCapacity) + " (kMaxCapacity), got " +
                                std::to_string(capacity_));
  if (columns_.empty()) throw std::invalid_argument("a replay buffer needs at least one column, got none");
  // Every column is checked and sized before anything is allocated.
  std::vector<std::size_t> bytes;
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    const auto& col = columns_[c];
    check_column(columns_, c);
    const std::string what = "column '" + col.name + "': capacity x row bytes";
    bytes.push_back(check_bytes(checked_mul(static_cast<std::size_t>(capacity_), col.row_bytes(), what),
                                kMaxAllocBytes, what));
  }
  if (rings.empty()) {
    for (std::size_t b : bytes) owned_.push_back(allocate_aligned(b));
    for (auto& o : owned_) base_.push_back(o.get());
  } else {
    if (rings.size() != columns_.size())
      throw std::invalid_argument("expected one ring per column (" + std::to_string(columns_.size()) + "), got " +
                                  std::to_string(rings.size()));
    for (std::size_t c = 0; c < rings.size(); ++c)
      if (rings[c] == nullptr && bytes[c] > 0)
        throw std::invalid_argument("column '" + columns_[c].name + "': its ring is null");
    base_ = std::move(rings);
  }
  row_uid_.assign(static_cast<std::size_t>(capacity_), -1);
  row_step_.assign(static_cast<std::size_t>(capacity_), -1);
}

std::int64_t ReplayStore::column_index(const std::string& name) const noexcept {
  return find_column_index(columns_, name);
}

const ReplayTrajectory* ReplayStore::find(std::int64_t uid) const noexcept {
  if (trajs_.empty() || uid < trajs_.front().uid || uid > trajs_.back().uid) return nullptr;
  return &trajs_[static_cast<std::size_t>(uid - trajs_.front().uid)];
}

std::int64_t ReplayStore::step_g(const ReplayTrajectory& t, std::int64_t j) noexcept {
  // Pieces are few (one per add that touched the trajectory): binary search by step0.
  auto it = std::upper_bound(t.pieces.begin(), t.pieces.end(), j,
                             [](std::int64_t v, const ReplayPiece& p) { return v < p.step0; });
  const ReplayPiece& p = *(it - 1);
  return p.g0 + (j - p.step0);
}

void ReplayStore::add(std::int64_t n, std::span<const ArrayIn> inputs, std::span<const ArrayIn> next_obs,
                      const std::int64_t* keys, const std::int64_t* t, const std::uint8_t* done) {
  if (n < 0) throw std::invalid_argument("add: n must be >= 0, got " + std::to_string(n));
  if (inputs.size() != columns_.size())
    throw std::invalid_argument("add: expected " + std::to_string(columns_.size()) + " columns, got " +
                                std::to_string(inputs.size()));
  auto check = [&](const ColumnSpec& col, const ArrayIn& in, const char* what) {
    check_array(col, in, n, what);
    if (in.data == nullptr && n > 0 && col.row_bytes() > 0)
      throw std::invalid_argument(std::string(what) + " '" + col.name + "': data is null");
  };
  for (std::size_t c = 0; c < columns_.size(); ++c) check(columns_[c], inputs[c], "column");
  const bool with_next = !next_obs.empty();
  if (with_next) {
    if (next_obs.size() != columns_.size())
      throw std::invalid_argument("add: next_obs must be empty or hold one entry per column (" +
                                  std::to_string(columns_.size()) + "), got " + std::to_string(next_obs.size()));
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      if (columns_[c].kind == ColumnKind::Observation) {
        check(columns_[c], next_obs[c], "next observation of column");
      } else if (next_obs[c].data != nullptr) {
        throw std::invalid_argument("add: column '" + columns_[c].name +
                                    "' is not an observation column, so it takes no next observations");
      }
    }
  }
  if (n == 0) return;
  if (keys == nullptr || done == nullptr) throw std::invalid_argument("add: keys and done flags are required");

  // Pieces: [start, next start) of each piece_starts entry.
  std::vector<std::pair<std::int64_t, std::int64_t>> pieces;
  const std::vector<std::int64_t> firsts = piece_starts(n, keys, done);
  for (std::size_t p = 0; p < firsts.size(); ++p)
    pieces.emplace_back(firsts[p], p + 1 < firsts.size() ? firsts[p + 1] : n);
  const std::int64_t total = n + (with_next ? static_cast<std::int64_t>(pieces.size()) : 0);
  if (total > capacity_)
    throw std::invalid_argument("add: " + std::to_string(n) + " steps" +
                                (with_next ? " plus " + std::to_string(pieces.size()) + " final-observation rows" : "") +
                                " exceed capacity " + std::to_string(capacity_));

  std::unique_lock lock(mu_);
  const std::int64_t final_head = head_ + total;
  for (const auto& [p0, p1] : pieces) {
    const auto u0 = static_cast<std::size_t>(p0);
    const auto u1 = static_cast<std::size_t>(p1 - 1);
    const std::int64_t key = keys[u0];
    ReplayTrajectory* tr = nullptr;
    bool starts = t == nullptr || t[u0] == 0;
    if (auto it = open_.find(key); it != open_.end()) {
      auto* old = const_cast<ReplayTrajectory*>(find(it->second));
      const bool continues = old != nullptr && old->open && (t == nullptr || follows(old->last_t, t[u0]));
      // Joining must not leave the trajectory partly overwritten by this add.
      if (continues && old->first_g >= final_head - capacity_) {
        tr = old;
      } else {
        if (old != nullptr) old->open = false;
        open_.erase(it);
        if (continues) starts = false;  // a continuation whose start is gone
      }
    }
    if (tr == nullptr) {
      ReplayTrajectory fresh;
      fresh.uid = next_uid_++;
      fresh.key = key;
      fresh.first_g = head_;
      fresh.steps = 0;
      fresh.starts_episode = starts;
      trajs_.push_back(std::move(fresh));
      tr = &trajs_.back();
    }
    const std::int64_t len = p1 - p0;
    for (std::size_t c = 0; c < columns_.size(); ++c) {
      const std::size_t rb = columns_[c].row_bytes();
      if (rb == 0) continue;
      const auto* src = static_cast<const std::byte*>(inputs[c].data) + u0 * rb;
      std::byte* base = base_[c];
      // At most two contiguous runs (the ring wraps once per add piece at most).
      std::int64_t done_rows = 0;
      while (done_rows < len) {
        const std::int64_t r = (head_ + done_rows) % capacity_;
        const std::int64_t run = std::min(len - done_rows, capacity_ - r);
        std::memcpy(base + static_cast<std::size_t>(r) * rb, src + static_cast<std::size_t>(done_rows) * rb,
                    static_cast<std::size_t>(run) * rb);
        done_rows += run;
      }
      if (with_next) {
        std::byte* dst = base + static_cast<std::size_t>((head_ + len) % capacity_) * rb;
        if (columns_[c].kind == ColumnKind::Observation)
          std::memcpy(dst, static_cast<const std::byte*>(next_obs[c].data) + u1 * rb, rb);
        else
          std::memset(dst, 0, rb);
      }
    }
    const SumTree::Weight leaf = prio_ ? default_leaf() : SumTree::Weight{};
    for (std::int64_t i = 0; i < len; ++i) {
      const auto r = static_cast<std::size_t>((head_ + i) % capacity_);
      row_uid_[r] = tr->uid;
      row_step_[r] = tr->steps + i;
      if (prio_) prio_->set(r, leaf);
    }
    if (with_next) {
      const auto r = static_cast<std::size_t>((head_ + len) % capacity_);
      row_uid_[r] = -1;
      row_step_[r] = kTailRow;
      if (prio_) prio_->set(r, 0.0);
    }
    tr->pieces.push_back(ReplayPiece{head_, len, tr->steps, with_next});
    tr->steps += len;
    live_steps_ += len;
    // Without t, last_t counts on (wrapping, never undefined: t is the caller's).
    tr->last_t = t != nullptr ? t[u1]
                              : static_cast<std::int64_t>(static_cast<std::uint64_t>(tr->last_t) +
                                                          static_cast<std::uint64_t>(len));
    if (done[u1] != 0) {
      tr->open = false;
      open_.erase(key);
    } else {
      tr->open = true;
      open_[key] = tr->uid;
    }
    head_ += len + (with_next ? 1 : 0);
    drop_overwritten();
  }
}

void ReplayStore::drop_overwritten() {
  while (!trajs_.empty() && trajs_.front().first_g < head_ - capacity_) {
    const auto& f = trajs_.front();
    if (auto it = open_.find(f.key); it != open_.end() && it->second == f.uid) open_.erase(it);
    // Its rows that are not overwritten yet hold no sampleable step any more.
    for (const auto& pc : f.pieces) {
      for (std::int64_t g = std::max(pc.g0, head_ - capacity_); g < pc.g0 + pc.n; ++g) {
        const auto r = static_cast<std::size_t>(g % capacity_);
        if (row_uid_[r] != f.uid) continue;
        row_uid_[r] = -1;
        row_step_[r] = -1;
        if (prio_) prio_->set(r, 0.0);
      }
    }
    live_steps_ -= f.steps;
    trajs_.pop_front();
  }
}

std::int64_t ReplayStore::num_steps() const {
  std::shared_lock lock(mu_);
  return live_steps_;
}

std::int64_t ReplayStore::rows_written() const {
  std::shared_lock lock(mu_);
  return head_;
}

std::int64_t ReplayStore::num_trajectories() const {
  std::shared_lock lock(mu_);
  return static_cast<std::int64_t>(trajs_.size());
}

std::size_t ReplayStore::nbytes() const noexcept {
  std::size_t n = 0;
  for (const auto& c : columns_) n += static_cast<std::size_t>(capacity_) * c.row_bytes();
  return n;
}

std::vector<ReplayTrajectory> ReplayStore::trajectories() const {
  std::shared_lock lock(mu_);
  return {trajs_.begin(), trajs_.end()};
}

std::int64_t ReplayStore::abs_row(std::int64_t r) const noexcept {
  if (head_ <= capacity_) return r;
  const std::int64_t lo = head_ - capacity_;
  return lo + ((r - lo % capacity_) % capacity_ + capacity_) % capacity_;
}

const ReplayTrajectory* ReplayStore::step_at(std::int64_t g, std::int64_t* step) const noexcept {
  if (g < 0 || g >= head_ || g < head_ - capacity_) return nullptr;
  const auto r = static_cast<std::size_t>(g % capacity_);
  if (row_step_[r] < 0) return nullptr;
  const ReplayTrajectory* tr = find(row_uid_[r]);
  if (tr == nullptr) return nullptr;
  *step = row_step_[r];
  return tr;
}

std::vector<std::int64_t> ReplayStore::step_rows() const {
  std::shared_lock lock(mu_);
  std::vector<std::int64_t> out;
  out.reserve(static_cast<std::size_t>(live_steps_));
  for (const auto& tr : trajs_)
    for (const auto& pc : tr.pieces)
      for (std::int64_t i = 0; i < pc.n; ++i) out.push_back(pc.g0 + i);
  return out;
}

std::vector<SlicePick> ReplayStore::locate(std::span<const std::int64_t> rows) const {
  std::shared_lock lock(mu_);
  std::vector<SlicePick> out;
  out.reserve(rows.size());
  for (std::int64_t g : rows) {
    std::int64_t step = 0;
    const ReplayTrajectory* tr = step_at(g, &step);
    out.push_back(tr == nullptr ? SlicePick{-1, 0, 0} : SlicePick{tr->uid, step, 1});
  }
  return out;
}

std::vector<std::pair<std::int64_t, std::int64_t>> ReplayStore::trajectory_lengths() const {
  std::shared_lock lock(mu_);
  std::vector<std::pair<std::int64_t, std::int64_t>> out;
  out.reserve(trajs_.size());
  for (const auto& tr : trajs_) out.emplace_back(tr.uid, tr.steps);
  return out;
}

}  // namespace trajview
