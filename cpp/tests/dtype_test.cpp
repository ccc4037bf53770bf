#include "trajview/dtype.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "test_util.h"

namespace trajview {
namespace {

struct Expected {
  DType dtype;
  std::string_view name;
  std::size_t size;
};

// numpy's names and sizes, written out by hand.
const std::vector<Expected> kAll = {
    {DType::Bool, "bool", 1},       {DType::UInt8, "uint8", 1},     {DType::UInt16, "uint16", 2},
    {DType::UInt32, "uint32", 4},   {DType::UInt64, "uint64", 8},   {DType::Int8, "int8", 1},
    {DType::Int16, "int16", 2},     {DType::Int32, "int32", 4},     {DType::Int64, "int64", 8},
    {DType::Float16, "float16", 2}, {DType::Float32, "float32", 4}, {DType::Float64, "float64", 8},
};

TEST(DType, Itemsize) {
  for (const auto& e : kAll) EXPECT_EQ(itemsize(e.dtype), e.size) << e.name;
}

TEST(DType, ItemsizeMatchesCxxTypes) {
  EXPECT_EQ(itemsize(DType::Bool), sizeof(bool));
  EXPECT_EQ(itemsize(DType::Int64), sizeof(std::int64_t));
  EXPECT_EQ(itemsize(DType::Float32), sizeof(float));
  EXPECT_EQ(itemsize(DType::Float64), sizeof(double));
}

TEST(DType, Names) {
  for (const auto& e : kAll) EXPECT_EQ(dtype_name(e.dtype), e.name);
}

TEST(DType, NameRoundTrip) {
  for (const auto& e : kAll) {
    EXPECT_EQ(dtype_from_name(e.name), e.dtype) << e.name;
    EXPECT_EQ(dtype_from_name(dtype_name(e.dtype)), e.dtype) << e.name;
  }
}

TEST(DType, NamesAreDistinct) {
  for (std::size_t i = 0; i < kAll.size(); ++i) {
    for (std::size_t j = i + 1; j < kAll.size(); ++j) EXPECT_NE(dtype_name(kAll[i].dtype), dtype_name(kAll[j].dtype));
  }
}

TEST(DType, BadNameThrowsNamingTheValue) {
  for (std::string_view bad : {"float", "Float32", "int128", "complex64", "float32 ", "object"}) {
    const std::string quoted = "'" + std::string(bad) + "'";
    EXPECT_TRUE(testing::throws_invalid_argument([&] { dtype_from_name(bad); }, {quoted, "float32", "int64", "bool"}))
        << bad;
  }
}

TEST(DType, EmptyNameThrows) {
  EXPECT_TRUE(testing::throws_invalid_argument([] { dtype_from_name(""); }, {"''", "expected"}));
}

}  // namespace
}  // namespace trajview
