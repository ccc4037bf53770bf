// ReplayStore's reads: which slices to take (sample: uniform over eligible
// trajectories, then a uniform start; gather: given picks) and building their
// views into fresh buffers (ReplayStore::build), under the shared lock.
// The view rule is the one replay.h states; a slice never leaves its trajectory.
#include "trajview/replay.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <mutex>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>

#include "trajview/checked.h"

namespace trajview {
namespace {

/// Copies one row; small fixed sizes avoid a library call per row.
inline void copy_row(std::byte* dst, const std::byte* src, std::size_t n) noexcept {
  switch (n) {
    case 1: *dst = *src; return;
    case 2: std::memcpy(dst, src, 2); return;
    case 4: std::memcpy(dst, src, 4); return;
    case 8: std::memcpy(dst, src, 8); return;
    case 16: std::memcpy(dst, src, 16); return;
    default: std::memcpy(dst, src, n); return;
  }
}

constexpr std::int64_t kZero = -1;  // a position that reads zeros

void check_request(const SliceRequest& req, std::size_t ncols) {
  if (req.slice_len < 1) throw std::invalid_argument("slice_len must be >= 1, got " + std::to_string(req.slice_len));
  if (req.slice_len > kMaxSampleRows)
    throw std::invalid_argument("slice_len must be <= " + std::to_string(kMaxSampleRows) + " (kMaxSampleRows), got " +
                                std::to_string(req.slice_len));
  const auto n = static_cast<std::int64_t>(ncols);
  if (req.truncated_column >= n || req.done_column >= n)
    throw std::invalid_argument("truncated/done column index out of range");
}

/// Checks that `slices` slices of up to req.slice_len rows (checked) are at
/// most kMaxSampleRows rows.
void check_rows(std::int64_t slices, const SliceRequest& req, const char* what, const char* slices_name) {
  std::int64_t rows = 0;
  if (__builtin_mul_overflow(slices, req.slice_len, &rows) || rows > kMaxSampleRows)
    throw std::invalid_argument(std::string(what) + ": " + slices_name + " x slice_len must be <= " +
                                std::to_string(kMaxSampleRows) + " rows (kMaxSampleRows), got " +
                                std::to_string(slices) + " x " + std::to_string(req.slice_len));
}

}  // namespace

void ReplayStore::check_views(std::span<const ViewSpec> views) const {
  for (const auto& v : views) {
    if (column_index(v.column) < 0) {
      std::string names;
      for (const auto& c : columns_) names += (names.empty() ? "" : ", ") + c.name;
      throw std::invalid_argument("view '" + v.name + "': no stored column '" + v.column + "'; stored: [" + names + "]");
    }
    check_view_shifts(v);  // bounds the offsets before build() does arithmetic with them
    if (v.batch_repeat != 1)
      throw std::invalid_argument("view '" + v.name + "': batch_repeat_value must be 1 for replay samples, got " +
                                  std::to_string(v.batch_repeat));
  }
}

ReplayBatch ReplayStore::sample(const SliceRequest& req, std::span<const ViewSpec> views) const {
  check_request(req, columns_.size());
  if (req.num_slices < 1) throw std::invalid_argument("num_slices must be >= 1, got " + std::to_string(req.num_slices));
  check_rows(req.num_slices, req, "sample", "num_slices");
  check_views(views);
  std::shared_lock lock(mu_);
  std::vector<std::size_t> eligible;
  eligible.reserve(trajs_.size());
  for (std::size_t i = 0; i < trajs_.size(); ++i) {
    const auto s = trajs_[i].steps;
    if (s > 0 && (!req.strict_length || s >= req.slice_len)) eligible.push_back(i);
  }
  if (eligible.empty()) {
    if (req.strict_length && live_steps_ > 0)
      throw std::invalid_argument("sample: no stored trajectory has slice_len=" + std::to_string(req.slice_len) +
                                  " steps or more (strict_length=True)");
    throw std::invalid_argument("sample: the replay buffer holds no steps");
  }
  std::mt19937_64 rng(req.seed);
  std::vector<SlicePick> picks;
  picks.reserve(static_cast<std::size_t>(req.num_slices));
  for (std::int64_t k = 0; k < req.num_slices; ++k) {
    std::uniform_int_distribution<std::size_t> pick_traj(0, eligible.size() - 1);
    const auto& tr = trajs_[eligible[pick_traj(rng)]];
    if (tr.steps >= req.slice_len) {
      std::uniform_int_distribution<std::int64_t> pick_start(0, tr.steps - req.slice_len);
      picks.push_back(SlicePick{tr.uid, pick_start(rng), req.slice_len});
    } else {
      picks.push_back(SlicePick{tr.uid, 0, tr.steps});
    }
  }
  return build(std::move(picks), req, views);
}

ReplayBatch ReplayStore::gather(std::span<const SlicePick> picks, const SliceRequest& req,
                                std::span<const ViewSpec> views) const {
  check_request(req, columns_.size());
  check_rows(static_cast<std::int64_t>(picks.size()), req, "gather", "picks");
  check_views(views);
  std::shared_lock lock(mu_);
  for (const auto& p : picks) {
    const auto* tr = find(p.uid);
    if (tr == nullptr) throw std::invalid_argument("gather: no stored trajectory with uid " + std::to_string(p.uid));
    // (start > steps - length: start + length could overflow.)
    if (p.length < 1 || p.start < 0 || p.length > tr->steps || p.start > tr->steps - p.length ||
        p.length > req.slice_len)
      throw std::invalid_argument("gather: slice of " + std::to_string(p.length) + " steps from step " +
                                  std::to_string(p.start) + " does not fit trajectory " + std::to_string(p.uid) +
                                  " of " + std::to_string(tr->steps) + " steps and slice_len " +
                                  std::to_string(req.slice_len));
  }
  return build(std::vector<SlicePick>(picks.begin(), picks.end()), req, views);
}

ReplayBatch ReplayStore::build(std::vector<SlicePick> picks, const SliceRequest& req,
                               std::span<const ViewSpec> views) const {
  // Caller holds the shared lock, and has checked the picks, the views (their
  // offsets are within kMaxShift) and that picks x slice_len <= kMaxSampleRows,
  // so the row counts below cannot overflow.
  ReplayBatch out;
  const std::size_t ns = picks.size();
  std::vector<std::int64_t> row_off(ns + 1, 0);
  for (std::size_t k = 0; k < ns; ++k)
    row_off[k + 1] = row_off[k] + (req.pad_output ? req.slice_len : picks[k].length);
  out.count = row_off[ns];

  // Every view's buffer is sized (checked) before anything is built.
  std::vector<std::size_t> view_bytes;
  std::size_t reads_per_row = 1;  // the index, then every offset of a view with bytes to copy
  std::int64_t lb = 0, la = 0;
  for (const auto& v : views) {
    const std::size_t rb = columns_[static_cast<std::size_t>(column_index(v.column))].row_bytes();
    const std::string what = "view '" + v.name + "': rows x offsets x row bytes";
    view_bytes.push_back(check_bytes(
        checked_mul(checked_mul(static_cast<std::size_t>(out.count), v.shifts.size(), what), rb, what),
        kMaxAllocBytes, what));
    if (rb > 0) reads_per_row = checked_add(reads_per_row, v.shifts.size(), "sample: offsets of all views");
    for (auto s : v.shifts) {
      lb = std::max(lb, -s);
      la = std::max(la, s);
    }
  }

  // Per slice: the absolute row of each trajectory step its views can read,
  // steps [w0, w1) = [start - lb, start + length + la) within [0, steps);
  // precomputed (dense) unless that window is much larger than the reads the
  // slice makes (far offsets), then looked up per read.
  struct SliceRows {
    const ReplayTrajectory* tr = nullptr;
    std::int64_t w0 = 0;
    std::int64_t off = -1;  // where its window starts in `pos`, or -1: look up each read
    std::int64_t first_g = 0;
    std::int64_t tail = kZero;
  };
  std::vector<SliceRows> rows(ns);
  std::size_t npos = 0;
  for (std::size_t k = 0; k < ns; ++k) {
    SliceRows& r = rows[k];
    r.tr = find(picks[k].uid);
    r.first_g = step_g(*r.tr, 0);
    r.tail = r.tr->tail_g();
    r.w0 = std::max<std::int64_t>(0, picks[k].start - lb);
    const std::int64_t w1 = std::min(r.tr->steps, picks[k].start + picks[k].length + la);
    const auto window = static_cast<std::size_t>(w1 - r.w0);
    const std::size_t reads = static_cast<std::size_t>(row_off[k + 1] - row_off[k]) * reads_per_row;
    if (window <= 2 * reads + 64) {
      r.off = static_cast<std::int64_t>(npos);
      npos = checked_add(npos, window, "sample: row positions");
    }
  }
  std::vector<std::int64_t> pos(npos);
  for (std::size_t k = 0; k < ns; ++k) {
    const SliceRows& r = rows[k];
    if (r.off < 0) continue;
    const std::int64_t w1 = std::min(r.tr->steps, picks[k].start + picks[k].length + la);
    for (std::int64_t j = r.w0; j < w1; ++j) pos[static_cast<std::size_t>(r.off + j - r.w0)] = step_g(*r.tr, j);
  }
  // The absolute row of step j of slice r's trajectory (kZero outside it; the
  // final observation's row, or kZero, at j == steps).
  const auto row_of = [&](const SliceRows& r, std::int64_t j) -> std::int64_t {
    if (j < 0 || j > r.tr->steps) return kZero;
    if (j == r.tr->steps) return r.tail;
    if (r.off >= 0) return pos[static_cast<std::size_t>(r.off + j - r.w0)];
    return step_g(*r.tr, j);
  };

  for (std::size_t vi = 0; vi < views.size(); ++vi) {
    const auto& v = views[vi];
    const auto c = static_cast<std::size_t>(column_index(v.column));
    const auto& col = columns_[c];
    const std::size_t rb = col.row_bytes();
    const std::size_t nsh = v.shifts.size();
    const bool is_obs = col.kind == ColumnKind::Observation;
    BatchColumn bc;
    bc.name = v.name;
    bc.dtype = col.dtype;
    bc.shape.push_back(out.count);
    if (v.adds_axis) bc.shape.push_back(static_cast<std::int64_t>(nsh));
    bc.shape.insert(bc.shape.end(), col.shape.begin(), col.shape.end());
    bc.buffer = std::make_shared<Buffer>(view_bytes[vi]);
    std::byte* dst = bc.buffer->data();
    const std::byte* base = data_[c].get();
    for (std::size_t k = 0; k < ns && rb > 0; ++k) {
      const auto& pk = picks[k];
      const SliceRows& r = rows[k];
      const std::int64_t steps = r.tr->steps;
      const std::int64_t nrows = row_off[k + 1] - row_off[k];
      for (std::int64_t i = 0; i < nrows; ++i) {
        const std::int64_t j = pk.start + std::min(i, pk.length - 1);  // padding repeats the last real step
        for (std::size_t si = 0; si < nsh; ++si, dst += rb) {
          const std::int64_t jj = j + v.shifts[si];  // |shift| <= kMaxShift (check_views)
          std::int64_t g = row_of(r, jj);
          if (jj < 0 && v.padding == Padding::Reset) g = r.first_g;
          if (jj >= steps && !is_obs) g = kZero;
          if (g == kZero) std::memset(dst, 0, rb);
          else copy_row(dst, base + static_cast<std::size_t>(g % capacity_) * rb, rb);
        }
      }
    }
    out.columns.push_back(std::move(bc));
  }

  // TorchRL's truncated_key: each slice's last real step is marked (padding rows are not).
  for (std::int64_t mark : {req.truncated_column, req.done_column}) {
    if (mark < 0) continue;
    const auto& name = columns_[static_cast<std::size_t>(mark)].name;
    for (std::size_t vi = 0; vi < views.size(); ++vi) {
      const auto& v = views[vi];
      if (v.column != name || v.shifts.size() != 1 || v.shifts[0] != 0 || v.adds_axis) continue;
      auto& bc = out.columns[vi];
      if (bc.dtype != DType::Bool)
        throw std::invalid_argument("column '" + name + "' marks slice ends, so it must be bool, got " +
                                    std::string(dtype_name(bc.dtype)));
      const std::size_t re = columns_[static_cast<std::size_t>(mark)].row_elems();
      auto* b = reinterpret_cast<bool*>(bc.buffer->data());
      for (std::size_t k = 0; k < ns; ++k) {
        for (std::int64_t i = row_off[k] + picks[k].length - 1; i < row_off[k] + picks[k].length; ++i)
          std::fill_n(b + static_cast<std::size_t>(i) * re, re, true);
      }
    }
  }

  BatchColumn init{"is_init", DType::Bool, {out.count}, false, std::make_shared<Buffer>(static_cast<std::size_t>(out.count))};
  auto* ib = reinterpret_cast<bool*>(init.buffer->data());
  BatchColumn mask{"mask", DType::Bool, {out.count}, false, nullptr};
  bool* mb = nullptr;
  if (req.pad_output) {
    mask.buffer = std::make_shared<Buffer>(static_cast<std::size_t>(out.count));
    mb = reinterpret_cast<bool*>(mask.buffer->data());
  }
  out.index.resize(static_cast<std::size_t>(out.count));
  for (std::size_t k = 0; k < ns; ++k) {
    const auto& pk = picks[k];
    for (std::int64_t r = row_off[k]; r < row_off[k + 1]; ++r) {
      const std::int64_t i = std::min(r - row_off[k], pk.length - 1);
      const std::int64_t j = pk.start + i;
      ib[r] = i == 0 || (j == 0 && rows[k].tr->starts_episode);
      if (mb != nullptr) mb[r] = r - row_off[k] < pk.length;
      out.index[static_cast<std::size_t>(r)] = row_of(rows[k], j);
    }
  }
  out.columns.push_back(std::move(init));
  if (req.pad_output) out.columns.push_back(std::move(mask));
  out.slices = std::move(picks);
  return out;
}

}  // namespace trajview
