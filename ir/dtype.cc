#include "ir/dtype.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "base/checked_math.h"

namespace tandem {

size_t DTypeSize(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return 4;
    case DType::kFloat64:
      return 8;
    case DType::kInt64:
      return 8;
    case DType::kInt32:
      return 4;
    case DType::kBool:
      return 1;
    case DType::kBFloat16:
      return 2;
    case DType::kFloat16:
      return 2;
  }
  return 0;
}

const char* DTypeName(DType dtype) {
  switch (dtype) {
    case DType::kFloat32:
      return "float32";
    case DType::kFloat64:
      return "float64";
    case DType::kInt64:
      return "int64";
    case DType::kInt32:
      return "int32";
    case DType::kBool:
      return "bool";
    case DType::kBFloat16:
      return "bfloat16";
    case DType::kFloat16:
      return "float16";
  }
  return "?";
}

bool IsFloating(DType dtype) {
  return dtype == DType::kFloat32 || dtype == DType::kFloat64 || dtype == DType::kBFloat16 || dtype == DType::kFloat16;
}

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::optional<int64_t> CheckedNumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d < 0) return std::nullopt;
    std::optional<int64_t> next = CheckedMul(n, d);
    if (!next.has_value()) return std::nullopt;
    n = *next;
  }
  return n;
}

std::optional<int64_t> TensorType::CheckedBytes() const {
  std::optional<int64_t> n = CheckedNumElements(shape);
  if (!n.has_value()) return std::nullopt;
  return CheckedMul(*n, static_cast<int64_t>(DTypeSize(dtype)));
}

std::string ShapeString(const Shape& shape) { return absl::StrCat("[", absl::StrJoin(shape, ", "), "]"); }

std::string TensorType::ToString() const { return absl::StrCat(DTypeName(dtype), ShapeString(shape)); }

}  // namespace tandem
