#include "kernels/cpu/cpu_kernels.h"

#include "absl/strings/string_view.h"
#include "kernels/cpu/kernel_util.h"

namespace tandem::cpu {

CpuKernelFn FindCpuKernel(absl::string_view op) {
  static const CpuKernelTable* table = [] {
    auto* t = new CpuKernelTable();
    AddElementwiseKernels(*t);
    AddLinalgKernels(*t);
    AddReductionKernels(*t);
    AddShapeKernels(*t);
    AddLossKernels(*t);
    AddFactoryKernels(*t);
    AddConvolutionKernels(*t);
    AddPoolingKernels(*t);
    AddBatchNormKernels(*t);
    AddIndexingKernels(*t);
    AddSlicingKernels(*t);
    AddActivationKernels(*t);
    AddComparisonKernels(*t);
    AddNormalizationKernels(*t);
    AddAttentionKernels(*t);
    AddFusedKernels(*t);
    AddRecurrentKernels(*t);
    AddMathKernels(*t);
    AddGroupNormKernels(*t);
    AddResampleKernels(*t);
    AddPaddingKernels(*t);
    AddPooling3dKernels(*t);
    AddAdvancedIndexKernels(*t);
    AddStridedKernels(*t);
    AddRandomKernels(*t);
    AddTestKernels(*t);
    return t;
  }();
  return table->Find(op);
}

}  // namespace tandem::cpu
