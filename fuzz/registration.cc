#include "fuzz/registration.h"

#include <cstring>
#include <random>
#include <vector>

#include "compiler/compile_job.h"
#include "kernels/cpu/cpu_program.h"

namespace tandem::fuzz {
namespace {

// Fresh values of `type` into `out`: floats in [-2, 2], integers mostly in
// [0, 8) (valid indices and labels, often) and sometimes negative.
void Fill(const TensorType& type, std::mt19937_64& rng, void* out) {
  const int64_t n = type.numel();
  switch (type.dtype) {
    case DType::kFloat32: {
      std::uniform_real_distribution<float> u(-2, 2);
      for (int64_t i = 0; i < n; ++i) static_cast<float*>(out)[i] = u(rng);
      break;
    }
    case DType::kFloat64: {
      std::uniform_real_distribution<double> u(-2, 2);
      for (int64_t i = 0; i < n; ++i) static_cast<double*>(out)[i] = u(rng);
      break;
    }
    case DType::kInt64:
      for (int64_t i = 0; i < n; ++i) static_cast<int64_t*>(out)[i] = static_cast<int64_t>(rng() % 10) - 1;
      break;
    case DType::kInt32:
      for (int64_t i = 0; i < n; ++i) static_cast<int32_t*>(out)[i] = static_cast<int32_t>(rng() % 10) - 1;
      break;
    case DType::kBool:
      for (int64_t i = 0; i < n; ++i) static_cast<uint8_t*>(out)[i] = rng() & 1;
      break;
    case DType::kBFloat16:
    case DType::kFloat16:
      // Small exponents only, so that the bits are finite numbers in both.
      for (int64_t i = 0; i < n; ++i) static_cast<uint16_t*>(out)[i] = static_cast<uint16_t>(0x3c00 | (rng() & 0x03ff));
      break;
  }
}

}  // namespace

bool ExerciseRegistration(const v1::RegisterJobRequest& registration, uint64_t seed) {
  absl::StatusOr<CompiledJob> compiled = CompileJob(registration);
  if (!compiled.ok()) return false;
  const Graph& graph = compiled->graph;
  if (!cpu::CreateCpuProgram(graph).ok()) return true;

  uint64_t total = 0;
  for (const Value& v : graph.values) total += v.type.bytes();
  if (total > kMaxRunBytes) return true;
  std::mt19937_64 rng(seed);
  std::vector<std::vector<uint8_t>> buffers(graph.values.size());
  std::vector<void*> addresses(graph.values.size());
  for (size_t v = 0; v < graph.values.size(); ++v) {
    const Value& value = graph.values[v];
    // Exactly the tensor's bytes (a distinct non-null address for an empty
    // one): a kernel that strays past them touches the allocator's redzone.
    buffers[v].resize(std::max<size_t>(value.type.bytes(), 1));
    addresses[v] = buffers[v].data();
    if (value.kind != ValueKind::kIntermediate) Fill(value.type, rng, addresses[v]);
  }
  for (int i = 0; i < registration.persistent_size(); ++i) {
    const v1::Tensor& t = registration.persistent(i);
    const int v = graph.persistents[i];
    if (t.data().size() == graph.values[v].type.bytes()) std::memcpy(addresses[v], t.data().data(), t.data().size());
  }
  (void)cpu::RunGraphOnCpu(graph, addresses);
  return true;
}

}  // namespace tandem::fuzz
