// Lane warm-up: once a job's first iteration has run (and made the device's
// algorithm choices for its shapes), every other lane of its device readies
// its own stream for the job (Program::WarmStream: cuDNN plans built on the
// lane's handle), a step at a time on the lane's executor, between the
// lane's iterations. A job the policy later moves to one of those lanes
// then runs its first iteration there without that setup, which held the
// lane's thread for 20-30 ms with a ResNet-18 on an H200 and every
// iteration of the lane's other jobs behind it (docs/gpu.md).
#include <utility>

#include "base/log.h"
#include "server/device_dispatcher.h"

namespace tandem::server {

void DeviceDispatcher::WarmLanesFor(const Job& job) {
  if (!host_.Options().warm_lanes) return;
  for (int lane = 0; lane < static_cast<int>(dev_.lanes.size()); ++lane) {
    if (lane == job.lane) continue;
    dev_.lanes[lane].warm_tasks.push_back({job.id, 0});
    PumpWarmUp(lane);
  }
}

void DeviceDispatcher::WarmNewLane(int lane) {
  if (!host_.Options().warm_lanes) return;
  host_.ForEachJob([&](Job& job) {
    if (job.device == &dev_ && job.lane != lane && job.state == JobState::kRunning && job.done > 0) {
      dev_.lanes[lane].warm_tasks.push_back({job.id, 0});
    }
    return true;
  });
  PumpWarmUp(lane);
}

void DeviceDispatcher::PumpWarmUp(int lane) {
  Lane& l = dev_.lanes[lane];
  if (host_.ShuttingDown()) return;  // the executors are going
  while (!l.warm_in_flight && !l.warm_tasks.empty()) {
    const WarmTask task = l.warm_tasks.front();
    l.warm_tasks.pop_front();
    Job* j = host_.JobById(task.job);
    // A job gone, closing, or moved here meanwhile (its own iterations set
    // the lane up) needs no warm-up.
    if (j == nullptr || j->state != JobState::kRunning || j->lane == lane) continue;
    Job& job = *j;
    job.warm_steps++;
    l.warm_in_flight = true;
    Program* program = job.program.get();
    device::Stream* stream = l.stream.get();
    l.executor->Post([this, lane, program, stream, task]() {
      absl::StatusOr<int> next = program->WarmStream(*stream, task.node);
      loop_.Post("Executor.OnWarmStep", [this, lane, task, next = std::move(next)]() { OnWarmStep(lane, task, next); });
    });
  }
}

void DeviceDispatcher::OnWarmStep(int lane, WarmTask task, const absl::StatusOr<int>& next) {
  Lane& l = dev_.lanes[lane];
  l.warm_in_flight = false;
  dev_.warm_steps++;
  if (l.outstanding == 0) dev_.memory->ReleaseRetired(lane);
  if (Job* j = host_.JobById(task.job); j != nullptr) {
    Job& job = *j;
    job.warm_steps--;
    if (!next.ok()) {
      // The first iteration there does the setup and reports what fails.
      TLOG_WARNING("lane warm-up stopped")
          .With("job", job.id)
          .With("lane", lane)
          .With("status", next.status().ToString());
    } else if (*next >= 0) {
      l.warm_tasks.push_front({task.job, *next});  // the job's next node before other jobs
    }
    host_.MaybeFinishClose(job);
  }
  PumpWarmUp(lane);
}

}  // namespace tandem::server
