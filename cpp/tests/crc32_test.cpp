#include "trajview/crc32.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>
#include <random>
#include <string_view>
#include <vector>

namespace trajview {
namespace {

// The reference: the textbook bit-at-a-time reflected crc32.
std::uint32_t reference_crc(const std::vector<std::byte>& v, std::size_t from, std::size_t n) {
  std::uint32_t reg = 0xFFFFFFFFu;
  for (std::size_t i = from; i < from + n; ++i) {
    reg ^= std::to_integer<std::uint32_t>(v[i]);
    for (int k = 0; k < 8; ++k) reg = (reg & 1u) ? (reg >> 1) ^ 0xEDB88320u : reg >> 1;
  }
  return ~reg;
}

TEST(Crc32, KnownValues) {
  const std::string_view check = "123456789";
  EXPECT_EQ(crc32_update(0, reinterpret_cast<const std::byte*>(check.data()), check.size()), 0xCBF43926u);
  EXPECT_EQ(crc32_update(0, nullptr, 0), 0u);
  EXPECT_EQ(crc32_update(0x12345678u, nullptr, 0), 0x12345678u);
}

TEST(Crc32, MatchesTheBitwiseReferenceAtEveryLengthAndOffset) {
  std::mt19937_64 rng(7);
  std::vector<std::byte> v(4096 + 64);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  const std::size_t lengths[] = {0, 1, 15, 16, 17, 63, 64, 65, 79, 80, 127, 128, 129, 191, 255, 256, 1000, 4096};
  for (std::size_t n : lengths)
    for (std::size_t from = 0; from < 20; ++from) {
      ASSERT_EQ(crc32_update(0, v.data() + from, n), reference_crc(v, from, n)) << "n " << n << " from " << from;
    }
}

TEST(Crc32, ContinuesAcrossSplits) {
  std::mt19937_64 rng(11);
  std::vector<std::byte> v(3000);
  for (auto& b : v) b = static_cast<std::byte>(rng());
  const std::uint32_t whole = reference_crc(v, 0, v.size());
  const std::size_t cuts[] = {0, 1, 63, 64, 100, 1500, 2999, 3000};
  for (std::size_t cut : cuts) {
    const std::uint32_t first = crc32_update(0, v.data(), cut);
    EXPECT_EQ(crc32_update(first, v.data() + cut, v.size() - cut), whole) << "cut " << cut;
  }
}

TEST(Crc32, AllOnesAndZeros) {
  for (auto fill : {std::byte{0}, std::byte{0xFF}}) {
    std::vector<std::byte> v(1 << 16, fill);
    EXPECT_EQ(crc32_update(0, v.data(), v.size()), reference_crc(v, 0, v.size()));
  }
}

}  // namespace
}  // namespace trajview
