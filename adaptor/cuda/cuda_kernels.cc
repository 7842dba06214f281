#include "adaptor/cuda/cuda_kernels.h"

#include "adaptor/cuda/kernel_util.h"

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
    return t;
  }();
  auto it = table->find(op);
  return it == table->end() ? nullptr : it->second;
}

bool CudaKernelChecksData(absl::string_view op) {
  return op == "nll_loss_forward" || op == "nll_loss_backward" || op == "embedding" ||
         op == "embedding_dense_backward" || op == "gather" || op == "scatter.value" || op == "scatter.src" ||
         op == "index_select" || op == "index_put";
}

}  // namespace tandem::cuda
