// stream_stall_bench: does a CUDA call on one thread hold up the launches
// of another thread on another stream? tandemd's lanes each have a thread
// that launches its jobs' graphs on the lane's stream; when one lane's
// thread instantiates a graph (a job's first iteration there), destroys one
// (a job's graphs on a lane it left) or allocates, the hosting benchmark
// saw every lane wait at once. This measures it without the daemon.
//
// Besides those, the calls of a job's first iteration on a new lane:
// pinned staging, a shared-memory registration, a large device allocation,
// cuDNN's and cuBLASLt's handles.
//
// One "lane" thread launches a small graph (kNodes memsets) on its stream
// at a steady pace and times each cudaGraphLaunch call on the host; an
// "other" thread performs one kind of call every --every_ms on a stream of
// its own. Per kind: the lane's launch times (p50, p99, max) and how many
// took over 1 ms, and its longest batch of 64 launches up to the return of
// the synchronize after them (64 x --launch_us when nothing holds it up),
// beside the same with the other thread idle.
//
//   stream_stall_bench                  # about 10 s on an H200
//   stream_stall_bench --seconds=1 --every_ms=5
#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"

ABSL_FLAG(double, seconds, 1.5, "how long each kind is measured");
ABSL_FLAG(double, every_ms, 2.0, "the other thread's pace: one call per this many ms");
ABSL_FLAG(double, launch_us, 50.0, "the lane thread's pace: one graph launch per this many microseconds");

namespace {

constexpr int kNodes = 8;                   // memsets per graph
constexpr size_t kBytes = size_t{4} << 20;  // per memset

// Ends the program with the call that failed and its error.
void Check(bool ok, const char* call, const char* error) {
  if (ok) return;
  std::fprintf(stderr, "stream_stall_bench: %s: %s\n", call, error);
  std::exit(1);
}

// Each evaluates the call once and hands its error text to Check.
#define CHECK_CUDA(call)                                         \
  do {                                                           \
    const cudaError_t err_ = (call);                             \
    Check(err_ == cudaSuccess, #call, cudaGetErrorString(err_)); \
  } while (0)
#define CHECK_CUDNN(call)                                                  \
  do {                                                                     \
    const cudnnStatus_t err_ = (call);                                     \
    Check(err_ == CUDNN_STATUS_SUCCESS, #call, cudnnGetErrorString(err_)); \
  } while (0)
#define CHECK_CUBLAS(call)                                                      \
  do {                                                                          \
    const cublasStatus_t err_ = (call);                                         \
    Check(err_ == CUBLAS_STATUS_SUCCESS, #call, cublasLtGetStatusString(err_)); \
  } while (0)

constexpr size_t kLarge = size_t{64} << 20;  // the large host buffers' size

using Clock = std::chrono::steady_clock;

// The other thread's call that allocates and frees `bytes` of device memory.
std::function<void()> DeviceAllocation(size_t bytes) {
  return [bytes] {
    void* p = nullptr;
    CHECK_CUDA(cudaMalloc(&p, bytes));
    CHECK_CUDA(cudaFree(p));
  };
}

// The same with pinned host memory.
std::function<void()> PinnedAllocation(size_t bytes) {
  return [bytes] {
    void* p = nullptr;
    CHECK_CUDA(cudaMallocHost(&p, bytes));
    CHECK_CUDA(cudaFreeHost(p));
  };
}

// A captured graph of kNodes memsets of `buffer` on `stream`.
cudaGraph_t CaptureMemsets(cudaStream_t stream, void* buffer) {
  cudaGraph_t graph = nullptr;
  CHECK_CUDA(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < kNodes; ++i) CHECK_CUDA(cudaMemsetAsync(buffer, i, kBytes, stream));
  CHECK_CUDA(cudaStreamEndCapture(stream, &graph));
  return graph;
}

struct Kind {
  std::string name;
  std::function<void()> call;  // run by the other thread; empty: idle
};

struct Result {
  double p50_us = 0, p99_us = 0, max_us = 0;
  int over_1ms = 0;
  int launches = 0;
  double batch_max_ms = 0;  // the longest batch of 64 launches, from its first launch to its synchronize's return
  int calls = 0;
  double call_ms = 0;  // the other thread's mean per call
};

Result Measure(const Kind& kind, cudaStream_t lane, cudaGraphExec_t exec, double seconds, double every_ms,
               double launch_us) {
  std::atomic<bool> stop{false};
  Result r;
  std::thread other([&] {
    if (!kind.call) return;
    auto next = Clock::now();
    double total = 0;
    while (!stop.load()) {
      const auto t0 = Clock::now();
      kind.call();
      total += std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
      ++r.calls;
      next += std::chrono::microseconds(static_cast<int64_t>(every_ms * 1000));
      std::this_thread::sleep_until(next);
    }
    r.call_ms = r.calls > 0 ? total / r.calls : 0;
  });
  std::vector<double> us;
  const auto end = Clock::now() + std::chrono::microseconds(static_cast<int64_t>(seconds * 1e6));
  auto next = Clock::now();
  auto batch_start = next;
  while (Clock::now() < end) {
    const auto t0 = Clock::now();
    CHECK_CUDA(cudaGraphLaunch(exec, lane));
    us.push_back(std::chrono::duration<double, std::micro>(Clock::now() - t0).count());
    next += std::chrono::microseconds(static_cast<int64_t>(launch_us));
    while (Clock::now() < next) {
    }
    if (us.size() % 64 == 0) {  // keep the queue short, as a lane does; the batch's time includes the device's
      CHECK_CUDA(cudaStreamSynchronize(lane));
      const auto now = Clock::now();
      r.batch_max_ms = std::max(r.batch_max_ms, std::chrono::duration<double, std::milli>(now - batch_start).count());
      batch_start = now;
      next = now;
    }
  }
  stop = true;
  other.join();
  CHECK_CUDA(cudaStreamSynchronize(lane));
  std::sort(us.begin(), us.end());
  r.launches = static_cast<int>(us.size());
  r.p50_us = us[us.size() / 2];
  r.p99_us = us[us.size() * 99 / 100];
  r.max_us = us.back();
  r.over_1ms = static_cast<int>(std::count_if(us.begin(), us.end(), [](double v) { return v > 1000; }));
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "stream_stall_bench: no CUDA device\n");
    return 2;
  }
  CHECK_CUDA(cudaSetDevice(0));
  cudaDeviceProp prop;
  CHECK_CUDA(cudaGetDeviceProperties(&prop, 0));
  cudaStream_t lane = nullptr, side = nullptr;
  CHECK_CUDA(cudaStreamCreateWithFlags(&lane, cudaStreamNonBlocking));
  CHECK_CUDA(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking));
  void* lane_buffer = nullptr;
  void* side_buffer = nullptr;
  CHECK_CUDA(cudaMalloc(&lane_buffer, kBytes));
  CHECK_CUDA(cudaMalloc(&side_buffer, kBytes));
  cudaGraph_t lane_graph = CaptureMemsets(lane, lane_buffer);
  cudaGraphExec_t lane_exec = nullptr;
  CHECK_CUDA(cudaGraphInstantiate(&lane_exec, lane_graph, 0));
  CHECK_CUDA(cudaGraphUpload(lane_exec, lane));
  cudaGraph_t side_graph = CaptureMemsets(side, side_buffer);
  std::vector<cudaGraphExec_t> made;   // instantiated by "instantiate", destroyed by "destroy"
  std::vector<char> pageable(kLarge);  // registered and unregistered by "cudaHostRegister"

  // The other thread's calls, each as a lane thread of tandemd makes them.
  const std::vector<Kind> kinds = {
      {"idle", nullptr},
      {"capture + instantiate + upload",
       [&] {
         cudaGraph_t g = CaptureMemsets(side, side_buffer);
         cudaGraphExec_t e = nullptr;
         CHECK_CUDA(cudaGraphInstantiate(&e, g, 0));
         CHECK_CUDA(cudaGraphUpload(e, side));
         CHECK_CUDA(cudaGraphDestroy(g));
         made.push_back(e);
       }},
      {"cudaGraphExecDestroy",
       [&] {
         cudaGraphExec_t e = nullptr;
         if (!made.empty()) {
           e = made.back();
           made.pop_back();
         } else {
           CHECK_CUDA(cudaGraphInstantiate(&e, side_graph, 0));
         }
         CHECK_CUDA(cudaGraphExecDestroy(e));
       }},
      {"cudaMalloc + cudaFree 1 MiB", DeviceAllocation(size_t{1} << 20)},
      {"cudaMallocHost + cudaFreeHost 1 MiB", PinnedAllocation(size_t{1} << 20)},
      {"cudaStreamCreate + cudaStreamDestroy",
       [&] {
         cudaStream_t s = nullptr;
         CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
         CHECK_CUDA(cudaStreamDestroy(s));
       }},
      // What a job's first iteration on a new lane does besides its kernels:
      // staging buffers, a client's shared memory pinned, a lane's library
      // handles and workspaces.
      {"cudaMallocHost + cudaFreeHost 64 MiB", PinnedAllocation(kLarge)},
      {"cudaHostRegister + Unregister 64 MiB",
       [&] {
         CHECK_CUDA(cudaHostRegister(pageable.data(), kLarge, cudaHostRegisterPortable));
         CHECK_CUDA(cudaHostUnregister(pageable.data()));
       }},
      {"cudaMalloc + cudaFree 1 GiB", DeviceAllocation(size_t{1} << 30)},
      {"cudnnCreate + cudnnDestroy",
       [&] {
         cudnnHandle_t h = nullptr;
         CHECK_CUDNN(cudnnCreate(&h));
         CHECK_CUDNN(cudnnSetStream(h, side));
         CHECK_CUDNN(cudnnDestroy(h));
       }},
      {"cublasLtCreate + cublasLtDestroy",
       [&] {
         cublasLtHandle_t h = nullptr;
         CHECK_CUBLAS(cublasLtCreate(&h));
         CHECK_CUBLAS(cublasLtDestroy(h));
       }},
  };
  const double seconds = absl::GetFlag(FLAGS_seconds);
  const double every_ms = absl::GetFlag(FLAGS_every_ms);
  const double launch_us = absl::GetFlag(FLAGS_launch_us);
  std::printf(
      "GPU: %s; lane thread: a graph of %d memsets of %zu MiB every %.0f us; other thread: a call every "
      "%.1f ms, %.1f s per kind\n",
      prop.name, kNodes, kBytes >> 20, launch_us, every_ms, seconds);
  std::printf("%-38s %8s %8s %8s %9s %8s %10s %7s %9s\n", "other thread's call", "launches", "p50 us", "p99 us",
              "max us", ">1 ms", "batch ms", "calls", "call ms");
  // The creates and frees of the sequence match: instantiate fills `made`, destroy empties it.
  for (const Kind& kind : kinds) {
    const Result r = Measure(kind, lane, lane_exec, seconds, every_ms, launch_us);
    std::printf("%-38s %8d %8.1f %8.1f %9.1f %8d %10.2f %7d %9.3f\n", kind.name.c_str(), r.launches, r.p50_us, r.p99_us,
                r.max_us, r.over_1ms, r.batch_max_ms, r.calls, r.call_ms);
    std::fflush(stdout);
  }
  for (cudaGraphExec_t e : made) cudaGraphExecDestroy(e);
  cudaGraphExecDestroy(lane_exec);
  cudaGraphDestroy(lane_graph);
  cudaGraphDestroy(side_graph);
  cudaFree(lane_buffer);
  cudaFree(side_buffer);
  cudaStreamDestroy(lane);
  cudaStreamDestroy(side);
  return 0;
}
