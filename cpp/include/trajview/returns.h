// Discounted sums over the episode segments of a flat batch: the reverse scan
// behind GAE and discounted returns, one pass over every row of every segment.
#pragma once

#include <cstdint>
#include <span>

namespace trajview {

/// out[t] = x[t] + factor * out[t + 1] within each segment, out[t] = x[t] at
/// a segment's last row. The segments are consecutive runs of rows, their
/// lengths in `lengths` (in order, each >= 0, summing to x.size()); `out` has
/// x.size() elements (it may be `x` itself). Each step computes `x[t] +
/// factor * acc` in double, in this order, as the per-segment Python loop did.
///
/// Throws std::length_error (before writing anything) when a length is
/// negative, the lengths do not sum to x.size(), or out's size differs.
void discounted_sums(std::span<const double> x, std::span<const std::int64_t> lengths, double factor,
                     std::span<double> out);

}  // namespace trajview
