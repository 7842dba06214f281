#include "examples/mlp_train/mlp_graph.h"

#include "absl/strings/str_cat.h"

namespace tandem::examples {

using client::AttrBool;
using client::AttrDType;
using client::AttrFloat;
using client::AttrInt;
using client::AttrInts;
using client::GraphBuilder;
using client::HostTensor;

std::vector<std::string> MlpParameterNames(const MlpShape& shape) {
  std::vector<std::string> names;
  for (int l = 0; l <= shape.layers; ++l) {
    names.push_back(absl::StrCat("W", l));
    names.push_back(absl::StrCat("b", l));
  }
  return names;
}

v1::RegisterJobRequest BuildMlpTrainingJob(const MlpJobOptions& options) {
  const MlpShape& shape = options.shape;
  const std::vector<int> widths = shape.Widths();
  const int num_layers = static_cast<int>(widths.size()) - 1;
  GraphBuilder b(options.name);

  std::string x = b.Feed("x", v1::FLOAT32, {options.batch, shape.inputs});
  std::string y = b.Feed("y", v1::INT64, {options.batch});
  std::string lr = b.Feed("lr", v1::FLOAT32, {});

  std::vector<std::vector<float>> init = InitialWeights(shape, options.seed);
  std::vector<std::string> names = MlpParameterNames(shape);
  std::vector<std::string> W, B, mW, mB;
  for (int l = 0; l < num_layers; ++l) {
    W.push_back(b.Persistent(names[2 * l], HostTensor::Floats({widths[l], widths[l + 1]}, init[2 * l])));
    B.push_back(b.Persistent(names[2 * l + 1], HostTensor::Floats({widths[l + 1]}, init[2 * l + 1])));
    std::vector<float> zw(init[2 * l].size(), 0.f), zb(init[2 * l + 1].size(), 0.f);
    mW.push_back(b.Persistent(absl::StrCat("m", names[2 * l]), HostTensor::Floats({widths[l], widths[l + 1]}, zw)));
    mB.push_back(b.Persistent(absl::StrCat("m", names[2 * l + 1]), HostTensor::Floats({widths[l + 1]}, zb)));
  }

  // Forward.
  std::vector<std::string> act{x};  // act[l] is the input of layer l
  std::string logits;
  for (int l = 0; l < num_layers; ++l) {
    std::string z = b.Op("addmm", {B[l], act[l], W[l]}, {}, l + 1 < num_layers ? absl::StrCat("z", l) : "logits");
    if (l + 1 < num_layers) {
      act.push_back(b.Op("relu", {z}, {}, absl::StrCat("a", l + 1)));
    } else {
      logits = z;
    }
  }
  std::string lsm = b.Op("_log_softmax", {logits}, {{"dim", AttrInt(1)}, {"half_to_float", AttrBool(false)}});
  std::vector<std::string> nll =
      b.OpN("nll_loss_forward", {lsm, y}, {{"reduction", AttrInt(1)}, {"ignore_index", AttrInt(-100)}}, 2,
            {"loss", "total_weight"});
  std::string loss = nll[0];

  // Backward.
  std::string g_loss = b.Op("ones_like", {loss});
  std::string g_lsm =
      b.Op("nll_loss_backward", {g_loss, lsm, y, nll[1]}, {{"reduction", AttrInt(1)}, {"ignore_index", AttrInt(-100)}});
  std::string g =
      b.Op("_log_softmax_backward_data", {g_lsm, lsm}, {{"dim", AttrInt(1)}, {"input_dtype", AttrDType(v1::FLOAT32)}});
  for (int l = num_layers - 1; l >= 0; --l) {
    std::string g_w = b.Op("mm", {b.Op("t", {act[l]}), g});
    std::string g_b = b.Op("sum.dim_IntList", {g}, {{"dim", AttrInts({0})}, {"keepdim", AttrBool(false)}});
    if (l > 0) {
      std::string g_act = b.Op("mm", {g, b.Op("t", {W[l]})});
      g = b.Op("threshold_backward", {g_act, act[l]}, {{"threshold", AttrFloat(0)}});
    }
    // SGD with momentum (PyTorch's form): m = momentum * m + g; p = p - lr * m.
    const std::pair<std::string, std::string> pairs[] = {{W[l], g_w}, {B[l], g_b}};
    const std::string* bufs[] = {&mW[l], &mB[l]};
    for (int k = 0; k < 2; ++k) {
      const auto& [param, grad] = pairs[k];
      std::string m_new =
          b.Op("add.Tensor", {b.Op("mul.Scalar", {*bufs[k]}, {{"other", AttrFloat(options.momentum)}}), grad});
      std::string p_new = b.Op("sub.Tensor", {param, b.Op("mul.Tensor", {m_new, lr})});
      b.Update(*bufs[k], m_new);
      b.Update(param, p_new);
    }
  }
  b.Fetch(loss);
  b.Fetch(logits);
  return std::move(b).Build();
}

}  // namespace tandem::examples
