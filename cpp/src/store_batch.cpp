// TrajectoryStore::build_batch: emits the steps not emitted before as one batch
// in the flat layout, in named steps: plan the segments, build the lazy bases,
// add each training view (lazy index or copy), add the boundary columns, free
// what no view can read any more.
//
// Invariants: a bad `hold` throws before anything changes; every buffer of the
// batch is fresh (nothing in it points into the store); the columns come in
// training-view order, then the boundary columns.
#include "trajview/store.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>

#include "store_episode.h"
#include "trajview/checked.h"

namespace trajview {
namespace {

/// Bytes of an array of `shape` and `dtype`, checked (std::length_error naming
/// the batch column `name`).
std::size_t array_bytes(const std::string& name, DType dtype, const std::vector<std::int64_t>& shape) {
  const std::string what = "batch column '" + name + "' of shape " + shape_str(shape);
  std::size_t bytes = itemsize(dtype);
  for (auto d : shape) bytes = checked_mul(bytes, to_size(d, what), what);
  return check_bytes(bytes, kMaxAllocBytes, what);
}

/// Appends a column with a fresh (uninitialised) buffer of its full size.
BatchColumn& add_column(Batch& batch, std::string name, DType dtype, std::vector<std::int64_t> shape, bool per_seq) {
  const std::size_t bytes = array_bytes(name, dtype, shape);
  batch.columns.push_back(
      BatchColumn{std::move(name), dtype, std::move(shape), per_seq, std::make_shared<Buffer>(bytes)});
  return batch.columns.back();
}

}  // namespace

/// Lazy columns: per stored column, the rows its lazy views read, once
/// (base[c] >= 0 indexes batch.bases), and per segment where its rows start
/// in that base and which episode row comes first.
struct TrajectoryStore::LazyBases {
  std::vector<std::int64_t> base;                 // per column: index into batch.bases, or -1
  std::vector<std::vector<std::int64_t>> first;   // per column, per segment: first episode row
  std::vector<std::vector<std::int64_t>> offset;  // per column, per segment: its first base row
};

Batch TrajectoryStore::build_batch(bool complete_only, std::span<const std::int64_t> hold) {
  const std::vector<std::int64_t> upto = emit_limits(hold);
  Batch batch;
  const std::vector<const Episode*> order = plan_segments(complete_only, upto, batch);
  const LazyBases lazy = add_lazy_bases(order, batch);
  for (std::size_t v : training_views_) {
    const bool per_seq = views_[v].batch_repeat > 1;
    if (lazy.base[view_column_[v]] >= 0 && !per_seq) add_lazy_view(v, order, lazy, batch);
    else add_copied_view(v, order, batch);
  }
  add_boundary_columns(batch);
  free_emitted(complete_only, upto);
  return batch;
}

void TrajectoryStore::discard_steps() { free_emitted(false, emit_limits({})); }

std::vector<std::int64_t> TrajectoryStore::emit_limits(std::span<const std::int64_t> hold) const {
  if (!hold.empty() && hold.size() != static_cast<std::size_t>(num_slots_))
    throw std::invalid_argument("build_batch: hold must have one count per env slot (" + std::to_string(num_slots_) +
                                "), got " + std::to_string(hold.size()));
  // Per slot: the step up to which its ongoing episode is emitted.
  std::vector<std::int64_t> upto(static_cast<std::size_t>(num_slots_), 0);
  for (std::size_t s = 0; s < slots_.size(); ++s) {
    const Episode* e = slots_[s].get();
    if (!e) continue;
    const std::int64_t h = hold.empty() ? 0 : hold[s];
    if (h < 0 || h > steps(*e) - e->emitted)
      throw std::invalid_argument("build_batch: hold[" + std::to_string(s) + "] must be in [0, " +
                                  std::to_string(steps(*e) - e->emitted) + "] (its unemitted steps), got " +
                                  std::to_string(h));
    upto[s] = steps(*e) - h;
  }
  return upto;
}

std::vector<const TrajectoryStore::Episode*> TrajectoryStore::plan_segments(bool complete_only,
                                                                           const std::vector<std::int64_t>& upto,
                                                                           Batch& batch) const {
  std::vector<const Episode*> order;
  for (auto& e : finished_) order.push_back(e.get());
  if (!complete_only) {
    for (auto& e : slots_) {
      if (e && upto[static_cast<std::size_t>(e->slot)] > e->emitted) order.push_back(e.get());
    }
  }
  const std::int64_t k = batch_repeat_;
  for (const Episode* e : order) {
    Segment seg;
    seg.eps_id = e->eps_id;
    seg.env_id = e->slot / options_.slots_per_env;
    seg.t_start = e->emitted;
    seg.length = (e->finished ? e->steps : upto[static_cast<std::size_t>(e->slot)]) - e->emitted;
    seg.row_offset = batch.count;
    seg.seq_offset = batch.num_seqs;
    seg.num_seqs = k > 1 ? (seg.length + k - 1) / k : 0;
    seg.finished = e->finished;
    batch.count += seg.length;
    batch.num_seqs += seg.num_seqs;
    batch.segments.push_back(seg);
  }
  return order;
}

TrajectoryStore::LazyBases TrajectoryStore::add_lazy_bases(const std::vector<const Episode*>& order,
                                                           Batch& batch) const {
  LazyBases lazy;
  lazy.base.assign(columns_.size(), -1);
  lazy.first.resize(columns_.size());
  lazy.offset.resize(columns_.size());
  if (options_.lazy_min_row_bytes == 0) return lazy;
  std::vector<std::int64_t> lo(columns_.size(), 0), hi(columns_.size(), 0);
  std::vector<bool> any(columns_.size(), false), reset(columns_.size(), false);
  for (std::size_t v : training_views_) {
    const std::size_t c = view_column_[v];
    if (views_[v].batch_repeat > 1 || columns_[c].row_bytes() < options_.lazy_min_row_bytes) continue;
    const auto [mn, mx] = std::minmax_element(views_[v].shifts.begin(), views_[v].shifts.end());
    lo[c] = any[c] ? std::min(lo[c], *mn) : *mn;
    hi[c] = any[c] ? std::max(hi[c], *mx) : *mx;
    any[c] = true;
    reset[c] = reset[c] || views_[v].padding == Padding::Reset;
  }
  for (std::size_t c = 0; c < columns_.size(); ++c) {
    if (!any[c]) continue;
    const std::size_t rb = columns_[c].row_bytes();
    auto& first = lazy.first[c];
    auto& offset = lazy.offset[c];
    std::int64_t rows = 2;  // kLazyPadRow, kLazyZeroRow
    for (std::size_t si = 0; si < order.size(); ++si) {
      const Segment& seg = batch.segments[si];
      const std::int64_t a = std::max<std::int64_t>(0, seg.t_start + lo[c]);
      std::int64_t b = seg.t_start + seg.length + hi[c];
      // padding="reset" reads row 0 before the episode's start.
      if (reset[c] && seg.t_start + lo[c] < 0) b = std::max<std::int64_t>(b, 1);
      b = seg.length == 0 ? a : std::min(rows_available(*order[si], c), b);
      first.push_back(a);
      offset.push_back(rows);
      rows += std::max<std::int64_t>(0, b - a);
    }
    std::vector<std::int64_t> shape{rows};
    shape.insert(shape.end(), columns_[c].shape.begin(), columns_[c].shape.end());
    const std::size_t bytes = array_bytes(columns_[c].name, columns_[c].dtype, shape);
    batch.bases.push_back(BatchColumn{columns_[c].name, columns_[c].dtype, std::move(shape), false,
                                      std::make_shared<Buffer>(bytes)});
    std::byte* dst = batch.bases.back().buffer->data();
    std::memcpy(dst + static_cast<std::size_t>(kLazyPadRow) * rb, pad_rows_[c].data(), rb);
    std::memset(dst + static_cast<std::size_t>(kLazyZeroRow) * rb, 0, rb);
    for (std::size_t si = 0; si < order.size(); ++si) {
      const std::int64_t n = (si + 1 < order.size() ? offset[si + 1] : rows) - offset[si];
      copy_rows(*order[si], c, first[si], first[si] + n, Padding::Zero,
                dst + static_cast<std::size_t>(offset[si]) * rb);
    }
    lazy.base[c] = static_cast<std::int64_t>(batch.bases.size()) - 1;
  }
  return lazy;
}

void TrajectoryStore::add_lazy_view(std::size_t v, const std::vector<const Episode*>& order, const LazyBases& lazy,
                                    Batch& batch) const {
  const ViewSpec& view = views_[v];
  const std::size_t c = view_column_[v];
  const ColumnSpec& col = columns_[c];
  std::vector<std::int64_t> shape{batch.count};
  if (view.adds_axis) shape.push_back(static_cast<std::int64_t>(view.shifts.size()));
  // The index of each (row, shift) into the base.
  const auto ns = static_cast<std::int64_t>(view.shifts.size());
  std::vector<std::int64_t> index_shape = shape;
  shape.insert(shape.end(), col.shape.begin(), col.shape.end());
  BatchColumn& out = add_column(batch, view.name, DType::Int64, index_shape, false);
  out.dtype = col.dtype;
  out.shape = std::move(shape);
  out.base = lazy.base[c];
  out.index_shape = std::move(index_shape);
  auto* idx = reinterpret_cast<std::int64_t*>(out.buffer->data());
  for (std::size_t si = 0; si < order.size(); ++si) {
    const Episode& e = *order[si];
    const Segment& seg = batch.segments[si];
    const std::int64_t avail = rows_available(e, c);
    const std::int64_t first = lazy.first[c][si];
    const std::int64_t off = lazy.offset[c][si];
    // Before the episode: the pad row, or row 0 (in the base: a pre-start
    // read means the segment's rows start at row 0).
    const std::int64_t pre = view.padding == Padding::Reset && avail > 0 ? off - first : kLazyPadRow;
    std::int64_t* out_row = idx + seg.row_offset * ns;
    for (std::int64_t t = seg.t_start; t < seg.t_start + seg.length; ++t) {
      for (std::int64_t j = 0; j < ns; ++j) {
        const std::int64_t r = t + view.shifts[static_cast<std::size_t>(j)];  // |shift| <= kMaxShift
        *out_row++ = r < 0 ? pre : r >= avail ? kLazyZeroRow : off + (r - first);
      }
    }
  }
}

void TrajectoryStore::add_copied_view(std::size_t v, const std::vector<const Episode*>& order, Batch& batch) const {
  const ViewSpec& view = views_[v];
  const std::size_t c = view_column_[v];
  const ColumnSpec& col = columns_[c];
  const std::int64_t k = batch_repeat_;
  const bool per_seq = view.batch_repeat > 1;
  std::vector<std::int64_t> shape{per_seq ? batch.num_seqs : batch.count};
  if (view.adds_axis) shape.push_back(static_cast<std::int64_t>(view.shifts.size()));
  shape.insert(shape.end(), col.shape.begin(), col.shape.end());
  BatchColumn& out = add_column(batch, view.name, col.dtype, std::move(shape), per_seq);
  const std::size_t vrb = view_row_bytes(v);
  std::byte* base = out.buffer->data();
  for (std::size_t si = 0; si < order.size(); ++si) {
    const Episode& e = *order[si];
    const Segment& seg = batch.segments[si];
    if (per_seq) {
      for (std::int64_t q = 0; q < seg.num_seqs; ++q)
        gather_view(e, v, seg.t_start + q * k, base + static_cast<std::size_t>(seg.seq_offset + q) * vrb);
    } else if (!view.adds_axis) {
      const std::int64_t s = view.shifts[0];
      copy_rows(e, c, seg.t_start + s, seg.t_start + seg.length + s, view.padding,
                base + static_cast<std::size_t>(seg.row_offset) * vrb);
    } else {
      gather_view_rows(e, v, seg.t_start, seg.length, base + static_cast<std::size_t>(seg.row_offset) * vrb);
    }
  }
}

void TrajectoryStore::add_boundary_columns(Batch& batch) const {
  const std::int64_t k = batch_repeat_;
  auto rows = [&](const char* name, DType dtype) {  // a fresh column of one value per row
    return add_column(batch, name, dtype, {batch.count}, false).buffer->data();
  };
  auto* eps = reinterpret_cast<std::int64_t*>(rows("eps_id", DType::Int64));
  std::int64_t* env = nullptr;
  if (options_.emit_env_id) env = reinterpret_cast<std::int64_t*>(rows("env_id", DType::Int64));
  auto* ts = reinterpret_cast<std::int64_t*>(rows("t", DType::Int64));
  auto* init = reinterpret_cast<bool*>(rows("is_init", DType::Bool));
  std::int32_t* seq_lens = nullptr;
  if (k > 1)
    seq_lens = reinterpret_cast<std::int32_t*>(
        add_column(batch, "seq_lens", DType::Int32, {batch.num_seqs}, true).buffer->data());
  for (const Segment& seg : batch.segments) {
    for (std::int64_t i = 0; i < seg.length; ++i) {
      const auto r = static_cast<std::size_t>(seg.row_offset + i);
      eps[r] = seg.eps_id;
      if (env) env[r] = seg.env_id;
      ts[r] = seg.t_start + i;
      init[r] = seg.t_start + i == 0;
    }
    for (std::int64_t q = 0; q < seg.num_seqs; ++q)
      seq_lens[seg.seq_offset + q] = static_cast<std::int32_t>(std::min(k, seg.length - q * k));
  }
}

void TrajectoryStore::free_emitted(bool complete_only, const std::vector<std::int64_t>& upto) {
  // Free what no view can read any more.
  for (auto& e : finished_) {
    for (const auto& f : e->first_obs) episode_bytes_ -= f.size();
  }
  finished_.clear();
  if (!complete_only) {
    for (auto& e : slots_) {
      if (e) e->emitted = upto[static_cast<std::size_t>(e->slot)];
    }
  }
  release_storage(!complete_only);
}

}  // namespace trajview
