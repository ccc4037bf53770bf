// TrajectoryStore's memory: which stream positions an episode can still read,
// bringing lagging slots level, and releasing what no view can read any more;
// nbytes / held_nbytes report it. Never frees a row a live episode's views
// can read.
#include "trajview/store.h"

#include <algorithm>
#include <cstring>

#include "store_episode.h"

namespace trajview {

std::int64_t TrajectoryStore::first_needed(const Episode& e, std::size_t c) const noexcept {
  // Rows [r_min, ...) can still be read: the unemitted steps and what their
  // views look back at.
  const std::int64_t r_min = std::max<std::int64_t>(0, e.emitted - lookback_[c]);
  return e.g0 + (obs_index_[c] >= 0 ? std::max<std::int64_t>(r_min - 1, 0) : r_min);
}

void TrajectoryStore::realign_slots() {
  const std::int64_t top = *std::max_element(pos_.begin(), pos_.end());
  for (std::size_t s = 0; s < slots_.size(); ++s) {
    if (pos_[s] == top) continue;
    Episode* e = slots_[s].get();
    if (e && steps_[s] > 0) {
      // Move the rows this slot still needs forward in its own lane (its
      // positions from pos_[s] on are unwritten), last row first.
      const std::int64_t d = top - pos_[s];
      for (std::size_t c = 0; c < columns_.size(); ++c) {
        BlockStream& stream = streams_[c];
        const std::size_t rb = stream.row_bytes();
        if (rb == 0) continue;
        const std::int64_t from = std::max(first_needed(*e, c), stream.base());
        for (std::int64_t p = pos_[s] - 1; p >= from; --p)
          std::memcpy(stream.position_for_write(p + d) + s * rb, stream.at(p, static_cast<std::int64_t>(s)), rb);
      }
      e->g0 += d;
    } else if (e) {
      e->g0 = top;
    }
    pos_[s] = top;
  }
  aligned_pos_ = top;
}

void TrajectoryStore::release_storage(bool compact) {
  // A slot that fell behind (it stopped stepping while others went on) would
  // pin every later position of every slot: bring it level first.
  realign_slots();
  const std::int64_t end = aligned_pos_;
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    std::int64_t need = end;
    for (const auto& e : slots_) {
      if (e) need = std::min(need, first_needed(*e, c));
    }
    for (const auto& e : finished_) need = std::min(need, e->g0);
    if (compact) streams_[c].compact(need, end);
    else streams_[c].release_before(need);
  }
  // An ongoing episode's row 0 (kept outside the streams) once no view can
  // read it: every row before emitted - lookback is out of reach, padding
  // "reset" included (it reads row 0 only for t < lookback).
  for (auto& e : slots_) {
    if (!e) continue;
    for (std::size_t k = 0; k < obs_columns_.size(); ++k) {
      auto& row0 = e->first_obs[k];
      if (row0.empty() || e->emitted - lookback_[obs_columns_[k]] < 1) continue;
      episode_bytes_ -= row0.size();
      std::vector<std::byte>().swap(row0);
    }
  }
}

std::size_t TrajectoryStore::nbytes() const noexcept {
  std::size_t n = 0;
  for (const auto& p : pools_) n += p.allocated_chunks() * p.chunk_bytes();
  return n + episode_bytes_;
}

std::size_t TrajectoryStore::held_nbytes() const noexcept {
  std::size_t n = episode_bytes_;
  const std::int64_t end = pos_.empty() ? 0 : *std::max_element(pos_.begin(), pos_.end());
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    std::int64_t first = end;
    for (const auto& e : slots_)
      if (e) first = std::min(first, first_needed(*e, c));
    for (const auto& e : finished_) first = std::min(first, first_needed(*e, c));
    first = std::max(first, streams_[c].base());
    if (end > first) n += static_cast<std::size_t>(end - first) * streams_[c].stride();
  }
  return n;
}

}  // namespace trajview
