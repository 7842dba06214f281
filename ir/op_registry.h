// The op registry: every op Tandem knows, with its shape and dtype rules.
//
// Op names follow PyTorch's core ATen names without the `aten.` prefix and
// with `.default` dropped ("addmm", "add.Tensor", "sum.dim_IntList"), so a
// captured PyTorch step maps onto the registry almost one to one. An op that
// is not here is refused when a job registers, never while it runs.
//
// Ops are registered explicitly (Register*Ops functions called when the
// global registry is first built), not by static initializers, so nothing
// depends on the linker keeping an object file. Thread-safe after first use:
// the global registry is immutable once built.
#ifndef TANDEM_IR_OP_REGISTRY_H_
#define TANDEM_IR_OP_REGISTRY_H_

#include <functional>
#include <memory>
#include <string>
#include "absl/strings/string_view.h"

#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "ir/attrs.h"
#include "ir/dtype.h"

namespace tandem {

// How an op's first output may share memory with its first input; the
// memory planner uses it to avoid copies.
enum class AliasKind {
  kNone,
  // The output is a reinterpretation of input 0's bytes (view, reshape,
  // squeeze of a contiguous tensor): it may share input 0's buffer outright.
  // The kernel must tolerate output == input.
  kView,
  // The output has input 0's size and may overwrite input 0 when this node is
  // input 0's last reader (elementwise ops). The kernel must tolerate
  // output == input 0.
  kInPlace,
};

// Output types from input types and attributes. Returns INVALID_ARGUMENT with
// a message that names the offending input, dim or attribute.
using InferFn = std::function<absl::StatusOr<std::vector<TensorType>>(const Attrs&, absl::Span<const TensorType>)>;

// OpDef::num_outputs of ops whose output count follows from their attributes
// and input shapes (split, unbind); a node must name exactly as many outputs
// as inference returns.
inline constexpr int kVariableOutputs = -1;

struct OpDef {
  std::string name;
  int min_inputs = 0;
  int max_inputs = 0;   // -1: unbounded
  int num_outputs = 1;  // kVariableOutputs: as many as `infer` returns
  InferFn infer;
  AliasKind alias = AliasKind::kNone;
};

class OpRegistry {
 public:
  // The registry with every op of the project.
  static const OpRegistry& Global();

  // Adds `def`; a second op of the same name replaces nothing and is an error
  // (the process aborts: it is a programming error caught by any test).
  void Register(OpDef def);
  // Registers `def` under another name too (e.g. "t" and "t_copy").
  void Alias(absl::string_view existing, absl::string_view alias);

  const OpDef* Find(absl::string_view name) const;
  std::vector<std::string> Names() const;  // sorted

 private:
  absl::flat_hash_map<std::string, std::shared_ptr<const OpDef>> ops_;
};

// Whether `op`'s kernels check data at run time (an index against its table,
// a class label against the number of classes) and may fail an iteration that
// registration accepted. Until the last such node has run, no persistent
// tensor may change (compiler/update_schedule.h). The same on every backend.
// `op` may be any of the op's names (its aliases too).
bool OpChecksData(absl::string_view op);

// Registration of the op families (one file each under ir/ops/).
void RegisterElementwiseOps(OpRegistry& registry);
void RegisterLinalgOps(OpRegistry& registry);
void RegisterReductionOps(OpRegistry& registry);
void RegisterShapeOps(OpRegistry& registry);
void RegisterLossOps(OpRegistry& registry);
void RegisterFactoryOps(OpRegistry& registry);
void RegisterConvolutionOps(OpRegistry& registry);
void RegisterPoolingOps(OpRegistry& registry);
void RegisterBatchNormOps(OpRegistry& registry);
void RegisterIndexingOps(OpRegistry& registry);
void RegisterSlicingOps(OpRegistry& registry);
void RegisterActivationOps(OpRegistry& registry);
void RegisterComparisonOps(OpRegistry& registry);
void RegisterNormalizationOps(OpRegistry& registry);
void RegisterAttentionOps(OpRegistry& registry);
void RegisterFusedOps(OpRegistry& registry);          // fused_elementwise (graph passes)
void RegisterRecurrentOps(OpRegistry& registry);      // lstm, gru and their backwards
void RegisterMathOps(OpRegistry& registry);           // ir/ops/math_table.h
void RegisterGroupNormOps(OpRegistry& registry);      // native_group_norm and its backward
void RegisterSpatialOps(OpRegistry& registry);        // resampling, padding, 3-D pooling
void RegisterAdvancedIndexOps(OpRegistry& registry);  // index.Tensor, scatter_add, scatter_reduce, masked_scatter
void RegisterStridedOps(OpRegistry& registry);  // slice/select/as_strided scatters, as_strided, diagonal, flip, repeat
void RegisterRandomOps(OpRegistry& registry);   // bernoulli.p, rand, randn, empty.memory_format, empty_strided
void RegisterTestOps(OpRegistry& registry);     // test_fault (tandemd --test_faults only)

}  // namespace tandem

#endif  // TANDEM_IR_OP_REGISTRY_H_
