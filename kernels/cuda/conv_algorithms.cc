// Choosing, sharing and running the algorithm of a convolution direction
// (conv_algorithms.h).
#include "kernels/cuda/conv_algorithms.h"

#include <cudnn.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/cudnn_engines.h"
#include "kernels/cuda/device_choices.h"
#include "kernels/cuda/kernel_util.h"
#include "kernels/cuda/time_runs.h"

namespace tandem::cuda {
namespace conv {
namespace {

// Whether a heuristic result may be used: float32 without TF32 unless the
// plan allows it, and never with a conversion to another precision (16-bit
// data take any other math type: their tensor-core kernels accumulate in
// the float32 compute type).
bool MathAllowed(const ConvPlan& plan, cudnnMathType_t math) {
  if (math == CUDNN_FMA_MATH) return true;
  if (IsHalfData(plan.type)) return math == CUDNN_DEFAULT_MATH || math == CUDNN_TENSOR_OP_MATH;
  if (plan.type != CUDNN_DATA_FLOAT) return true;
  return plan.allow_tf32 && (math == CUDNN_DEFAULT_MATH || math == CUDNN_TENSOR_OP_MATH);
}

// One algorithm cuDNN offers for a direction, best first.
struct Candidate {
  int algo;
  cudnnStatus_t status;
  size_t memory;
  cudnnMathType_t math;
  bool deterministic = true;
  float ms = -1.0f;  // the search's measured time (-1: a heuristic candidate)
};

// How algorithms are chosen, by TANDEM_CUDNN_ALGOS in the daemon's
// environment:
// - unset: measured (cuDNN runs each candidate on the call's own tensors,
//   the first time a shape runs on a stream: what PyTorch does under
//   cudnn.benchmark), except while other jobs have work on the device
//   (device::Stream::device_shared): then by cuDNN's heuristics, and measured
//   at the stream's next run of the shape with the device to itself. A
//   search's slowest candidates run for tens of milliseconds on every SM
//   (21-26 ms in DenseNet-121's first iteration on an H100, the chosen
//   algorithm 0.09 ms): a job joining a busy device held the running job's
//   steps up to 6.8x their length with them, 4.6x without
//   (docs/scheduling.md, "Joining");
// - "search": measured always;
// - "heuristic": by the heuristics always.
enum class AlgoMode { kAuto, kSearch, kHeuristic };

AlgoMode Mode() {
  static const AlgoMode mode = EnvIs("TANDEM_CUDNN_ALGOS", "heuristic") ? AlgoMode::kHeuristic
                               : EnvIs("TANDEM_CUDNN_ALGOS", "search")  ? AlgoMode::kSearch
                                                                        : AlgoMode::kAuto;
  return mode;
}

// Whether choices are ever measured.
bool MeasureAlgorithms() { return Mode() != AlgoMode::kHeuristic; }

// Whether a choice made now on `state`'s stream is measured.
bool SearchNow(const CudnnState& state) {
  switch (Mode()) {
    case AlgoMode::kSearch:
      return true;
    case AlgoMode::kHeuristic:
      return false;
    case AlgoMode::kAuto:
      return !state.stream->device_shared();
  }
  return true;
}

template <typename Perf>
void AppendPerf(const std::vector<Perf>& perf, int returned, std::vector<Candidate>* out) {
  for (int k = 0; k < returned; ++k) {
    out->push_back({static_cast<int>(perf[k].algo), perf[k].status, perf[k].memory, perf[k].mathType,
                    perf[k].determinism == CUDNN_DETERMINISTIC, perf[k].time});
  }
}

// cuDNN's search: every algorithm within `workspace_bytes` of workspace run
// once on the operands, fastest first.
absl::StatusOr<std::vector<Candidate>> MeasuredCandidates(CudnnState& state, const ConvPlan& plan, Direction dir,
                                                          const ConvOperands& op, void* workspace,
                                                          size_t workspace_bytes) {
  std::vector<Candidate> out;
  int max_count = 0, returned = 0;
  switch (dir) {
    case Direction::kForward: {
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithmMaxCount(state.handle, &max_count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(max_count));
      CUDNN_RETURN_IF_ERROR(cudnnFindConvolutionForwardAlgorithmEx(state.handle, plan.x, op.x, plan.w, op.w, plan.conv,
                                                                   plan.y, op.out, max_count, &returned, perf.data(),
                                                                   workspace, workspace_bytes));
      AppendPerf(perf, returned, &out);
      break;
    }
    case Direction::kBackwardData: {
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(state.handle, &max_count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(max_count));
      CUDNN_RETURN_IF_ERROR(cudnnFindConvolutionBackwardDataAlgorithmEx(state.handle, plan.w, op.w, plan.y, op.dy,
                                                                        plan.conv, plan.x, op.out, max_count, &returned,
                                                                        perf.data(), workspace, workspace_bytes));
      AppendPerf(perf, returned, &out);
      break;
    }
    case Direction::kBackwardFilter: {
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(state.handle, &max_count));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(max_count));
      CUDNN_RETURN_IF_ERROR(cudnnFindConvolutionBackwardFilterAlgorithmEx(
          state.handle, plan.x, op.x, plan.y, op.dy, plan.conv, plan.w, op.out, max_count, &returned, perf.data(),
          workspace, workspace_bytes));
      AppendPerf(perf, returned, &out);
      break;
    }
  }
  return out;
}

// The heuristics' results for `dir`, best first (not timed).
absl::StatusOr<std::vector<Candidate>> Candidates(CudnnState& state, const ConvPlan& plan, Direction dir) {
  std::vector<Candidate> out;
  int max_count = 0, returned = 0;
  switch (dir) {
    case Direction::kForward: {
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithmMaxCount(state.handle, &max_count));
      std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(max_count));
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionForwardAlgorithm_v7(state.handle, plan.x, plan.w, plan.conv, plan.y,
                                                                   max_count, &returned, perf.data()));
      AppendPerf(perf, returned, &out);
      break;
    }
    case Direction::kBackwardData: {
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(state.handle, &max_count));
      std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(max_count));
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardDataAlgorithm_v7(state.handle, plan.w, plan.y, plan.conv, plan.x,
                                                                        max_count, &returned, perf.data()));
      AppendPerf(perf, returned, &out);
      break;
    }
    case Direction::kBackwardFilter: {
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(state.handle, &max_count));
      std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(max_count));
      CUDNN_RETURN_IF_ERROR(cudnnGetConvolutionBackwardFilterAlgorithm_v7(state.handle, plan.x, plan.y, plan.conv,
                                                                          plan.w, max_count, &returned, perf.data()));
      AppendPerf(perf, returned, &out);
      break;
    }
  }
  return out;
}

// The workspace `algo` needs with the plan's descriptor set to `math`.
cudnnStatus_t WorkspaceSize(CudnnState& state, const ConvPlan& plan, Direction dir, int algo, size_t* bytes) {
  switch (dir) {
    case Direction::kForward:
      return cudnnGetConvolutionForwardWorkspaceSize(state.handle, plan.x, plan.w, plan.conv, plan.y,
                                                     static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
    case Direction::kBackwardData:
      return cudnnGetConvolutionBackwardDataWorkspaceSize(state.handle, plan.w, plan.y, plan.conv, plan.x,
                                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
    case Direction::kBackwardFilter:
      return cudnnGetConvolutionBackwardFilterWorkspaceSize(state.handle, plan.x, plan.y, plan.conv, plan.w,
                                                            static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
  }
  return CUDNN_STATUS_BAD_PARAM;
}

const char* DirectionName(Direction dir) {
  switch (dir) {
    case Direction::kForward:
      return "forward";
    case Direction::kBackwardData:
      return "backward data";
    case Direction::kBackwardFilter:
      return "backward filter";
  }
  return "?";
}

// The call's tensors as the convolution's x, w and y (whichever of them the
// direction writes).
struct ConvTensors {
  const void* x;
  const void* w;
  const void* y;
};
ConvTensors TensorsOf(Direction dir, const ConvOperands& op) {
  switch (dir) {
    case Direction::kForward:
      return {op.x, op.w, op.out};
    case Direction::kBackwardData:
      return {op.out, op.w, op.dy};
    case Direction::kBackwardFilter:
      return {op.x, op.out, op.dy};
  }
  return {};
}

// Runs `dir` with the algorithm, or with its graph-API plan when `engine`
// (the descriptor's math type must be set for the algorithm).
cudnnStatus_t RunDirection(cudnnHandle_t handle, const ConvPlan& plan, Direction dir, const Algo& algo, bool engine,
                           const ConvOperands& op, void* workspace) {
  const ConvTensors t = TensorsOf(dir, op);
  if (engine) return algo.engine->Run(handle, t.x, t.w, t.y, workspace);
  switch (dir) {
    case Direction::kForward:
      return cudnnConvolutionForward(handle, kOne.of(plan), plan.x, t.x, plan.w, t.w, plan.conv,
                                     static_cast<cudnnConvolutionFwdAlgo_t>(algo.algo), workspace, algo.workspace,
                                     kZero.of(plan), plan.y, const_cast<void*>(t.y));
    case Direction::kBackwardData:
      return cudnnConvolutionBackwardData(handle, kOne.of(plan), plan.w, t.w, plan.y, t.y, plan.conv,
                                          static_cast<cudnnConvolutionBwdDataAlgo_t>(algo.algo), workspace,
                                          algo.workspace, kZero.of(plan), plan.x, const_cast<void*>(t.x));
    case Direction::kBackwardFilter:
      return cudnnConvolutionBackwardFilter(handle, kOne.of(plan), plan.x, t.x, plan.y, t.y, plan.conv,
                                            static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo.algo), workspace,
                                            algo.workspace, kZero.of(plan), plan.w, const_cast<void*>(t.w));
  }
  return CUDNN_STATUS_BAD_PARAM;
}

bool CallAligned(Direction dir, const ConvOperands& op) {
  const ConvTensors t = TensorsOf(dir, op);
  for (const void* p : {t.x, t.w, t.y}) {
    if ((reinterpret_cast<uintptr_t>(p) & 15) != 0) return false;
  }
  return true;
}

// Whether convolutions also try the graph API's engines (on by default;
// TANDEM_CUDNN_ENGINES=0 in the daemon's environment keeps to the
// convolution API's algorithms). Only with measured choices.
bool TryGraphEngines() {
  static const bool engines = !EnvIs("TANDEM_CUDNN_ENGINES", "0");
  return engines && MeasureAlgorithms();
}

// Which engines a plan's node allows, within `limit` bytes of workspace.
EngineFilter FilterFor(const ConvPlan& plan, size_t limit) {
  EngineFilter filter;
  // Read once, as the other switches are.
  static const bool fallback = std::getenv("TANDEM_CUDNN_FALLBACK_ENGINES") != nullptr;
  filter.fallback = fallback;
  filter.allow_tf32 = plan.allow_tf32;
  filter.deterministic = plan.deterministic;
  filter.max_workspace = limit;
  return filter;
}

// The graph API's engines for `dir` timed against the chosen algorithm on
// the call's tensors; the fastest engine is kept in `algo` when it beats the
// algorithm by more than 3%. Nothing changes when no engine builds, runs,
// or fits the workspace.
void TryEngines(CudnnState& state, ConvPlan& plan, Direction dir, cudaStream_t stream, const ConvOperands& op,
                size_t limit, Algo* algo, int* position) {
  *position = -1;
  if (!TryGraphEngines() || !CallAligned(dir, op)) return;
  const absl::Time search_start = absl::Now();
  const EngineFilter filter = FilterFor(plan, limit);
  EngineSearchStats stats;
  absl::StatusOr<std::vector<std::unique_ptr<EnginePlan>>> plans =
      ConvEnginePlans(state.handle, dir, plan.shape, filter, &stats);
  if (!plans.ok() || plans->empty()) {
    TLOG_DEBUG("cuDNN graph API: no engine")
        .With("direction", DirectionName(dir))
        .With("why", plans.ok() ? std::string("none built") : std::string(plans.status().message()));
    return;
  }
  size_t need = algo->workspace;
  for (const auto& p : *plans) need = std::max(need, p->workspace());
  absl::StatusOr<void*> workspace = state.Workspace(need, stream);
  if (!workspace.ok()) return;
  const auto runs = [&](const Algo& a, bool engine) {
    return RunDirection(state.handle, plan, dir, a, engine, op, *workspace) == CUDNN_STATUS_SUCCESS;
  };
  const float algo_ms = TimeRuns(stream, [&] { return runs(*algo, false); });
  if (algo_ms < 0) return;
  const float give_up_ms = GiveUpMs(algo_ms);
  std::unique_ptr<EnginePlan>* best = nullptr;
  float best_ms = algo_ms * 0.97f;
  Algo trial = *algo;
  for (auto& p : *plans) {
    trial.engine = std::shared_ptr<const EnginePlan>(p.get(), [](const EnginePlan*) {});
    const float ms = TimeRuns(
        stream, [&] { return runs(trial, true); }, give_up_ms);
    if (ms >= 0 && ms < best_ms) {
      best_ms = ms;
      best = &p;
    }
  }
  TLOG_DEBUG("cuDNN graph API engines timed")
      .With("direction", DirectionName(dir))
      .With("engines", plans->size())
      .With("looked_at", absl::StrCat(stats.configs, " configs: ", stats.refused_notes, " refused for notes, ",
                                      stats.not_built, " not built, ", stats.over_workspace, " over workspace"))
      .With("algorithm_ms", algo_ms)
      .With("search_ms", absl::ToDoubleMilliseconds(absl::Now() - search_start))
      .With("chosen", best != nullptr ? absl::StrCat("engine ", (*best)->engine_index(), " ", best_ms, " ms")
                                      : std::string("the algorithm"));
  if (best == nullptr) return;
  *position = static_cast<int>(best - plans->data());
  algo->workspace = std::max(algo->workspace, (*best)->workspace());
  algo->engine = std::shared_ptr<const EnginePlan>(std::move(*best));
}

// A direction's choice, shared by the streams of one device (process-wide):
// the first stream to meet a convolution searches (cudnnFind, the engines'
// timing: 0.8 s of ResNet-50's first iteration on an H200), the others take
// its result, building only the chosen engine's plan on their own handle.
// TANDEM_CUDNN_SHARE_CHOICES=0 in the daemon's environment searches per
// stream.
struct SharedChoice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  size_t workspace = 0;       // the algorithm's, and the engine's when there is one
  int engine_position = -1;   // in ConvEnginePlans' list; -1: the algorithm
  int64_t engine_index = -1;  // its global index, checked when the plan is rebuilt
};

// By device, the convolution (plan key) and direction.
using SharedChoices = DeviceChoices<std::pair<PlanKey, int>, SharedChoice>;

SharedChoices& DeviceConvChoices() {
  static SharedChoices* const choices = new SharedChoices;
  return *choices;
}

bool ShareChoices() {
  static const bool enabled = !EnvIs("TANDEM_CUDNN_SHARE_CHOICES", "0");
  return enabled && MeasureAlgorithms();
}

std::atomic<int64_t> g_adopted{0};
std::atomic<int64_t> g_adopted_with_engine{0};
std::atomic<int64_t> g_declined{0};     // a choice existed, its workspace could not be had here
std::atomic<int64_t> g_searched{0};     // directions searched on a stream
std::atomic<int64_t> g_provisional{0};  // chosen by the heuristics while the device was shared
std::atomic<int64_t> g_refined{0};      // provisional choices chosen again with the device quiet

// Takes another stream's choice for `dir`: its algorithm, and its engine's
// plan rebuilt on this stream's handle when the choice had one and the
// heuristics list the same engine at the same place (otherwise the
// algorithm runs). Every adoption is counted and logged, with or without
// an engine.
Algo AdoptChoice(CudnnState& state, ConvPlan& plan, Direction dir, const SharedChoice& shared) {
  Algo algo{shared.algo, shared.math, shared.workspace};
  if (shared.engine_position >= 0 && TryGraphEngines()) {
    EngineFilter filter = FilterFor(plan, state.workspace_limit);
    filter.max_plans = shared.engine_position + 1;
    absl::StatusOr<std::vector<std::unique_ptr<EnginePlan>>> plans =
        ConvEnginePlans(state.handle, dir, plan.shape, filter);
    const size_t at = static_cast<size_t>(shared.engine_position);
    if (plans.ok() && plans->size() > at && (*plans)[at]->engine_index() == shared.engine_index) {
      algo.engine = std::shared_ptr<const EnginePlan>(std::move((*plans)[at]));
    }
  }
  g_adopted.fetch_add(1);
  if (algo.engine != nullptr) g_adopted_with_engine.fetch_add(1);
  TLOG_DEBUG("cuDNN choice taken from another stream")
      .With("plan", absl::StrFormat("%p", static_cast<void*>(&plan)))
      .With("direction", DirectionName(dir))
      .With("algorithm", shared.algo)
      .With("engine", algo.engine != nullptr ? absl::StrCat(shared.engine_index) : std::string("none"));
  return algo;
}

// One debug line per choice (`tandemd --log_level=debug`, `op_bench
// --log_level=debug`): the chosen algorithm and the search's fastest three,
// as algo/math/ms/MiB, to compare with what other libraries pick.
void LogChoice(const ConvPlan& plan, Direction dir, const Candidate& chosen, const std::vector<Candidate>& candidates) {
  if (MinLogLevel() > LogLevel::kDebug) return;
  const auto describe = [](const Candidate& c) {
    return absl::StrCat(c.algo, "/", static_cast<int>(c.math), "/", c.ms, "/", c.memory >> 20);
  };
  std::string measured;
  int listed = 0;
  for (const Candidate& c : candidates) {
    if (c.ms < 0 || c.status != CUDNN_STATUS_SUCCESS || listed == 3) continue;
    absl::StrAppend(&measured, listed++ == 0 ? "" : " ", describe(c));
  }
  TLOG_DEBUG("cuDNN algorithm chosen")
      .With("plan", absl::StrFormat("%p", static_cast<const void*>(&plan)))
      .With("direction", DirectionName(dir))
      .With("data_type", static_cast<int>(plan.type))
      .With("x", plan.dims)
      .With("chosen", describe(chosen))
      .With("fastest", measured.empty() ? std::string("none measured") : measured);
}

// The key of `dir`'s choice in DeviceConvChoices.
std::pair<PlanKey, int> SharedKey(const ConvPlan& plan, Direction dir) { return {plan.key, static_cast<int>(dir)}; }

// The plan's algorithm for `dir` (chosen now if new, or provisional and
// the device now quiet: measured on `op`, or by the heuristics; see Mode),
// with the descriptor's math type set for it, and a workspace large enough
// for it. A deterministic plan keeps to algorithms whose results do not
// vary from run to run (PyTorch's cudnn.deterministic); otherwise any
// algorithm may be chosen, as in PyTorch by default.
absl::StatusOr<Algo> Prepare(CudnnState& state, ConvPlan& plan, Direction dir, cudaStream_t stream,
                             const ConvOperands& op, void** workspace) {
  std::optional<Algo>& slot = plan.algos[static_cast<int>(dir)];
  const bool search = SearchNow(state);
  if (slot.has_value() && slot->provisional && search && !Capturing(stream)) {
    slot.reset();
    g_refined.fetch_add(1);
  }
  RETURN_IF_ERROR(AdoptShared(state, plan, dir, stream));
  if (!slot.has_value()) {
    if (Capturing(stream)) return CaptureMiss("a new algorithm choice");
    if (search) {
      g_searched.fetch_add(1);
    } else if (MeasureAlgorithms()) {
      g_provisional.fetch_add(1);
    }
    std::vector<Candidate> candidates;
    size_t limit = state.workspace_limit;
    if (search) {
      size_t search_bytes = 0;
      ASSIGN_OR_RETURN(void* search_space, state.SearchWorkspace(limit, stream, &search_bytes));
      limit = search_bytes;
      ASSIGN_OR_RETURN(candidates, MeasuredCandidates(state, plan, dir, op, search_space, search_bytes));
    }
    ASSIGN_OR_RETURN(std::vector<Candidate> heuristic, Candidates(state, plan, dir));
    for (Candidate& c : heuristic) c.ms = -1.0f;
    candidates.insert(candidates.end(), heuristic.begin(), heuristic.end());
    for (const Candidate& c : candidates) {
      if (c.status != CUDNN_STATUS_SUCCESS || !MathAllowed(plan, c.math)) continue;
      if (plan.deterministic && !c.deterministic) continue;
      CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(plan.conv, c.math));
      size_t bytes = 0;
      if (WorkspaceSize(state, plan, dir, c.algo, &bytes) != CUDNN_STATUS_SUCCESS) continue;
      if (bytes > limit) continue;
      slot = Algo{c.algo, c.math, bytes};
      LogChoice(plan, dir, c, candidates);
      if (!search) {
        // Kept for this stream only: another stream with the device to
        // itself searches for its own.
        slot->provisional = MeasureAlgorithms();
        state.provisional_made += slot->provisional ? 1 : 0;
        break;
      }
      int position = -1;
      TryEngines(state, plan, dir, stream, op, limit, &*slot, &position);
      if (ShareChoices()) {
        DeviceConvChoices().Put(state.device, SharedKey(plan, dir),
                                {slot->algo, slot->math, slot->workspace, position,
                                 slot->engine != nullptr ? slot->engine->engine_index() : -1});
      }
      break;
    }
    if (!slot.has_value()) {
      return absl::UnimplementedError(
          absl::StrCat("convolution: cuDNN offers no ", DirectionName(dir),
                       plan.allow_tf32 || IsHalfData(plan.type) ? " algorithm" : " algorithm without TF32", " within ",
                       limit >> 20, " MiB of workspace"));
    }
  }
  CUDNN_RETURN_IF_ERROR(cudnnSetConvolutionMathType(plan.conv, slot->math));
  ASSIGN_OR_RETURN(*workspace, state.Workspace(slot->workspace, stream));
  return *slot;
}

}  // namespace

absl::Status AdoptShared(CudnnState& state, ConvPlan& plan, Direction dir, cudaStream_t stream) {
  std::optional<Algo>& slot = plan.algos[static_cast<int>(dir)];
  if (slot.has_value() || !ShareChoices()) return absl::OkStatus();
  std::optional<SharedChoice> shared = DeviceConvChoices().Find(state.device, SharedKey(plan, dir));
  if (!shared.has_value() || shared->workspace > state.workspace_limit) return absl::OkStatus();
  if (Capturing(stream)) return CaptureMiss("a new algorithm choice");
  // The workspace this stream's own search would have taken (the one size
  // it keeps; the daemon's reserve counts it per lane). When the device
  // cannot give the choice's share of it, search here instead.
  size_t bytes = 0;
  const absl::StatusOr<void*> space = state.SearchWorkspace(state.workspace_limit, stream, &bytes);
  if (space.ok() && bytes >= shared->workspace) {
    slot = AdoptChoice(state, plan, dir, *shared);
  } else {
    g_declined.fetch_add(1);
  }
  return absl::OkStatus();
}

absl::Status Run(CudnnState& state, ConvPlan& plan, Direction dir, cudaStream_t stream, const ConvOperands& op) {
  void* workspace = nullptr;
  ASSIGN_OR_RETURN(Algo algo, Prepare(state, plan, dir, stream, op, &workspace));
  const bool engine = algo.engine != nullptr && CallAligned(dir, op);
  const cudnnStatus_t status = RunDirection(state.handle, plan, dir, algo, engine, op, workspace);
  if (status == CUDNN_STATUS_SUCCESS) return absl::OkStatus();
  return CudnnStatus(status, engine ? absl::StrCat("cudnnBackendExecute (convolution ", DirectionName(dir), ")")
                                    : absl::StrCat("cudnnConvolution (", DirectionName(dir), ")"));
}

}  // namespace conv

int64_t ProvisionalConvChoicesMade(const device::CudaStream& stream) {
  const conv::CudnnState* state = conv::CudnnState::Find(stream);
  return state == nullptr ? 0 : state->provisional_made;
}

ConvChoiceSharing ConvChoiceSharingForTesting() {
  return {conv::g_adopted.load(),  conv::g_adopted_with_engine.load(), conv::g_declined.load(),
          conv::g_searched.load(), conv::g_provisional.load(),         conv::g_refined.load()};
}

}  // namespace tandem::cuda
