// Element types of tensors, and tensor types (dtype + shape).
#ifndef TANDEM_IR_DTYPE_H_
#define TANDEM_IR_DTYPE_H_

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace tandem {

enum class DType : uint8_t {
  kFloat32,
  kFloat64,
  kInt64,
  kInt32,
  kBool,
  kBFloat16,
  kFloat16,
};

size_t DTypeSize(DType dtype);
const char* DTypeName(DType dtype);  // "float32", ...
bool IsFloating(DType dtype);

using Shape = std::vector<int64_t>;

// The product of the dims. Only for shapes already validated (every type
// the graph builder accepted): for a shape from a client, CheckedNumElements.
int64_t NumElements(const Shape& shape);
// The product of the dims; nullopt for a negative dim or a product that
// does not fit in int64_t.
std::optional<int64_t> CheckedNumElements(const Shape& shape);
std::string ShapeString(const Shape& shape);  // "[256, 784]"

struct TensorType {
  DType dtype = DType::kFloat32;
  Shape shape;

  // numel and bytes assume a validated type (see NumElements).
  int64_t numel() const { return NumElements(shape); }
  size_t bytes() const { return static_cast<size_t>(numel()) * DTypeSize(dtype); }
  // numel * DTypeSize(dtype); nullopt where CheckedNumElements is, or when
  // the byte count does not fit in int64_t.
  std::optional<int64_t> CheckedBytes() const;
  int rank() const { return static_cast<int>(shape.size()); }
  std::string ToString() const;  // "float32[256, 784]"
  bool operator==(const TensorType& other) const = default;
};

}  // namespace tandem

#endif  // TANDEM_IR_DTYPE_H_
