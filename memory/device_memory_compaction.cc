// DeviceMemory::Compact: undoing fragmentation between iterations.
//
// The daemon calls it when every lane is idle, so lane arenas hold nothing
// and retired ranges are free to reuse; only persistent tensors hold data.
// Steps: free the retired ranges; push every arena to the highest free range
// (largest first); then, in address order, slide each persistent tensor down
// over the free range right below it (through a temporary range when that
// gap is smaller than the tensor: a device-to-device copy must not overlap
// itself), or, when nothing is free right below it, move it into the lowest
// free range that holds it; finally push the arenas up again into the room
// the tensors left. With the arenas above the tensors, the tensors end up
// packed from offset 0 and the free bytes form one range. Every copy is on
// the caller's stream, in order, so a range vacated by one move can be the
// target of the next.
#include <algorithm>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "memory/device_memory_impl.h"

namespace tandem::memory {

CompactionResult DeviceMemoryImpl::Compact(device::Stream& stream) {
  CompactionResult result;
  result.largest_free_before = space_.largest_free();
  std::vector<uint64_t> arena_before(lanes_.size(), 0);
  for (size_t i = 0; i < lanes_.size(); ++i) arena_before[i] = lanes_[i].arena.offset;

  for (Lane& lane : lanes_) {
    for (const Range& range : lane.retired) space_.Free(range.offset, range.bytes);
    lane.retired.clear();
  }

  auto arenas_up = [&] {
    std::vector<int> order;
    for (int i = 0; i < NumLanes(); ++i) {
      if (lanes_[i].open) order.push_back(i);
    }
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return lanes_[a].arena.bytes > lanes_[b].arena.bytes; });
    for (int i : order) {
      Range& arena = lanes_[i].arena;
      space_.Free(arena.offset, arena.bytes);
      // Its own range is free again, so a place always exists.
      arena.offset = *space_.AllocateHighest(arena.bytes);
    }
  };
  arenas_up();

  // Persistent tensors in address order.
  std::vector<std::tuple<uint64_t, JobId, int>> order;
  for (const auto& [id, job] : jobs_) {
    for (size_t t = 0; t < job.tensors.size(); ++t) {
      order.emplace_back(job.tensors[t].offset, id, static_cast<int>(t));
    }
  }
  std::sort(order.begin(), order.end());
  for (const auto& [unused, id, index] : order) {
    Tensor& tensor = jobs_.at(id).tensors[index];
    const uint64_t from = tensor.offset;
    const uint64_t gap = space_.FreeBytesEndingAt(from);
    uint64_t to = from;
    absl::Status copied;
    if (gap >= tensor.aligned) {
      // Slide down into the free range right below, which holds it whole.
      to = from - gap;
      copied = device_.CopyOnDevice(stream, Address(to), Address(from), tensor.bytes);
    } else if (std::optional<uint64_t> temp = gap > 0 ? space_.AllocateHighest(tensor.aligned) : std::nullopt) {
      // Slide down by less than its size: through a temporary range (the
      // gap is too small to hold the temporary, so it lies elsewhere).
      to = from - gap;
      copied = device_.CopyOnDevice(stream, Address(*temp), Address(from), tensor.bytes);
      if (copied.ok()) {
        // Had this copy failed, the tensor's own bytes are untouched.
        copied = device_.CopyOnDevice(stream, Address(to), Address(*temp), tensor.bytes);
      }
      space_.Free(*temp, tensor.aligned);
    } else if (std::optional<Range> below = space_.LowestFitBelow(from, tensor.aligned)) {
      // Nothing free right below (an arena, or no room to stage): hop into
      // a lower free range that holds it.
      to = below->offset;
      copied = device_.CopyOnDevice(stream, Address(to), Address(from), tensor.bytes);
    } else {
      continue;
    }
    if (!copied.ok()) {
      result.status = copied;
      break;
    }
    space_.Free(from, tensor.aligned);
    space_.AllocateAt(to, tensor.aligned);
    tensor.offset = to;
    result.moves.push_back(TensorMove{id, index, Address(from), Address(to), tensor.bytes});
    result.bytes_moved += tensor.bytes;
  }

  arenas_up();
  TrimLanes();
  for (int i = 0; i < NumLanes(); ++i) {
    const bool existed = static_cast<size_t>(i) < arena_before.size();
    if (lanes_[i].open && (!existed || lanes_[i].arena.offset != arena_before[i])) {
      result.lanes_moved.push_back(i);
    }
  }
  if (!result.moves.empty()) {
    absl::Status synced = device_.Synchronize(stream);
    if (!synced.ok() && result.status.ok()) {
      result.status =
          absl::Status(synced.code(), absl::StrCat("compaction on ", device_.info().name,
                                                   ": the copy stream failed; the moved tensors' contents are "
                                                   "unreliable: ",
                                                   synced.message()));
    }
  }
  result.largest_free_after = space_.largest_free();
  ++compactions_;
  compaction_bytes_moved_ += result.bytes_moved;
  return result;
}

}  // namespace tandem::memory
