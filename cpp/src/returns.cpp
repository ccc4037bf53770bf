#include "trajview/returns.h"

#include <cstddef>
#include <stdexcept>
#include <string>

#include "trajview/checked.h"

namespace trajview {

void discounted_sums(std::span<const double> x, std::span<const std::int64_t> lengths, double factor,
                     std::span<double> out) {
  if (out.size() != x.size())
    throw std::length_error("discounted_sums: out has " + std::to_string(out.size()) + " rows, x has " +
                            std::to_string(x.size()));
  std::size_t total = 0;
  for (const std::int64_t n : lengths) total = checked_add(total, to_size(n, "discounted_sums: a segment's length"),
                                                           "discounted_sums: the segments' rows");
  if (total != x.size())
    throw std::length_error("discounted_sums: the segments' lengths sum to " + std::to_string(total) +
                            " rows, x has " + std::to_string(x.size()));
  std::size_t end = x.size();  // segments from the last: each one's rows [end - n, end), last row first
  for (std::size_t k = lengths.size(); k-- > 0;) {
    const auto n = static_cast<std::size_t>(lengths[k]);
    double acc = 0.0;
    for (std::size_t t = end; t-- > end - n;) {
      acc = x[t] + factor * acc;
      out[t] = acc;
    }
    end -= n;
  }
}

}  // namespace trajview
