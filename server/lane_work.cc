#include "server/lane_work.h"

namespace tandem::server {

absl::Status EnqueueLaneWork(const LaneWork& w) {
  device::Device& device = *w.device;
  device::Stream& stream = *w.stream;
  absl::Status status;
  if (w.first) {
    status = device.RecordEvent(stream, *w.begin);
    for (const StagedCopy& c : w.feeds) {
      if (status.ok()) status = device.CopyToDevice(stream, c.dst, c.src, c.bytes);
    }
    if (status.ok()) status = device.RecordEvent(stream, *w.start);
  }
  if (status.ok() && w.segment_start != nullptr) status = device.RecordEvent(stream, *w.segment_start);
  if (status.ok()) {
    status = w.whole ? w.program->Enqueue(stream, *w.table)
                     : w.program->EnqueueNodes(stream, *w.table, w.begin_node, w.end_node);
  }
  if (status.ok() && w.segment_end != nullptr) status = device.RecordEvent(stream, *w.segment_end);
  if (w.last) {
    if (status.ok()) status = device.RecordEvent(stream, *w.end);
    for (const StagedCopy& c : w.fetches) {
      if (status.ok()) status = device.CopyToHost(stream, c.dst, c.src, c.bytes);
    }
  }
  return status;
}

}  // namespace tandem::server
