// TrajectoryStore's view arithmetic: where row r of an episode's column lives,
// and the view rule over it (spec.h's view_row, shared with the replay store),
// for inference and batches.
// Reads only: nothing here changes the store.
#include "trajview/store.h"

#include <algorithm>
#include <array>
#include <cstring>
#include <span>
#include <vector>

#include "store_episode.h"
#include "trajview/checked.h"

namespace trajview {

std::int64_t TrajectoryStore::steps(const Episode& e) const noexcept {
  return e.finished ? e.steps : steps_[static_cast<std::size_t>(e.slot)];
}

std::int64_t TrajectoryStore::rows_available(const Episode& e, std::size_t c) const noexcept {
  return steps(e) + (obs_index_[c] >= 0 ? 1 : 0);
}

const std::byte* TrajectoryStore::row(const Episode& e, std::size_t c, std::int64_t r) const noexcept {
  const std::int64_t k = obs_index_[c];
  if (k >= 0) {
    if (r == 0) return e.first_obs[static_cast<std::size_t>(k)].data();
    return streams_[c].at(e.g0 + r - 1, e.slot);
  }
  return streams_[c].at(e.g0 + r, e.slot);
}

void TrajectoryStore::copy_rows(const Episode& e, std::size_t c, std::int64_t r0, std::int64_t r1, Padding padding,
                                std::byte* dst) const {
  const std::size_t rb = columns_[c].row_bytes();
  if (rb == 0) return;
  const std::int64_t avail = rows_available(e, c);
  const std::int64_t lead = obs_index_[c] >= 0 ? 1 : 0;  // (an observation column's row 0 is the episode's own)
  const BlockStream& stream = streams_[c];
  std::int64_t r = r0;
  while (r < r1) {
    const std::int64_t at = view_row(r, avail, padding);
    if (at != r || r < lead) {  // padding, zeros, a read of row 0 before the start, an observation's row 0
      if (at == kViewZeros) std::memset(dst, 0, rb);
      else std::memcpy(dst, at == kViewPad ? pad_rows_[c].data() : row(e, c, at), rb);
      ++r;
      dst += rb;
      continue;
    }
    // Stored rows (`row`'s positions), `stride()` apart up to the end of position p's block: one address for the run.
    const std::int64_t p = e.g0 + r - lead;
    const std::int64_t end = std::min({r1, avail, r + (stream.block_end(p) - p)});
    const std::byte* src = stream.at(p, e.slot);
    for (; r < end; ++r, dst += rb, src += stream.stride()) std::memcpy(dst, src, rb);
  }
}

void TrajectoryStore::gather_view(const Episode& e, std::size_t v, std::int64_t t, std::byte* dst) const {
  gather_view_rows(e, v, t, 1, dst);
}

void TrajectoryStore::gather_view_rows(const Episode& e, std::size_t v, std::int64_t t0, std::int64_t n,
                                       std::byte* dst) const {
  // Step t's run of shifts a .. a + w - 1 reads rows t + a .. t + a + w - 1, the next step's the same rows moved by
  // one: the n steps read rows t0 + a .. t0 + a + n + w - 2, which copy_rows writes (its view rule per row: that
  // rule depends on the row alone) into `window`, and step t's run is window rows t - t0 .. t - t0 + w - 1.
  // (Runs of consecutive offsets ("-3:0") are one copy_rows. t + s cannot overflow: t counts stored steps and
  // |s| <= kMaxShift, checked at construction.)
  const ViewSpec& view = views_[v];
  const std::size_t c = view_column_[v];
  const auto& shifts = view.shifts;
  const std::size_t rb = columns_[c].row_bytes();
  const std::size_t vrb = view_row_bytes(v);
  if (n <= 0 || rb == 0) return;
  const std::size_t steps_n = to_size(n, "gather_view_rows: steps");
  std::vector<std::byte> window;
  std::size_t i = 0, at = 0;  // (the run's first shift; its bytes' offset in a view row)
  while (i < shifts.size()) {
    std::size_t j = i + 1;
    while (j < shifts.size() && shifts[j] == shifts[j - 1] + 1) ++j;
    const std::size_t width = j - i;
    const std::size_t run_bytes = width * rb;
    if (steps_n == 1) {  // (one step: its run straight into its view row, no window)
      copy_rows(e, c, t0 + shifts[i], t0 + shifts[j - 1] + 1, view.padding, dst + at);
      at += run_bytes;
      i = j;
      continue;
    }
    const std::size_t rows = checked_add(steps_n, width - 1, "gather_view_rows: window rows");
    window.resize(checked_mul(rows, rb, "gather_view_rows: window bytes"));
    // (t0 + shift + rows cannot overflow: t0 + n counts stored steps and |shift| <= kMaxShift)
    copy_rows(e, c, t0 + shifts[i], t0 + shifts[i] + static_cast<std::int64_t>(rows), view.padding, window.data());
    for (std::size_t r = 0; r < steps_n; ++r) std::memcpy(dst + r * vrb + at, window.data() + r * rb, run_bytes);
    at += run_bytes;
    i = j;
  }
}

namespace {

/// gather_aligned_stack's copies: slot i's row at shift j from bases[j] + i * row bytes (RB, or rb where RB is 0:
/// a fixed size the compiler copies inline), or by `before_stream(i, row, dst)` for rows before the stream.
template <std::size_t RB, class BeforeStream>
void copy_stack_rows(std::span<const std::int64_t> steps, std::span<const std::int64_t> shifts,
                     const std::byte* const* bases, std::int64_t lead, std::size_t rb, std::byte* out,
                     BeforeStream&& before_stream) {
  const std::size_t size = RB ? RB : rb;
  for (std::size_t i = 0; i < steps.size(); ++i) {
    const std::int64_t t = steps[i];
    for (std::size_t j = 0; j < shifts.size(); ++j, out += size) {
      const std::int64_t r = t + shifts[j];
      if (r >= lead) std::memcpy(out, bases[j] + i * size, size);
      else before_stream(i, r, out);
    }
  }
}

}  // namespace

bool TrajectoryStore::gather_aligned_stack(std::size_t v, std::span<const std::int64_t> steps, std::byte* out) const {
  // Every slot stands at the same stream position: row t + shift of slot i's episode (where the stream holds it)
  // lies at position aligned_pos_ + shift - lead, slot i, for every i. One base pointer per shift, then a copy per
  // (slot, shift); rows before the stream (row 0 of an observation column, padding) take the view rule row by row.
  const ViewSpec& view = views_[v];
  const std::size_t c = view_column_[v];
  const std::size_t rb = columns_[c].row_bytes();
  const BlockStream& stream = streams_[c];
  const std::int64_t lead = obs_index_[c] >= 0 ? 1 : 0;
  const std::size_t k = view.shifts.size();
  if (rb == 0 || k > kMaxStackRows) return false;
  std::array<const std::byte*, kMaxStackRows> bases;  // (the first k set below; not zeroed: this runs per step)
  std::int64_t prev = 0, block_end = 0;  // (the last shift's position; one past the last position of its block)
  bool one_run = true;  // every shift the next position of the first one's block
  for (std::size_t j = 0; j < k; ++j) {
    const std::int64_t s = view.shifts[j];
    const std::int64_t p = aligned_pos_ + s - lead;
    if (s >= lead) return false;  // a row past the episode's last: the general rule
    if (j > 0 && p == prev + 1 && p < block_end) {
      bases[j] = bases[j - 1] + stream.stride();  // the next position of the same block (consecutive shifts)
    } else {
      if (!stream.holds(p)) return false;  // not held: the general rule
      bases[j] = stream.position(p);
      block_end = stream.block_end(p);
      one_run = j == 0;
    }
    prev = p;
  }
  // One slot (a position is one row), its rows one run of a block, none before the stream (the first shift's, the
  // lowest, is not): the view is that run's bytes as they are (a single episode acting: PolicyRunner's implicit one).
  if (one_run && steps.size() == 1 && stream.stride() == rb && steps[0] + view.shifts[0] >= lead) {
    std::memcpy(out, bases[0], k * rb);
    return true;
  }
  const auto before_stream = [&](std::size_t i, std::int64_t r, std::byte* dst) {
    copy_rows(*slots_[i], c, r, r + 1, view.padding, dst);
  };
  const std::span<const std::int64_t> shifts(view.shifts);
  switch (rb) {
    case 4: copy_stack_rows<4>(steps, shifts, bases.data(), lead, rb, out, before_stream); break;
    case 8: copy_stack_rows<8>(steps, shifts, bases.data(), lead, rb, out, before_stream); break;
    case 16: copy_stack_rows<16>(steps, shifts, bases.data(), lead, rb, out, before_stream); break;
    default: copy_stack_rows<0>(steps, shifts, bases.data(), lead, rb, out, before_stream); break;
  }
  return true;
}

void TrajectoryStore::gather_inference(std::span<const std::int64_t> slots, std::span<std::byte* const> outputs,
                                       std::int64_t* t_out, std::int64_t* eps_out) const {
  const std::size_t n = num_rows(slots);
  const bool aligned = slots.empty() && aligned_pos_ >= 0;
  for (std::size_t k = 0; k < inference_views_.size(); ++k) {
    const std::size_t v = inference_views_[k];
    const ViewSpec& view = views_[v];
    const std::size_t c = view_column_[v];
    const std::size_t vrb = view_row_bytes(v);
    if (aligned && !view.adds_axis) {
      // Every slot reads the same stream position: one copy, then patch the
      // slots whose row is before the stream (row 0 of an observation column,
      // or padding).
      const bool is_obs = obs_index_[c] >= 0;
      const std::int64_t shift = view.shifts[0];
      const std::int64_t p = aligned_pos_ + shift - (is_obs ? 1 : 0);
      if (streams_[c].holds(p) && vrb > 0) {
        std::memcpy(outputs[k], streams_[c].position(p), streams_[c].stride());
        const std::int64_t first_in_stream = (is_obs ? 1 : 0) - shift;
        for (std::size_t i = 0; i < n; ++i) {
          if (steps_[i] < first_in_stream) gather_view(*slots_[i], v, steps_[i], outputs[k] + i * vrb);
        }
        continue;
      }
    }
    if (aligned && view.adds_axis && gather_aligned_stack(v, steps_, outputs[k])) continue;
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t s = slots.empty() ? static_cast<std::int64_t>(i) : slots[i];
      const Episode& e = *slots_[static_cast<std::size_t>(s)];
      gather_view(e, v, steps(e), outputs[k] + i * vrb);
    }
  }
  for (std::size_t i = 0; i < n; ++i) {
    const auto s = static_cast<std::size_t>(slots.empty() ? static_cast<std::int64_t>(i) : slots[i]);
    if (t_out) t_out[i] = steps_[s];
    if (eps_out) eps_out[i] = slot_eps_[s];
  }
}

}  // namespace trajview
