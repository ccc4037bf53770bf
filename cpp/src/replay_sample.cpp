// ReplayStore's reads: which slices to take (sample: by the request's mode;
// gather: given picks), building their views into fresh buffers
// (ReplayStore::build, by spec.h's view_row, the rule the trajectory store
// shares) and the slice-end marks (mark_slice_ends), under the shared lock.
// A slice never leaves its trajectory.
#include "trajview/replay.h"

#include <algorithm>
#include <array>
#include <cmath>
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
/// How many reads ahead a loop over random rows of a large ring asks for the row it will read (its cache line
/// fetched while the reads before it are served: the misses of a sample's rows overlap instead of queueing,
/// whatever the sample's size). A loop with two dependent reads per item (a ring row's trajectory, then that
/// trajectory's pieces) asks for the first at twice the distance.
constexpr std::size_t kAhead = 16;

void check_request(const SliceRequest& req) {
  if (req.slice_len < 1) throw std::invalid_argument("slice_len must be >= 1, got " + std::to_string(req.slice_len));
  if (req.slice_len > kMaxSampleRows)
    throw std::invalid_argument("slice_len must be <= " + std::to_string(kMaxSampleRows) + " (kMaxSampleRows), got " +
                                std::to_string(req.slice_len));
  if (static_cast<unsigned>(req.mode) > static_cast<unsigned>(SampleMode::Given))
    throw std::invalid_argument("sample: unknown mode " + std::to_string(static_cast<unsigned>(req.mode)));
  if (req.mode == SampleMode::Prioritized && (!(req.beta >= 0.0) || !std::isfinite(req.beta)))
    throw std::invalid_argument("beta must be finite and >= 0, got " + std::to_string(req.beta));
}

/// Writes a one of `dtype` into `n` elements (the slice-end mark of a done column).
void fill_one(std::byte* dst, DType dtype, std::size_t n) {
  const auto put = [&](auto one) {
    for (std::size_t i = 0; i < n; ++i) std::memcpy(dst + i * sizeof(one), &one, sizeof(one));
  };
  switch (dtype) {
    case DType::Bool: put(true); return;
    case DType::UInt8: put(std::uint8_t{1}); return;
    case DType::UInt16: put(std::uint16_t{1}); return;
    case DType::UInt32: put(std::uint32_t{1}); return;
    case DType::UInt64: put(std::uint64_t{1}); return;
    case DType::Int8: put(std::int8_t{1}); return;
    case DType::Int16: put(std::int16_t{1}); return;
    case DType::Int32: put(std::int32_t{1}); return;
    case DType::Int64: put(std::int64_t{1}); return;
    case DType::Float16: put(std::uint16_t{0x3C00}); return;  // 1.0 in IEEE half
    case DType::Float32: put(1.0f); return;
    case DType::Float64: put(1.0); return;
  }
  throw std::invalid_argument("slice-end marks: unsupported dtype " + std::string(dtype_name(dtype)));
}

/// The batch column holding stored column `name` itself (the view of that name reading it at offset 0), or null.
BatchColumn* stored_column(ReplayBatch& out, std::span<const ViewSpec> views, const std::string& name) {
  for (std::size_t vi = 0; vi < views.size(); ++vi) {
    const auto& v = views[vi];
    if (v.name == name && v.column == name && v.shifts.size() == 1 && v.shifts[0] == 0 && !v.adds_axis)
      return &out.columns[vi];
  }
  return nullptr;
}

/// The slice-end marks, the one rule (TorchRL's SliceSampler): with a
/// truncated_key, each slice's last real row (not its padding) is marked in
/// that column (stored: bool, OR-ed; not stored: a computed bool column) and,
/// whether or not that one is stored, in the stored done_key column (a one
/// of its dtype). So nothing run over a sample crosses from one slice into
/// the next.
void mark_slice_ends(ReplayBatch& out, std::span<const SlicePick> picks, std::span<const std::int64_t> row_off,
                     const SliceRequest& req, std::span<const ViewSpec> views, std::span<const ColumnSpec> cols) {
  if (req.truncated_key.empty()) return;
  const auto mark = [&](BatchColumn& bc, std::size_t per_row) {
    for (std::size_t k = 0; k < picks.size(); ++k) {
      const auto r = static_cast<std::size_t>(row_off[k] + picks[k].length - 1);
      fill_one(bc.buffer->data() + r * per_row * itemsize(bc.dtype), bc.dtype, per_row);
    }
  };
  const std::int64_t tc = find_column_index(cols, req.truncated_key);
  BatchColumn* tb = tc >= 0 ? stored_column(out, views, req.truncated_key) : nullptr;
  if (tb != nullptr) {
    if (tb->dtype != DType::Bool)
      throw std::invalid_argument("column '" + req.truncated_key + "' marks slice ends (truncated_key), so it must "
                                  "be bool, got " + std::string(dtype_name(tb->dtype)));
    mark(*tb, cols[static_cast<std::size_t>(tc)].row_elems());
  } else {
    for (const auto& v : views)
      if (v.name == req.truncated_key)
        throw std::invalid_argument("view '" + v.name + "' has the name of the column that marks slice ends "
                                    "(truncated_key); give the view another name");
    BatchColumn bc{req.truncated_key, DType::Bool, {out.count}, false,
                   std::make_shared<Buffer>(static_cast<std::size_t>(out.count))};
    std::memset(bc.buffer->data(), 0, static_cast<std::size_t>(out.count));
    mark(bc, 1);
    out.columns.push_back(std::move(bc));
  }
  if (req.done_key.empty() || req.done_key == req.truncated_key) return;
  const std::int64_t dc = find_column_index(cols, req.done_key);
  if (BatchColumn* db = dc >= 0 ? stored_column(out, views, req.done_key) : nullptr; db != nullptr)
    mark(*db, cols[static_cast<std::size_t>(dc)].row_elems());
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
  check_request(req);
  if (req.mode == SampleMode::Given) return gather(req.picks, req, views);
  if (req.num_slices < 1) throw std::invalid_argument("num_slices must be >= 1, got " + std::to_string(req.num_slices));
  check_rows(req.num_slices, req, "sample", "num_slices");
  check_views(views);
  std::shared_lock lock(mu_);
  if (live_steps_ == 0) throw std::invalid_argument("sample: the replay buffer holds no steps");
  if (req.mode == SampleMode::Prioritized && !prio_)
    throw std::invalid_argument("sample: prioritized sampling needs priorities (not enabled on this buffer)");
  std::vector<SlicePick> picks;
  picks.reserve(static_cast<std::size_t>(req.num_slices));
  std::vector<double> weights;
  if (req.mode == SampleMode::PerTrajectory) pick_trajectories(req, picks);
  else pick_steps(req, picks, weights);
  ReplayBatch out = build(std::move(picks), req, views);
  out.weights = std::move(weights);
  return out;
}

void ReplayStore::pick_trajectories(const SliceRequest& req, std::vector<SlicePick>& picks) const {
  const std::int64_t L = req.slice_len;
  std::mt19937_64 rng(req.seed);
  std::vector<std::size_t> eligible;
  eligible.reserve(trajs_.size());
  for (std::size_t i = 0; i < trajs_.size(); ++i) {
    const auto s = trajs_[i].steps;
    if (s > 0 && (!req.strict_length || s >= L)) eligible.push_back(i);
  }
  if (eligible.empty())
    throw std::invalid_argument("sample: no stored trajectory has slice_len=" + std::to_string(L) +
                                " steps or more (strict_length=True)");
  std::uniform_int_distribution<std::size_t> pick_traj(0, eligible.size() - 1);
  for (std::int64_t k = 0; k < req.num_slices; ++k) {
    const auto& tr = trajs_[eligible[pick_traj(rng)]];
    if (tr.steps >= L) {
      std::uniform_int_distribution<std::int64_t> pick_start(0, tr.steps - L);
      picks.push_back(SlicePick{tr.uid, pick_start(rng), L});
    } else {
      picks.push_back(SlicePick{tr.uid, 0, tr.steps});
    }
  }
}

void ReplayStore::pick_steps(const SliceRequest& req, std::vector<SlicePick>& picks,
                             std::vector<double>& weights) const {
  // Draw a ring row (uniformly over the written rows, or from the priority
  // tree), keep it when it holds a step that may start a slice. Rejection
  // keeps the distribution exact (uniform / proportional over the eligible
  // steps); after too many rejections, the eligible steps are enumerated.
  const bool prio = req.mode == SampleMode::Prioritized;
  const std::int64_t L = req.slice_len;
  std::mt19937_64 rng(req.seed);
  const auto can_start = [&](const ReplayTrajectory& tr, std::int64_t step) {
    return !req.strict_length || step <= tr.steps - L;
  };
  const auto pick_at = [&](const ReplayTrajectory& tr, std::int64_t step) {
    return SlicePick{tr.uid, step, std::min(L, tr.steps - step)};
  };
  const auto mass_of = [&](std::int64_t g) {
    return prio ? prio_->mass(static_cast<std::size_t>(g % capacity_)) : 1.0;
  };
  // TorchRL's importance weight (leaf / min positive leaf) ^ -beta, from the leaves' log2 (exact beyond doubles).
  const double lg_min = prio ? prio_->log2_min_positive() : 0.0;
  const auto weight_of = [&](std::int64_t g) {
    if (req.beta == 0.0) return 1.0;
    return std::exp2(-req.beta * (prio_->log2_leaf_fast(static_cast<std::size_t>(g % capacity_)) - lg_min));
  };
  if (prio) {
    if (!(prio_->total_mass() > 0.0)) throw std::invalid_argument("sample: every stored priority is 0");
    weights.reserve(static_cast<std::size_t>(req.num_slices));
  }
  const std::int64_t lo = std::max<std::int64_t>(0, head_ - capacity_);
  std::int64_t budget = checked_add<std::int64_t>(checked_mul<std::int64_t>(req.num_slices, 64, "sample"), 1024,
                                                  "sample");
  std::uniform_int_distribution<std::int64_t> pick_row(lo, head_ - 1);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  // Rows are drawn in rounds of as many as are still missing (the tree searched for all of them at once).
  std::vector<double> us;
  std::vector<std::size_t> found;
  std::vector<std::int64_t> drawn;
  while (static_cast<std::int64_t>(picks.size()) < req.num_slices && budget > 0) {
    const auto want = static_cast<std::size_t>(std::min(req.num_slices - static_cast<std::int64_t>(picks.size()),
                                                        budget));
    budget -= static_cast<std::int64_t>(want);
    if (!prio) {  // the round's rows drawn first (the same draws, in the same order), then read ahead
      drawn.resize(want);
      for (auto& g : drawn) g = pick_row(rng);
    }
    if (prio) {
      us.resize(want);
      found.resize(want);
      for (auto& u : us) u = unit(rng);
      prio_->find(us, found);
      for (std::size_t r : found) {  // the rows' bookkeeping, fetched together (random rows of a large ring)
        __builtin_prefetch(&row_uid_[r]);
        __builtin_prefetch(&row_step_[r]);
      }
    }
    for (std::size_t q = 0; q < want; ++q) {
      if (!prio) {  // the bookkeeping of the row 2 x kAhead on, the trajectory of the row kAhead on
        if (q + 2 * kAhead < want) {
          const auto r2 = static_cast<std::size_t>(drawn[q + 2 * kAhead] % capacity_);
          __builtin_prefetch(&row_uid_[r2]);
          __builtin_prefetch(&row_step_[r2]);
        }
        if (q + kAhead < want) {
          const auto* ahead = find(row_uid_[static_cast<std::size_t>(drawn[q + kAhead] % capacity_)]);
          if (ahead != nullptr) __builtin_prefetch(ahead);
        }
      }
      const std::int64_t g = prio ? abs_row(static_cast<std::int64_t>(found[q])) : drawn[q];
      std::int64_t step = 0;
      const ReplayTrajectory* tr = step_at(g, &step);
      if (tr == nullptr || !can_start(*tr, step)) continue;
      if (prio && !(mass_of(g) > 0.0)) continue;
      picks.push_back(pick_at(*tr, step));
      if (prio) weights.push_back(weight_of(g));
    }
  }
  if (static_cast<std::int64_t>(picks.size()) == req.num_slices) return;
  // Few eligible steps among the rows: enumerate them with their masses.
  std::vector<std::pair<std::int64_t, std::int64_t>> starts;  // (trajectory index, step)
  std::vector<double> cum;
  double total = 0.0;
  for (std::size_t ti = 0; ti < trajs_.size(); ++ti) {
    const auto& tr = trajs_[ti];
    for (std::int64_t j = 0; j < tr.steps && can_start(tr, j); ++j) {
      const double m = mass_of(step_g(tr, j));
      if (!(m > 0.0)) continue;
      total += m;
      starts.emplace_back(static_cast<std::int64_t>(ti), j);
      cum.push_back(total);
    }
  }
  if (starts.empty())
    throw std::invalid_argument("sample: no stored step can start a slice of slice_len=" + std::to_string(L) +
                                " steps (strict_length=True)" +
                                std::string(prio ? " with a priority above 0" : ""));
  while (static_cast<std::int64_t>(picks.size()) < req.num_slices) {
    const double m = unit(rng) * total;
    auto it = std::upper_bound(cum.begin(), cum.end(), m);
    if (it == cum.end()) --it;
    const auto& [ti, j] = starts[static_cast<std::size_t>(it - cum.begin())];
    const auto& tr = trajs_[static_cast<std::size_t>(ti)];
    picks.push_back(pick_at(tr, j));
    if (prio) weights.push_back(weight_of(step_g(tr, j)));
  }
}

void ReplayStore::check_picks(std::span<const SlicePick> picks, const SliceRequest& req) const {
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
}

ReplayBatch ReplayStore::gather(std::span<const SlicePick> picks, const SliceRequest& req,
                                std::span<const ViewSpec> views) const {
  check_request(req);
  check_rows(static_cast<std::int64_t>(picks.size()), req, "gather", "picks");
  check_views(views);
  std::shared_lock lock(mu_);
  check_picks(picks, req);
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
    std::int64_t tail = kZero;
  };
  std::vector<SliceRows> rows(ns);
  std::size_t npos = 0;
  for (std::size_t k = 0; k < ns; ++k) {
    if (k + 2 * kAhead < ns) __builtin_prefetch(find(picks[k + 2 * kAhead].uid));
    if (k + kAhead < ns) {
      if (const auto* ahead = find(picks[k + kAhead].uid); ahead != nullptr) __builtin_prefetch(ahead->pieces.data());
    }
    SliceRows& r = rows[k];
    r.tr = find(picks[k].uid);
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

  // The stored row of each read of view v, in output order (kZero: zeros): the one rule for the prefetch
  // and the copy below.
  const auto each_read = [&](const ViewSpec& v, bool is_obs, auto&& fn) {
    for (std::size_t k = 0; k < ns; ++k) {
      const auto& pk = picks[k];
      const SliceRows& r = rows[k];
      const std::int64_t steps = r.tr->steps;
      const std::int64_t avail_obs = steps + (r.tail == kZero ? 0 : 1);  // the final observation, where kept
      const std::int64_t nrows = row_off[k + 1] - row_off[k];
      for (std::int64_t i = 0; i < nrows; ++i) {
        const std::int64_t j = pk.start + std::min(i, pk.length - 1);  // padding repeats the last real step
        for (const std::int64_t shift : v.shifts) {
          // |shift| <= kMaxShift (check_views); the pad row of a replay column is zeros.
          const std::int64_t at = view_row(j + shift, is_obs ? avail_obs : steps, v.padding);
          fn(at < 0 ? kZero : row_of(r, at));
        }
      }
    }
  };
  for (std::size_t vi = 0; vi < views.size(); ++vi) {
    const auto& v = views[vi];
    const auto c = static_cast<std::size_t>(column_index(v.column));
    const auto& col = columns_[c];
    const std::size_t rb = col.row_bytes();
    const std::size_t nsh = v.shifts.size();
    BatchColumn bc;
    bc.name = v.name;
    bc.dtype = col.dtype;
    bc.shape.push_back(out.count);
    if (v.adds_axis) bc.shape.push_back(static_cast<std::int64_t>(nsh));
    bc.shape.insert(bc.shape.end(), col.shape.begin(), col.shape.end());
    bc.buffer = std::make_shared<Buffer>(view_bytes[vi]);
    std::byte* dst = bc.buffer->data();
    const std::byte* base = base_[c];
    if (rb > 0) {
      // Each read's row is asked for when `each_read` names it and copied kAhead reads later (`ahead`: the
      // reads named and not copied yet, in order).
      std::array<const std::byte*, kAhead> ahead{};  // (null: zeros)
      std::size_t named = 0, copied = 0;
      const auto copy_next = [&] {
        const std::byte* src = ahead[copied++ % kAhead];
        if (src == nullptr) std::memset(dst, 0, rb);
        else copy_row(dst, src, rb);
        dst += rb;
      };
      each_read(v, col.kind == ColumnKind::Observation, [&](std::int64_t g) {
        if (named - copied == kAhead) copy_next();
        const std::byte* src = g == kZero ? nullptr : base + static_cast<std::size_t>(g % capacity_) * rb;
        if (src != nullptr) __builtin_prefetch(src);
        ahead[named++ % kAhead] = src;
      });
      while (copied < named) copy_next();
    }
    out.columns.push_back(std::move(bc));
  }

  mark_slice_ends(out, picks, row_off, req, views, columns_);

  BatchColumn init{"is_init", DType::Bool, {out.count}, false, std::make_shared<Buffer>(static_cast<std::size_t>(out.count))};
  auto* ib = reinterpret_cast<bool*>(init.buffer->data());
  BatchColumn mask{"mask", DType::Bool, {out.count}, false, nullptr};
  bool* mb = nullptr;
  if (req.pad_output) {
    mask.buffer = std::make_shared<Buffer>(static_cast<std::size_t>(out.count));
    mb = reinterpret_cast<bool*>(mask.buffer->data());
  }
  out.index.resize(static_cast<std::size_t>(out.count));
  out.steps_left.resize(static_cast<std::size_t>(out.count));
  for (std::size_t k = 0; k < ns; ++k) {
    const auto& pk = picks[k];
    for (std::int64_t r = row_off[k]; r < row_off[k + 1]; ++r) {
      const std::int64_t i = std::min(r - row_off[k], pk.length - 1);
      const std::int64_t j = pk.start + i;
      ib[r] = i == 0 || (j == 0 && rows[k].tr->starts_episode);
      if (mb != nullptr) mb[r] = r - row_off[k] < pk.length;
      out.index[static_cast<std::size_t>(r)] = row_of(rows[k], j);
      out.steps_left[static_cast<std::size_t>(r)] = rows[k].tr->steps - j;
    }
  }
  out.columns.push_back(std::move(init));
  if (req.pad_output) out.columns.push_back(std::move(mask));
  out.slices = std::move(picks);
  return out;
}

}  // namespace trajview
