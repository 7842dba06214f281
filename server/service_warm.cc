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
#include "server/service.h"

namespace tandem::server {

void Service::WarmLanesFor(DeviceRuntime& dev, const Job& job) {
  if (!options_.warm_lanes) return;
  for (int lane = 0; lane < static_cast<int>(dev.lanes.size()); ++lane) {
    if (lane == job.lane) continue;
    dev.lanes[lane].warm_tasks.push_back({job.id, 0});
    PumpWarmUp(dev, lane);
  }
}

void Service::WarmNewLane(DeviceRuntime& dev, int lane) {
  if (!options_.warm_lanes) return;
  for (const auto& [id, job] : jobs_) {
    if (job->device == &dev && job->lane != lane && job->state == JobState::kRunning && job->done > 0) {
      dev.lanes[lane].warm_tasks.push_back({id, 0});
    }
  }
  PumpWarmUp(dev, lane);
}

void Service::PumpWarmUp(DeviceRuntime& dev, int lane) {
  Lane& l = dev.lanes[lane];
  if (shutting_down_) return;  // the executors are going
  while (!l.warm_in_flight && !l.warm_tasks.empty()) {
    const WarmTask task = l.warm_tasks.front();
    l.warm_tasks.pop_front();
    auto j = jobs_.find(task.job);
    // A job gone, closing, or moved here meanwhile (its own iterations set
    // the lane up) needs no warm-up.
    if (j == jobs_.end() || j->second->state != JobState::kRunning || j->second->lane == lane) continue;
    Job& job = *j->second;
    job.warm_steps++;
    l.warm_in_flight = true;
    Program* program = job.program.get();
    device::Stream* stream = l.stream.get();
    DeviceRuntime* devp = &dev;
    l.executor->Post([this, devp, lane, program, stream, task]() {
      absl::StatusOr<int> next = program->WarmStream(*stream, task.node);
      loop_.Post("Executor.OnWarmStep",
                 [this, devp, lane, task, next = std::move(next)]() { OnWarmStep(*devp, lane, task, next); });
    });
  }
}

void Service::OnWarmStep(DeviceRuntime& dev, int lane, WarmTask task, const absl::StatusOr<int>& next) {
  Lane& l = dev.lanes[lane];
  l.warm_in_flight = false;
  dev.warm_steps++;
  if (l.outstanding == 0) dev.memory->ReleaseRetired(lane);
  if (auto j = jobs_.find(task.job); j != jobs_.end()) {
    Job& job = *j->second;
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
    MaybeFinishClose(job);
  }
  PumpWarmUp(dev, lane);
}

}  // namespace tandem::server
