// Registration and closing of jobs (admission: service_admission.cc).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "base/log.h"
#include "base/status_macros.h"
#include "codegen/job_kernels.h"
#include "compiler/compile_job.h"
#include "ir/graph_builder.h"
#include "proto/status_convert.h"
#include "server/checkpoint_file.h"
#include "server/interference_key.h"
#include "server/service.h"
#include "server/shared_frames.h"
#include "server/tensor_frames.h"

namespace tandem::server {
namespace {

// A registration's persistent tensors sent as frames (graph.persistents
// follows reg.persistent()'s order). Inline tensors were checked by
// BuildGraph.
absl::Status CheckPersistentFrames(const v1::RegisterJobRequest& reg, const Graph& graph, const RequestFrames* frames) {
  std::vector<FramedTensor> tensors;
  tensors.reserve(reg.persistent_size());
  for (int i = 0; i < reg.persistent_size(); ++i) {
    tensors.push_back({&reg.persistent(i), &graph.values[graph.persistents[i]].type});
  }
  return CheckTensorFrames("persistent tensor", tensors, frames);
}

// The program of `graph` for `device`, and each variant's (set in it).
absl::StatusOr<std::unique_ptr<Program>> CreatePrograms(const Graph& graph, std::vector<GraphVariant>& variants,
                                                        device::Device& device) {
  ASSIGN_OR_RETURN(std::unique_ptr<Program> program, CreateProgram(graph, device));
  for (GraphVariant& v : variants) {
    absl::StatusOr<std::unique_ptr<Program>> p = CreateProgram(*v.graph, device);
    if (!p.ok()) {
      return absl::Status(p.status().code(), absl::StrCat("graph variant '", v.name, "': ", p.status().message()));
    }
    v.program = *std::move(p);
  }
  return program;
}

}  // namespace

void Service::TestPrepareDelay() {
  // For tests only: a slow preparation, to show that the loop serves others
  // meanwhile and that a session may end before it is done
  // (tests/registration_test.cc).
  static const int delay_ms = [] {
    const char* v = std::getenv("TANDEM_TEST_PREPARE_DELAY_MS");
    return v != nullptr ? std::atoi(v) : 0;
  }();
  if (delay_ms > 0) std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
}

void Service::OnRegisterJob(const PendingReply& to, Session& session, std::shared_ptr<const v1::Request> request,
                            std::shared_ptr<const RequestFrames> frames) {
  const v1::RegisterJobRequest& reg = request->register_job();
  // The id is taken now, so that concurrent registrations' default names
  // differ; a registration that fails leaves a gap.
  const uint64_t job_id = next_job_++;
  std::string name = reg.name().empty() ? absl::StrCat("job-", job_id) : reg.name();
  auto fail = [&](const absl::Status& s) {
    ReplyError(to, absl::Status(s.code(), absl::StrCat("job '", name, "': ", s.message())));
  };
  if (!(reg.hints().weight() >= 0) || std::isinf(reg.hints().weight())) {
    fail(absl::InvalidArgumentError(absl::StrCat("weight ", reg.hints().weight(), " must be finite and >= 0")));
    return;
  }
  if (reg.hints().expected_iterations() < 0 || reg.hints().expected_iterations() > sched::kMaxExpectedIterations) {
    fail(absl::InvalidArgumentError(absl::StrCat("expected_iterations ", reg.hints().expected_iterations(),
                                                 " is out of range [0, ", sched::kMaxExpectedIterations, "]")));
    return;
  }
  if (!options_.test_faults) {
    auto faults = [](const v1::Graph& graph) {
      return std::any_of(graph.nodes().begin(), graph.nodes().end(),
                         [](const v1::Node& node) { return node.op() == "test_fault"; });
    };
    bool uses = faults(reg.graph());
    for (const v1::GraphVariant& variant : reg.variants()) uses = uses || faults(variant.graph());
    if (uses) {
      fail(absl::InvalidArgumentError(
          "the op test_fault faults the device on purpose: only a tandemd started with --test_faults accepts it"));
      return;
    }
  }
  if (absl::Status s = CheckHintCeilings(reg.hints(), session.admin, AccessOptionsNow()); !s.ok()) {
    fail(s);
    return;
  }
  if (const size_t held = session.jobs.size() + session.registering + waiting_for_memory_.CountOf(session.id);
      held >= static_cast<size_t>(options_.max_jobs_per_session)) {
    fail(absl::ResourceExhaustedError(
        absl::StrCat("this session holds ", held,
                     " jobs (running, waiting for memory or registering), the most tandemd's "
                     "max_jobs_per_session allows; close one first")));
    return;
  }
  std::shared_ptr<UniqueFd> frames_fd;
  if (reg.has_shared_frames()) {
    absl::StatusOr<std::shared_ptr<UniqueFd>> fd = TakeReceivedFd(session, reg.shared_frames().fd_nonce());
    if (!fd.ok()) {
      fail(fd.status());
      return;
    }
    frames_fd = *std::move(fd);
  }
  std::string resume_path;  // the checkpoint to resume from
  if (!reg.resume_token().empty()) {
    const std::string owner = CheckpointOwner(session.identity);
    if (options_.state_dir.empty()) {
      fail(absl::FailedPreconditionError("cannot resume: this tandemd keeps no checkpoints (state_dir is not set)"));
      return;
    }
    if (owner.empty() || reg.name().empty()) {
      fail(absl::InvalidArgumentError(
          "cannot resume: only a named job of a local client (ipc) or of a CURVE user (tcp) has checkpoints"));
      return;
    }
    resume_path = CheckpointPath(options_.state_dir, owner, reg.name());
    for (const auto& [id, other] : jobs_) {
      if (other->checkpoint_path == resume_path && other->state != JobState::kClosing) {
        fail(
            absl::AlreadyExistsError("cannot resume: the job is running (close it first, or wait until its "
                                     "client's session has ended)"));
        return;
      }
    }
  }
  const uint64_t session_id = session.id;
  session.registering++;
  const CompileOptions compile = CompileOptionsFor();
  const uint64_t max_bytes = options_.max_message_bytes;
  // Programs are made on the preparation thread too where the device is
  // known now: a large graph's (13.5 ms for DenseNet-121 on an H100) held
  // every other job's iterations up on the loop.
  device::Device* program_device = KnownDevice(reg.hints());
  prep_->Post([this, to, job_id, session_id, name = std::move(name), request = std::move(request),
               frames = std::move(frames), frames_fd = std::move(frames_fd), compile, max_bytes,
               resume_path = std::move(resume_path), targets = codegen_targets_, program_device]() mutable {
    uint64_t resumed_iterations = 0;
    absl::Status resume_status;
    if (!resume_path.empty()) {
      // The checkpoint's tensors in place of those the client sent (which
      // are checked against it); it may be as large as a request or as the
      // tensors the request declares (sent through shared memory), plus
      // its header.
      constexpr uint64_t kHeaderSlack = uint64_t{64} << 20;
      const uint64_t limit =
          CheckpointReadLimit(request->register_job().persistent(), max_bytes + kHeaderSlack, kHeaderSlack);
      absl::StatusOr<Resumed> resumed = LoadResume(*request, resume_path, limit);
      if (resumed.ok()) {
        request = std::move(resumed->request);
        frames = std::move(resumed->frames);
        frames_fd = nullptr;
        resumed_iterations = resumed->iterations;
      } else {
        resume_status = resumed.status();
      }
    }
    absl::StatusOr<PreparedJob> prepared =
        resume_status.ok() ? PrepareJob(request->register_job(), std::move(frames), std::move(frames_fd), compile,
                                        max_bytes, session_id, targets, program_device)
                           : absl::StatusOr<PreparedJob>(resume_status);
    if (prepared.ok()) prepared->resumed_iterations = resumed_iterations;
    // shared_ptr: the loop's work items are copyable std::functions.
    auto result = std::make_shared<absl::StatusOr<PreparedJob>>(std::move(prepared));
    loop_.Post("Service.OnJobPrepared",
               [this, to, job_id, session_id, name = std::move(name), request = std::move(request), result]() mutable {
                 FinishRegistration(to, job_id, session_id, std::move(name), std::move(request), std::move(*result));
               });
  });
}

namespace {

// Whether the environment leaves a compiler pass on: unless `name` is "0".
// Switches to measure a pass with (TANDEM_FOLD_RESIDUAL, TANDEM_ELIDE_COPIES,
// TANDEM_FOLD_TRANSPOSES; TANDEM_PW_BATCH is batched launches').
bool PassOn(const char* name) {
  const char* env = std::getenv(name);
  return env == nullptr || std::string(env) != "0";
}

}  // namespace

CompileOptions Service::CompileOptionsFor() const {
  // auto: only where the layout's own permutes stay small next to the
  // convolutions' traffic (compiler/channels_last.h; docs/codegen.md).
  constexpr double kAutoMaxRelayoutShare = 0.1;
  return {.elide_copies = PassOn("TANDEM_ELIDE_COPIES"),
          .fold_transposes = PassOn("TANDEM_FOLD_TRANSPOSES"),
          .channels_last = options_.channels_last == "true" || (options_.channels_last == "auto" && has_cuda_),
          .channels_last_max_relayout_share = options_.channels_last == "auto" ? kAutoMaxRelayoutShare : 0.0,
          .fold_activations = options_.fuse_elementwise,
          .fold_residuals = PassOn("TANDEM_FOLD_RESIDUAL"),
          .fuse_elementwise = options_.fuse_elementwise};
}

absl::StatusOr<Service::PreparedJob> Service::PrepareJob(
    const v1::RegisterJobRequest& reg, std::shared_ptr<const RequestFrames> frames, std::shared_ptr<UniqueFd> frames_fd,
    const CompileOptions& compile, uint64_t max_message_bytes, uint64_t session_id,
    const std::vector<codegen::CompileTarget>& codegen_targets, device::Device* program_device) {
  const auto start = Clock::now();
  TestPrepareDelay();
  PreparedJob out;
  // Validation, the graph passes and the memory plan (compiler/compile_job.h).
  ASSIGN_OR_RETURN(CompiledJob compiled, CompileJob(reg, compile));
  if (compile.channels_last) {
    int channels_last = 0, relayouts = 0;
    for (const Node& n : compiled.graph.nodes) {
      channels_last += n.attrs.GetBool("channels_last", false).value_or(false);
      relayouts += n.op == "permute" && (n.label == "to channels-last" || n.label == "to channels-first");
    }
    if (channels_last > 0) {
      TLOG_INFO("channels-last layout")
          .With("session", session_id)
          .With("nodes", channels_last)
          .With("permutes", relayouts)
          .With("relayout_share", compiled.channels_last_relayout_share);
    } else if (std::any_of(compiled.graph.nodes.begin(), compiled.graph.nodes.end(),
                           [](const Node& n) { return n.op == "convolution"; })) {
      TLOG_INFO("channels-last layout not used: no 2-D float32 or 16-bit convolution, or too many relayouts")
          .With("session", session_id)
          .With("relayout_share", compiled.channels_last_relayout_share)
          .With("max_relayout_share", compile.channels_last_max_relayout_share);
    }
  }
  int relu = 0, residual = 0, masked = 0;  // what fold_activations folded
  for (const Node& n : compiled.graph.nodes) {
    relu += n.attrs.GetBool("relu", false).value_or(false);
    residual += n.attrs.GetBool("residual", false).value_or(false);
    masked += n.attrs.Has("mask_threshold");
  }
  if (relu + residual + masked > 0) {
    TLOG_INFO("batch norms folded")
        .With("session", session_id)
        .With("relu", relu)
        .With("residual", residual)
        .With("masked_backward", masked);
  }
  out.graph = std::make_unique<Graph>(std::move(compiled.graph));
  out.layout = std::move(compiled.layout);
  ASSIGN_OR_RETURN(out.variants, CompileVariants(reg, *out.graph, compile));
  // The job's generated kernels, compiled now so that its first iteration
  // finds them (a node whose kernel fails runs the interpreter instead).
  if (!codegen_targets.empty()) {
    std::vector<const Graph*> graphs = {out.graph.get()};
    for (const GraphVariant& v : out.variants) graphs.push_back(v.graph.get());
    for (const Graph* g : graphs) {
      const codegen::JobKernelsReport report =
          codegen::PrepareJobKernels(*g, codegen_targets, codegen::DefaultKernelCache());
      if (report.nodes == 0) continue;
      LogLine(report.failed > 0 ? LogLevel::kWarning : LogLevel::kInfo, "generated kernels ready")
          .With("session", session_id)
          .With("nodes", report.nodes)
          .With("kernels", report.kernels)
          .With("compiled", report.compiled)
          .With("failed", report.failed)
          .With("ms", report.seconds * 1e3)
          .With("error", report.first_error);
    }
  }
  // Mapped only for a graph that builds: a bad graph leaves the object untouched.
  if (reg.has_shared_frames()) {
    if (frames != nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("the registration names shared frames and ", frames->size(),
                                                     " ZeroMQ frame(s) followed it; send one"));
    }
    // The object holds the persistent tensors' initial values, which may
    // well exceed the message limit (a 61M-parameter model with momentum is
    // 490 MB): bounded by what the graph declares (each frame must match
    // its tensor's size, CheckPersistentFrames) plus their alignment.
    uint64_t persistent_bytes = 0;
    for (int id : out.graph->persistents) {
      const uint64_t bytes = out.graph->values[id].type.bytes() + 64;
      persistent_bytes = bytes > UINT64_MAX - persistent_bytes ? UINT64_MAX : persistent_bytes + bytes;
    }
    ASSIGN_OR_RETURN(frames,
                     SharedFrames::Map(reg.shared_frames(), *frames_fd, std::max(max_message_bytes, persistent_bytes)));
    TLOG_INFO("registration reads its initial values from shared memory")
        .With("session", session_id)
        .With("frames", frames->size())
        .With("bytes", reg.shared_frames().bytes());
  }
  RETURN_IF_ERROR(CheckPersistentFrames(reg, *out.graph, frames.get()));
  // Alike jobs (same graph and shapes) share their interference estimates.
  out.interference_key = InterferenceKey(reg.graph());
  out.frames = std::move(frames);
  if (program_device != nullptr) {
    ASSIGN_OR_RETURN(out.program, CreatePrograms(*out.graph, out.variants, *program_device));
    out.program_device = program_device;
  }
  out.seconds = std::chrono::duration<double>(Clock::now() - start).count();
  return out;
}

absl::StatusOr<std::vector<GraphVariant>> Service::CompileVariants(const v1::RegisterJobRequest& reg, const Graph& main,
                                                                   const CompileOptions& compile) {
  constexpr int kMaxVariants = 16;
  if (reg.variants_size() > kMaxVariants) {
    return absl::InvalidArgumentError(
        absl::StrCat(reg.variants_size(), " graph variants; a job may have at most ", kMaxVariants));
  }
  std::vector<GraphVariant> variants;
  for (const v1::GraphVariant& wire : reg.variants()) {
    const std::string where = absl::StrCat("graph variant '", wire.name(), "'");
    if (wire.name().empty()) return absl::InvalidArgumentError("a graph variant needs a name");
    for (const GraphVariant& v : variants) {
      if (v.name == wire.name()) return absl::InvalidArgumentError(absl::StrCat(where, " is named twice"));
    }
    absl::StatusOr<CompiledJob> compiled = CompileGraph(wire.graph(), reg.persistent(), compile);
    if (!compiled.ok()) {
      return absl::Status(compiled.status().code(), absl::StrCat(where, ": ", compiled.status().message()));
    }
    // The address table gives graph k's i-th persistent tensor the job's
    // i-th: every graph must list them alike (BuildGraph declares them in
    // the registration's order).
    const Graph& g = compiled->graph;
    bool same = g.persistents.size() == main.persistents.size();
    for (size_t i = 0; same && i < g.persistents.size(); ++i) {
      const Value& a = g.values[g.persistents[i]];
      const Value& b = main.values[main.persistents[i]];
      same = a.name == b.name && a.type == b.type;
    }
    if (!same) return absl::InternalError(absl::StrCat(where, ": its persistent tensors differ from the job's"));
    variants.push_back(
        {wire.name(), std::make_unique<Graph>(std::move(compiled->graph)), std::move(compiled->layout), nullptr});
  }
  return variants;
}

void Service::FinishRegistration(const PendingReply& to, uint64_t job_id, uint64_t session_id, std::string name,
                                 std::shared_ptr<const v1::Request> request, absl::StatusOr<PreparedJob> prepared) {
  auto fail = [&](const absl::Status& s) {
    ReplyError(to, absl::Status(s.code(), absl::StrCat("job '", name, "': ", s.message())));
  };
  Session* session = sessions_.Find(session_id);
  if (session != nullptr) session->registering--;
  if (shutting_down_) {
    fail(absl::UnavailableError("tandemd is shutting down"));
    return;
  }
  if (session == nullptr) {
    // The client closed its session, or went away, while the job was
    // being prepared: nothing of it was admitted.
    fail(absl::CancelledError("the session ended while the job was being registered"));
    return;
  }
  if (absl::Status s = CheckAdmitting(); !s.ok()) {  // a drain began meanwhile
    fail(s);
    return;
  }
  if (!prepared.ok()) {
    fail(prepared.status());
    return;
  }
  const v1::RegisterJobRequest& reg = request->register_job();
  auto job = std::make_unique<Job>();
  job->name = name;  // a copy: `fail` still names the job
  job->hints = reg.hints();
  job->session = session_id;
  job->owner = session->identity;
  job->admin_owner = session->admin;
  job->graph = std::move(prepared->graph);
  job->layout = std::move(prepared->layout);
  job->variants = std::move(prepared->variants);
  job->interference_key = std::move(prepared->interference_key);
  std::shared_ptr<const RequestFrames> frames = std::move(prepared->frames);
  // Checkpoints: a named job that trains, of an owner with a principal.
  if (const std::string owner = CheckpointOwner(job->owner);
      !options_.state_dir.empty() && !owner.empty() && !reg.name().empty() && !job->graph->updates.empty()) {
    const std::string path = CheckpointPath(options_.state_dir, owner, reg.name());
    auto same_file = [&](const Job& other) { return other.checkpoint_path == path; };
    bool taken = std::any_of(waiting_for_memory_.begin(), waiting_for_memory_.end(),
                             [&](const std::unique_ptr<Job>& other) { return same_file(*other); });
    for (const auto& [id, other] : jobs_) taken = taken || (other->state != JobState::kClosing && same_file(*other));
    if (taken && !reg.resume_token().empty()) {
      fail(
          absl::AlreadyExistsError("cannot resume: the job is running (close it first, or wait until its "
                                   "client's session has ended)"));
      return;
    }
    // Checkpoints are kept per owner and name: a second running job of a
    // name is not checkpointed (its response has no resume token).
    if (!taken) {
      job->checkpoint_path = path;
      job->checkpoint_owner = owner;
    }
  }
  if (!job->checkpoint_path.empty()) {
    job->resume_token = reg.resume_token().empty() ? NewResumeToken() : reg.resume_token();
    job->resumed_iterations = prepared->resumed_iterations;
    job->snapshot_iterations = job->resumed_iterations;
    // A suspect of the fault that restarted tandemd, coming back.
    if (!reg.resume_token().empty() && fault_suspects_.erase(job->checkpoint_path) > 0) job->suspect = true;
    job->next_checkpoint = NextCheckpointTime();
  }

  absl::Status error;
  DeviceRuntime* dev = ChooseDevice(reg.hints(), &error);
  if (dev == nullptr) {
    fail(error);
    return;
  }
  job->device = dev;
  if (prepared->program_device == dev->device.get()) {
    job->program = std::move(prepared->program);
  } else {  // made for no device, or another: made here
    absl::StatusOr<std::unique_ptr<Program>> program;
    {
      LoopSection timed(loop_, "RegisterJob/program");
      program = CreatePrograms(*job->graph, job->variants, *dev->device);
    }
    if (!program.ok()) {
      fail(program.status());
      return;
    }
    job->program = *std::move(program);
  }
  job->id = job_id;
  TLOG_DEBUG("job prepared off the loop")
      .With("job", job->id)
      .With("name", job->name)
      .With("prepare_ms", prepared->seconds * 1e3);
  job->registration = PendingRegistration{to, std::move(request), std::move(frames)};

  LoopSection timed(loop_, "RegisterJob/admit");
  absl::Status admitted = Admit(*job);
  if (absl::IsFailedPrecondition(admitted) && reg.hints().queue_if_full()) {
    TLOG_INFO("job waits for memory").With("job", job->id).With("name", job->name).With("why", admitted.message());
    waiting_for_memory_.Push(std::move(job));
    return;
  }
  if (!admitted.ok()) {
    // Not fitting now is a refusal too unless the job asked to wait.
    fail(absl::ResourceExhaustedError(absl::StrCat(
        admitted.message(), absl::IsFailedPrecondition(admitted) ? " (set hints.queue_if_full to wait for it)" : "")));
    return;
  }
  StartJob(std::move(job));
}

void Service::StartJob(std::unique_ptr<Job> job) {
  Session* found = sessions_.Find(job->session);
  if (found == nullptr) {  // the client left while its job waited
    job->device->scheduler->RemoveJob(job->id);
    job->device->memory->Release(job->id);
    return;
  }
  Session& session = *found;
  DeviceRuntime* dev = job->device;
  PendingReply to = job->registration.reply;
  std::shared_ptr<const v1::Request> request = std::move(job->registration.request);
  std::shared_ptr<const RequestFrames> frames = std::move(job->registration.frames);

  // Upload the initial values on the job's lane stream, then answer.
  MoveJob(*job, JobState::kUploading);
  job->device_work++;
  Job* raw = job.get();
  session.jobs.insert(job->id);
  jobs_[job->id] = std::move(job);
  TLOG_INFO("job registered")
      .With("job", raw->id)
      .With("name", raw->name)
      .With("session", session.id)
      .With("device", dev->device->info().name)
      .With("lane", raw->lane)
      .With("nodes", raw->graph->nodes.size())
      .With("persistent_bytes", raw->persistent_bytes)
      .With("ephemeral_peak_bytes", raw->layout.arena_bytes);

  device::Stream* stream = dev->lanes[raw->lane].stream.get();
  device::Device* device = dev->device.get();
  std::vector<void*> targets = raw->persistent;
  uint64_t job_id = raw->id;
  dev->lanes[raw->lane].executor->Post([this, request, frames, stream, device, targets, job_id, to]() {
    const auto& tensors = request->register_job().persistent();
    absl::Status status;
    for (int i = 0; i < tensors.size() && status.ok(); ++i) {
      // The frames' sizes were checked against the tensor's at registration.
      const FrameRange range = FramesOf(tensors[i]);
      if (range.count == 0) {
        status = device->CopyToDevice(*stream, targets[i], tensors[i].data().data(), tensors[i].data().size());
        continue;
      }
      uint64_t offset = 0;
      for (size_t f = range.first; f < range.first + range.count && status.ok(); ++f) {
        const absl::string_view bytes = frames->frame(f);
        status = device->CopyToDevice(*stream, static_cast<char*>(targets[i]) + offset, bytes.data(), bytes.size());
        offset += bytes.size();
      }
    }
    auto done = [this, request, frames, job_id, to](absl::Status s) {
      loop_.Post("Service.OnUploadDone", [this, job_id, to, s]() {
        auto it = jobs_.find(job_id);
        if (it == jobs_.end()) return;
        Job& job = *it->second;
        if (job.state == JobState::kUploading) {
          if (s.ok()) {
            MoveJob(job, JobState::kRunning);
            v1::Response response;
            v1::RegisterJobResponse* r = response.mutable_register_job();
            r->set_job_id(job.id);
            r->set_device(job.device->device->info().name);
            r->set_persistent_bytes(job.persistent_bytes);
            r->set_ephemeral_peak_bytes(job.ArenaBytes());
            r->set_lane(job.lane);
            if (!job.checkpoint_path.empty()) {
              r->set_resume_token(job.resume_token);
              r->set_resumed_iterations(job.resumed_iterations);
            }
            for (int v : job.graph->fetchable) {
              v1::TensorSpec* spec = r->add_fetchable();
              spec->set_name(job.graph->values[v].name);
              TensorTypeToProto(job.graph->values[v].type, spec);
            }
            Reply(to, std::move(response));
            DispatcherOf(*job.device).StartReads(job);
            DispatcherOf(*job.device).DispatchAll();
          } else {
            ReplyError(to, absl::InternalError(absl::StrCat("uploading the initial values failed: ", s.message())));
            BeginCloseJob(job, "upload failed");
          }
        } else {
          ReplyError(to, absl::CancelledError("the job was closed during registration"));
        }
        OnDeviceWorkDone(job_id);
      });
    };
    if (!status.ok()) {
      done(status);
      return;
    }
    absl::Status s = device->OnComplete(*stream, done);
    if (!s.ok()) done(s);
  });
}

void Service::OnCloseJob(const PendingReply& to, Session& session, uint64_t job_id) {
  if (!session.jobs.contains(job_id)) {
    ReplyError(to, absl::NotFoundError(absl::StrCat("no job ", job_id, " in this session")));
    return;
  }
  Job& job = *jobs_.at(job_id);
  job.close_replies.push_back(to);
  job.discard_checkpoint = true;  // done with it: nothing to resume
  BeginCloseJob(job, "closed by client");
}

void Service::BeginCloseJob(Job& job, const char* reason) {
  if (job.state != JobState::kClosing) {
    MoveJob(job, JobState::kClosing);
    job.device->lane_levels_stale = true;
    TLOG_INFO("job closing").With("job", job.id).With("name", job.name).With("reason", reason);
    DeviceRuntime& dev = *job.device;
    std::vector<sched::Ticket> dropped = dev.scheduler->RemoveJob(job.id);
    for (sched::Ticket t : dropped) {
      auto it = job.queued.find(t);
      if (it == job.queued.end()) continue;
      ReplyError(it->second.reply, absl::CancelledError(absl::StrCat("job ", job.id, " closed: ", reason)));
      job.queued.erase(it);
    }
    for (const PendingRead& r : job.reads) {
      ReplyError(r.reply, absl::CancelledError(absl::StrCat("job ", job.id, " closed: ", reason)));
    }
    job.reads.clear();
    // An iteration paused for a higher priority would hold the job forever.
    DispatcherOf(dev).StopSegmentedIteration(job, reason);
  }
  MaybeFinishClose(job);
}

void Service::MaybeFinishClose(Job& job) {
  if (job.state != JobState::kClosing || job.device_work > 0 || job.warm_steps > 0) return;
  uint64_t id = job.id;
  DeviceRuntime& dev = *job.device;
  DeviceDispatcher& dispatcher = DispatcherOf(dev);
  ReleaseCheckpointState(job);
  dev.memory->Release(id);
  dispatcher.JournalArenaMoves(id);
  dispatcher.ReleaseIdleRetired();
  dev.lane_levels_stale = true;
  if (Session* session = sessions_.Find(job.session)) session->jobs.erase(id);
  std::vector<PendingReply> replies = std::move(job.close_replies);
  TLOG_INFO("job closed").With("job", id).With("iterations", job.done);
  jobs_.erase(id);
  for (const PendingReply& to : replies) {
    v1::Response response;
    response.mutable_close_job();
    Reply(to, std::move(response));
  }
  // Memory freed and a job gone: waiting jobs may fit, lanes may take
  // other work.
  AdmitWaitingJobs();
  dispatcher.DispatchAll();
}

void Service::MoveJob(Job& job, JobState next) {
  // The service moves a job only along the diagram (server/job_state.h); a
  // refusal is a bug of the service's, logged, and the job stays as it was.
  if (absl::Status s = job.state.MoveTo(next); !s.ok()) {
    TLOG_ERROR("job state change refused").With("job", job.id).With("name", job.name).With("error", s.message());
  }
}

void Service::OnDeviceWorkDone(uint64_t job_id) {
  auto it = jobs_.find(job_id);
  if (it == jobs_.end()) return;
  Job& job = *it->second;
  job.device_work--;
  MaybeFinishClose(job);
}

}  // namespace tandem::server
