// One polling pass over pending completions, in the order they were added,
// keeping each stream's order: the CUDA backend's completion worker
// (device/cuda/cuda_stream.cc) runs one per poll. Free of CUDA so that the
// rule can be tested on any machine (completion_pass_test.cc).
//
// A stream's completions end in order, but the queries of one pass are not
// simultaneous: a stream's completion found pending may end before the
// stream's next one is asked about, and that one would then be reported
// first. So a pass asks nothing more of a stream once one of its
// completions is pending.
#ifndef TANDEM_DEVICE_COMPLETION_PASS_H_
#define TANDEM_DEVICE_COMPLETION_PASS_H_

#include <algorithm>
#include <cstddef>
#include <vector>

namespace tandem::device {

// streams[i]: the stream of the i-th pending completion (oldest first).
// ended(i): asks whether completion i is no longer pending (it ended, or
// failed); asked at most once per completion, in order. Returns the indices
// that may be reported now, in order.
template <typename Ended>
std::vector<size_t> CompletionPass(const std::vector<const void*>& streams, Ended&& ended) {
  std::vector<size_t> reportable;
  std::vector<const void*> waiting;  // streams with a completion still pending in this pass
  for (size_t i = 0; i < streams.size(); ++i) {
    if (std::find(waiting.begin(), waiting.end(), streams[i]) != waiting.end()) continue;
    if (ended(i)) {
      reportable.push_back(i);
    } else {
      waiting.push_back(streams[i]);
    }
  }
  return reportable;
}

}  // namespace tandem::device

#endif  // TANDEM_DEVICE_COMPLETION_PASS_H_
