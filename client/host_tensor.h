// Tensors on the client side: dtype, shape and bytes in host memory, plus the
// small helpers a graph needs (attribute values).
#ifndef TANDEM_CLIENT_HOST_TENSOR_H_
#define TANDEM_CLIENT_HOST_TENSOR_H_

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/types/span.h"
#include "tandem.pb.h"

namespace tandem::client {

// Bytes per element of a wire dtype (0 for DTYPE_UNSPECIFIED).
size_t DTypeBytes(v1::DType dtype);

struct HostTensor {
  v1::DType dtype = v1::FLOAT32;
  std::vector<int64_t> shape;
  std::string data;  // row-major, little-endian

  int64_t numel() const;

  template <typename T>
  static HostTensor From(v1::DType dtype, std::vector<int64_t> shape, absl::Span<const T> values) {
    HostTensor t{dtype, std::move(shape), {}};
    t.data.assign(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
    return t;
  }
  static HostTensor Floats(std::vector<int64_t> shape, absl::Span<const float> values) {
    return From(v1::FLOAT32, std::move(shape), values);
  }
  static HostTensor Int64s(std::vector<int64_t> shape, absl::Span<const int64_t> values) {
    return From(v1::INT64, std::move(shape), values);
  }

  // Copies the elements out (data need not be aligned).
  template <typename T>
  std::vector<T> values() const {
    std::vector<T> out(data.size() / sizeof(T));
    std::memcpy(out.data(), data.data(), out.size() * sizeof(T));
    return out;
  }

  void ToProto(const std::string& name, v1::Tensor* out) const;
  static HostTensor FromProto(const v1::Tensor& tensor);
};

using NamedTensors = std::vector<std::pair<std::string, HostTensor>>;

// Attribute values for GraphBuilder::Op.
v1::AttrValue AttrInt(int64_t value);
v1::AttrValue AttrFloat(double value);
v1::AttrValue AttrBool(bool value);
v1::AttrValue AttrInts(std::vector<int64_t> values);
v1::AttrValue AttrDType(v1::DType dtype);
using Attrs = std::vector<std::pair<std::string, v1::AttrValue>>;

}  // namespace tandem::client

#endif  // TANDEM_CLIENT_HOST_TENSOR_H_
