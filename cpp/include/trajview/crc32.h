// zlib's crc32 (the reflected polynomial 0xEDB88320, as zlib.crc32 and the
// replay manifests use it), by carry-less multiply folding where the CPU has
// PCLMULQDQ (several GB/s per core), a byte table elsewhere.
#pragma once

#include <cstddef>
#include <cstdint>

namespace trajview {

/// The crc32 of the bytes data[0, n) continued from `crc` (the crc32 of the
/// bytes before them; 0 for none): crc32_update(crc32_update(0, a), b) is the
/// crc32 of a followed by b, as zlib.crc32(b, zlib.crc32(a)).
std::uint32_t crc32_update(std::uint32_t crc, const std::byte* data, std::size_t n) noexcept;

/// Whether crc32_update runs the carry-less multiply folding on this CPU
/// (false: the byte table, slower than zlib's).
bool crc32_accelerated() noexcept;

}  // namespace trajview
