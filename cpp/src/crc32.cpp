// crc32 by folding (V. Gopal et al., "Fast CRC Computation for Generic
// Polynomials Using PCLMULQDQ Instruction", Intel, 2009): four 128-bit lanes
// are each multiplied by x^(512) mod P (shifting them past the next 64 bytes)
// and added to those bytes; at the end the lanes are folded into one, reduced
// to 64 then 32 bits, and a Barrett reduction gives the remainder. Everything
// is bit-reflected (bit 0 of byte 0 is the highest power), as zlib's crc32.
#include "trajview/crc32.h"

#include <array>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define TRAJVIEW_CRC_FOLD 1
#include <immintrin.h>
#endif

namespace trajview {
namespace {

constexpr std::uint32_t kPoly = 0xEDB88320u;

constexpr std::array<std::uint32_t, 256> make_table() {
  std::array<std::uint32_t, 256> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c & 1u) ? (c >> 1) ^ kPoly : c >> 1;
    t[i] = c;
  }
  return t;
}

constexpr auto kTable = make_table();

// The register (the inverted crc) advanced over n bytes, one at a time.
std::uint32_t bytewise(std::uint32_t reg, const std::byte* p, std::size_t n) noexcept {
  for (std::size_t i = 0; i < n; ++i)
    reg = kTable[(reg ^ std::to_integer<std::uint32_t>(p[i])) & 0xFFu] ^ (reg >> 8);
  return reg;
}

#ifdef TRAJVIEW_CRC_FOLD
// x^k mod P for the folding distances (reflected, 33 bits): 4 x 128 + 32 and
// 4 x 128 - 32 (a lane past 64 bytes), 128 + 32 and 128 - 32 (past 16 bytes),
// 64 (the last 64 bits), then the Barrett constant floor(x^64 / P) and P.
constexpr long long kFold64Hi = 0x0154442bd4LL, kFold64Lo = 0x01c6e41596LL;
constexpr long long kFold16Hi = 0x01751997d0LL, kFold16Lo = 0x00ccaa009eLL;
constexpr long long kFold8 = 0x0163cd6124LL;
constexpr long long kBarrettP = 0x01db710641LL, kBarrettMu = 0x01f7011641LL;

__attribute__((target("pclmul,sse4.1"))) inline __m128i fold(__m128i lane, __m128i k, __m128i next) {
  const __m128i lo = _mm_clmulepi64_si128(lane, k, 0x00);
  const __m128i hi = _mm_clmulepi64_si128(lane, k, 0x11);
  return _mm_xor_si128(_mm_xor_si128(lo, hi), next);
}

__attribute__((target("pclmul,sse4.1"))) inline __m128i load(const std::byte* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}

// The register advanced over n bytes (n >= 64, a multiple of 16).
__attribute__((target("pclmul,sse4.1"))) std::uint32_t folded(std::uint32_t reg, const std::byte* p,
                                                              std::size_t n) noexcept {
  const __m128i k64 = _mm_set_epi64x(kFold64Lo, kFold64Hi);
  const __m128i k16 = _mm_set_epi64x(kFold16Lo, kFold16Hi);
  __m128i a = _mm_xor_si128(load(p), _mm_cvtsi32_si128(static_cast<int>(reg)));
  __m128i b = load(p + 16), c = load(p + 32), d = load(p + 48);
  p += 64;
  n -= 64;
  for (; n >= 64; p += 64, n -= 64) {
    a = fold(a, k64, load(p));
    b = fold(b, k64, load(p + 16));
    c = fold(c, k64, load(p + 32));
    d = fold(d, k64, load(p + 48));
  }
  a = fold(a, k16, b);
  a = fold(a, k16, c);
  a = fold(a, k16, d);
  for (; n >= 16; p += 16, n -= 16) a = fold(a, k16, load(p));
  // 128 bits to 64: the low half times x^64 mod P plus the high half.
  const __m128i low32 = _mm_setr_epi32(-1, 0, -1, 0);
  a = _mm_xor_si128(_mm_srli_si128(a, 8), _mm_clmulepi64_si128(a, k16, 0x10));
  // 64 bits to 32 (plus the high part): the low 32 bits times x^32 folding.
  const __m128i k8 = _mm_set_epi64x(0, kFold8);
  a = _mm_xor_si128(_mm_clmulepi64_si128(_mm_and_si128(a, low32), k8, 0x00), _mm_srli_si128(a, 4));
  // Barrett: q = (low 32 bits x mu) low 32 bits; remainder = a + q x P.
  const __m128i barrett = _mm_set_epi64x(kBarrettMu, kBarrettP);
  __m128i q = _mm_and_si128(_mm_clmulepi64_si128(_mm_and_si128(a, low32), barrett, 0x10), low32);
  a = _mm_xor_si128(a, _mm_clmulepi64_si128(q, barrett, 0x00));
  return static_cast<std::uint32_t>(_mm_extract_epi32(a, 1));
}

bool detect() noexcept {
  __builtin_cpu_init();
  return __builtin_cpu_supports("pclmul") && __builtin_cpu_supports("sse4.1");
}
#endif

}  // namespace

bool crc32_accelerated() noexcept {
#ifdef TRAJVIEW_CRC_FOLD
  static const bool ok = detect();
  return ok;
#else
  return false;
#endif
}

std::uint32_t crc32_update(std::uint32_t crc, const std::byte* data, std::size_t n) noexcept {
  std::uint32_t reg = ~crc;
#ifdef TRAJVIEW_CRC_FOLD
  if (n >= 64 && crc32_accelerated()) {
    const std::size_t whole = n & ~std::size_t{15};
    reg = folded(reg, data, whole);
    data += whole;
    n -= whole;
  }
#endif
  return ~bytewise(reg, data, n);
}

}  // namespace trajview
