#include "client/host_tensor.h"

namespace tandem::client {

size_t DTypeBytes(v1::DType dtype) {
  switch (dtype) {
    case v1::FLOAT32:
      return 4;
    case v1::FLOAT64:
      return 8;
    case v1::INT64:
      return 8;
    case v1::INT32:
      return 4;
    case v1::BOOL:
      return 1;
    case v1::BFLOAT16:
      return 2;
    case v1::FLOAT16:
      return 2;
    default:
      return 0;
  }
}

int64_t HostTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

void HostTensor::ToProto(const std::string& name, v1::Tensor* out) const {
  v1::TensorSpec* spec = out->mutable_spec();
  spec->set_name(name);
  spec->set_dtype(dtype);
  spec->clear_shape();
  for (int64_t d : shape) spec->add_shape(d);
  out->set_data(data);
}

HostTensor HostTensor::FromProto(const v1::Tensor& tensor) {
  HostTensor t;
  t.dtype = tensor.spec().dtype();
  t.shape.assign(tensor.spec().shape().begin(), tensor.spec().shape().end());
  t.data = tensor.data();
  return t;
}

v1::AttrValue AttrInt(int64_t value) {
  v1::AttrValue a;
  a.set_i(value);
  return a;
}
v1::AttrValue AttrFloat(double value) {
  v1::AttrValue a;
  a.set_f(value);
  return a;
}
v1::AttrValue AttrBool(bool value) {
  v1::AttrValue a;
  a.set_b(value);
  return a;
}
v1::AttrValue AttrInts(std::vector<int64_t> values) {
  v1::AttrValue a;
  for (int64_t v : values) a.mutable_ints()->add_values(v);
  return a;
}
v1::AttrValue AttrDType(v1::DType dtype) {
  v1::AttrValue a;
  a.set_dtype(dtype);
  return a;
}

}  // namespace tandem::client
