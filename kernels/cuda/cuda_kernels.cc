#include "kernels/cuda/cuda_kernels.h"

#include "kernels/cuda/kernel_util.h"

namespace tandem::cuda {

CudaKernelFn FindCudaKernel(absl::string_view op) {
  static const CudaKernelTable* table = [] {
    auto* t = new CudaKernelTable();
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
    AddSpatialKernels(*t);
    AddAdvancedIndexKernels(*t);
    AddStridedKernels(*t);
    AddRandomKernels(*t);
    AddTestKernels(*t);
    return t;
  }();
  return table->Find(op);
}

CudaWarmFn FindCudaWarmer(absl::string_view op) {
  static const CudaWarmTable* table = [] {
    auto* t = new CudaWarmTable();
    AddConvolutionWarmers(*t);
    return t;
  }();
  return table->Find(op);
}

}  // namespace tandem::cuda
