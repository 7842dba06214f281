// The run and read requests: validation and queueing. Their dispatch onto
// the device and completion: DeviceDispatcher (dispatcher_iterations.cc).
#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "ir/graph_builder.h"
#include "server/service.h"
#include "server/tensor_frames.h"

namespace tandem::server {
namespace {

// Checks a run request against the job's graph it names (`variant`: its
// index, Job::View): every feed present once, of the declared type and byte
// size, inline, in the frames after the request (`frames`, null when none
// came) or in a slice of one of the session's shared-memory regions; fetches
// fetchable. Returns each feed's region (null for inline or framed bytes).
absl::StatusOr<std::vector<std::shared_ptr<SharedRegion>>> ValidateRun(const Job& job, const Session& session,
                                                                       const v1::RunIterationRequest& run,
                                                                       const RequestFrames* frames, int* variant) {
  std::vector<std::shared_ptr<SharedRegion>> regions;
  std::vector<FramedTensor> framed;
  *variant = job.FindVariant(run.variant());
  if (*variant < 0) {
    std::string names;
    for (const GraphVariant& v : job.variants) absl::StrAppend(&names, ", '", v.name, "'");
    return absl::InvalidArgumentError(absl::StrCat("job '", job.name, "' has no graph variant '", run.variant(),
                                                   "'; it has the registered graph ('')", names));
  }
  const Graph& g = *job.View(*variant).graph;
  if (run.feeds_size() != static_cast<int>(g.feeds.size())) {
    std::string want;
    for (int v : g.feeds) absl::StrAppend(&want, want.empty() ? "" : ", ", g.values[v].name);
    return absl::InvalidArgumentError(
        absl::StrCat("job '", job.name, "' takes ", g.feeds.size(), " feeds (", want, "), got ", run.feeds_size()));
  }
  for (int i = 0; i < run.feeds_size(); ++i) {
    const v1::Tensor& feed = run.feeds(i);
    const std::string& name = feed.spec().name();
    int v = g.Find(name);
    if (v < 0 || g.values[v].kind != ValueKind::kFeed) {
      return absl::InvalidArgumentError(absl::StrCat("'", name, "' is not a feed of job '", job.name, "'"));
    }
    for (int j = 0; j < i; ++j) {
      if (run.feeds(j).spec().name() == name) {
        return absl::InvalidArgumentError(absl::StrCat("feed '", name, "' is given twice"));
      }
    }
    const TensorType& want = g.values[v].type;
    if (feed.spec().dtype() != v1::DTYPE_UNSPECIFIED) {
      TensorType got;
      auto dtype = DTypeFromProto(feed.spec().dtype());
      if (!dtype.ok()) return absl::InvalidArgumentError(absl::StrCat("feed '", name, "': ", dtype.status().message()));
      got.dtype = *dtype;
      got.shape.assign(feed.spec().shape().begin(), feed.spec().shape().end());
      if (!(got == want)) {
        return absl::InvalidArgumentError(absl::StrCat("feed '", name, "' is ", got.ToString(), "; job '", job.name,
                                                       "' was registered with ", want.ToString()));
      }
    }
    if (feed.has_shared()) {
      const v1::SharedSlice& slice = feed.shared();
      auto r = session.regions.find(slice.region_id());
      if (r == session.regions.end()) {
        return absl::NotFoundError(
            absl::StrCat("feed '", name, "': no shared-memory region ", slice.region_id(), " in this session"));
      }
      const SharedRegion& region = *r->second;
      if (!feed.data().empty() || feed.frame() != 0 || slice.bytes() != want.bytes() ||
          slice.offset() > region.bytes() || slice.bytes() > region.bytes() - slice.offset()) {
        return absl::InvalidArgumentError(
            absl::StrCat("feed '", name, "': shared slice [", slice.offset(), ", +", slice.bytes(), ") of region ",
                         region.id(), " (", region.bytes(), " bytes) must hold exactly ", want.bytes(), " bytes (",
                         want.ToString(), ") inside the region, with no inline data or frames"));
      }
      regions.push_back(r->second);
      continue;
    }
    if (FramesOf(feed).count > 0) {
      framed.push_back({&feed, &want});  // checked with the others below
      regions.push_back(nullptr);
      continue;
    }
    if (feed.data().size() != want.bytes()) {
      return absl::InvalidArgumentError(absl::StrCat("feed '", name, "' has ", feed.data().size(), " bytes of data; ",
                                                     want.ToString(), " is ", want.bytes(), " bytes"));
    }
    regions.push_back(nullptr);
  }
  RETURN_IF_ERROR(CheckTensorFrames("feed", framed, frames));
  for (const std::string& name : run.fetches()) {
    int v = g.Find(name);
    bool ok = false;
    for (int f : g.fetchable) ok |= (f == v);
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", name, "' is not a fetch of job '", job.name, "' (register it in graph.fetches)"));
    }
  }
  return regions;
}

}  // namespace

void Service::OnRunIteration(const PendingReply& to, Session& session, std::shared_ptr<const v1::Request> request,
                             std::shared_ptr<const RequestFrames> frames) {
  const v1::RunIterationRequest& run = request->run_iteration();
  auto job_or = FindJob(session, run.job_id());
  if (!job_or.ok()) {
    ReplyError(to, job_or.status());
    return;
  }
  Job& job = **job_or;
  absl::StatusOr<std::vector<std::shared_ptr<SharedRegion>>> regions;
  int variant = 0;
  {
    LoopSection timed(loop_, "RunIteration/validate");
    regions = ValidateRun(job, session, run, frames.get(), &variant);
  }
  if (!regions.ok()) {
    ReplyError(to, regions.status());
    return;
  }
  if (static_cast<int>(job.queued.size()) >= options_.max_queued_per_job) {
    ReplyError(to, absl::ResourceExhaustedError(absl::StrCat("job '", job.name, "' already has ", job.queued.size(),
                                                             " iterations waiting; wait for some to finish")));
    return;
  }
  DeviceRuntime& dev = *job.device;
  uint64_t ticket = next_ticket_++;
  if (absl::Status s = dev.scheduler->Enqueue(job.id, ticket); !s.ok()) {
    ReplyError(to, s);
    return;
  }
  job.queued.emplace(
      ticket, QueuedIteration{to, std::move(request), *std::move(regions), std::move(frames), Clock::now(), variant});
  job.received++;
  LoopSection timed(loop_, "RunIteration/dispatch");
  DispatcherOf(dev).DispatchAll();
}

void Service::OnReadTensor(const PendingReply& to, Session& session, const v1::ReadTensorRequest& read) {
  auto job_or = FindJob(session, read.job_id());
  if (!job_or.ok()) {
    ReplyError(to, job_or.status());
    return;
  }
  Job& job = **job_or;
  int v = job.graph->Find(read.name());
  if (v < 0 || job.graph->values[v].kind != ValueKind::kPersistent) {
    ReplyError(to,
               absl::NotFoundError(absl::StrCat("job '", job.name, "' has no persistent tensor '", read.name(), "'")));
    return;
  }
  // A read sees every iteration the client sent before it.
  job.reads.push_back(PendingRead{to, v, job.received});
  DispatcherOf(*job.device).StartReads(job);
}

}  // namespace tandem::server
