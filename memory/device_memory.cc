// Admission, release, lanes and stats of DeviceMemory. Compaction is in
// device_memory_compaction.cc.
#include <algorithm>
#include <limits>
#include <numeric>
#include <utility>

#include "absl/strings/str_cat.h"
#include "base/status_macros.h"
#include "memory/byte_format.h"
#include "memory/device_memory_impl.h"
#include "memory/memory_report.h"

namespace tandem::memory {
namespace {

// a + b, saturating: requests with absurd sizes must not wrap around.
uint64_t SaturatingAdd(uint64_t a, uint64_t b) {
  return a > std::numeric_limits<uint64_t>::max() - b ? std::numeric_limits<uint64_t>::max() : a + b;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DeviceMemory>> DeviceMemory::Create(device::Device& device,
                                                                   const DeviceMemoryOptions& options) {
  const device::DeviceInfo& info = device.info();
  if (options.max_lanes < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory of ", info.name, ": max_lanes must be at least 1, not ", options.max_lanes));
  }
  if (options.reserve_bytes >= info.capacity_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "memory of ", info.name, ": the reserve (", FormatBytes(options.reserve_bytes),
        ") leaves nothing of the device's capacity (", FormatBytes(info.capacity_bytes), "); lower the reserve"));
  }
  const uint64_t usable = (info.capacity_bytes - options.reserve_bytes) & ~uint64_t{device::kDeviceAlignment - 1};
  if (usable == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("memory of ", info.name, ": capacity ", FormatBytes(info.capacity_bytes), " minus reserve ",
                     FormatBytes(options.reserve_bytes), " leaves less than ", device::kDeviceAlignment, " bytes"));
  }
  absl::StatusOr<void*> region = device.Allocate(usable);
  if (!region.ok()) {
    return absl::Status(
        region.status().code(),
        absl::StrCat("memory of ", info.name, ": cannot take the usable ", FormatBytes(usable), " (capacity ",
                     FormatBytes(info.capacity_bytes), " - reserve ", FormatBytes(options.reserve_bytes),
                     ") from the device; raise the reserve: ", region.status().message()));
  }
  return std::unique_ptr<DeviceMemory>(new DeviceMemoryImpl(device, options, *region, usable));
}

DeviceMemoryImpl::DeviceMemoryImpl(device::Device& device, const DeviceMemoryOptions& options, void* region,
                                   uint64_t usable)
    : device_(device), options_(options), region_(region), usable_(usable), space_(usable, device::kDeviceAlignment) {}

DeviceMemoryImpl::~DeviceMemoryImpl() { device_.Free(region_); }

uint64_t DeviceMemoryImpl::OpenLanes() const {
  return std::count_if(lanes_.begin(), lanes_.end(), [](const Lane& lane) { return lane.open; });
}

uint64_t DeviceMemoryImpl::LaneNeed(const Lane& lane) const {
  uint64_t need = space_.alignment();
  for (JobId id : lane.jobs) need = std::max(need, jobs_.at(id).ephemeral);
  return need;
}

uint64_t DeviceMemoryImpl::RetiredBytes() const {
  uint64_t bytes = 0;
  for (const Lane& lane : lanes_) {
    for (const Range& range : lane.retired) bytes += range.bytes;
  }
  return bytes;
}

uint64_t DeviceMemoryImpl::LaneBytes() const {
  uint64_t bytes = 0;
  for (const Lane& lane : lanes_) {
    if (lane.open) bytes += lane.arena.bytes;
  }
  return bytes;
}

std::vector<DeviceMemoryImpl::LaneCandidate> DeviceMemoryImpl::LaneCandidates(const JobMemoryRequest& request,
                                                                              uint64_t ephemeral) const {
  auto existing = [&](int index) {
    const Lane& lane = lanes_[index];
    return LaneCandidate{index, false, ephemeral > lane.arena.bytes ? ephemeral - lane.arena.bytes : 0};
  };
  std::vector<LaneCandidate> candidates;
  if (request.lane >= 0) {
    if (request.lane < NumLanes() && lanes_[request.lane].open) {
      candidates.push_back(existing(request.lane));
    } else {
      candidates.push_back(LaneCandidate{request.lane, true, ephemeral});
    }
    return candidates;
  }
  std::vector<LaneCandidate> free_join;
  std::vector<LaneCandidate> growing;
  for (int i = 0; i < NumLanes(); ++i) {
    if (!lanes_[i].open) continue;
    LaneCandidate candidate = existing(i);
    (candidate.growth == 0 ? free_join : growing).push_back(candidate);
  }
  // (1) Joining without growth: the least crowded lane, then the smallest
  // arena (keep large arenas for large jobs).
  std::stable_sort(free_join.begin(), free_join.end(), [&](const auto& a, const auto& b) {
    const Lane& la = lanes_[a.lane];
    const Lane& lb = lanes_[b.lane];
    if (la.jobs.size() != lb.jobs.size()) return la.jobs.size() < lb.jobs.size();
    return la.arena.bytes < lb.arena.bytes;
  });
  candidates = free_join;
  // (2) A new lane at the lowest closed index.
  if (OpenLanes() < static_cast<uint64_t>(options_.max_lanes)) {
    int index = 0;
    while (index < NumLanes() && lanes_[index].open) ++index;
    candidates.push_back(LaneCandidate{index, true, ephemeral});
  }
  // (3) The lane that grows least.
  std::stable_sort(growing.begin(), growing.end(), [](const auto& a, const auto& b) { return a.growth < b.growth; });
  candidates.insert(candidates.end(), growing.begin(), growing.end());
  return candidates;
}

uint64_t DeviceMemoryImpl::SlackLimit() const { return std::min(options_.lane_slack_bytes, usable_ / 16); }

uint64_t DeviceMemoryImpl::SlackBytes() const {
  uint64_t bytes = 0;
  for (const Lane& lane : lanes_) {
    if (!lane.open) continue;
    const uint64_t need = LaneNeed(lane);
    if (lane.arena.bytes > need) bytes += lane.arena.bytes - need;
  }
  return bytes;
}

std::vector<uint64_t> DeviceMemoryImpl::ArenaSizes(const LaneCandidate& candidate, uint64_t ephemeral) const {
  std::vector<uint64_t> sizes;
  if (SlackLimit() > 0) {
    uint64_t largest = ephemeral;
    for (const auto& [id, job] : jobs_) largest = std::max(largest, job.ephemeral);
    const uint64_t unit = space_.alignment();
    const uint64_t share = SlackLimit() / std::max(options_.max_lanes, 1) / unit * unit;
    // The lanes' slack with this lane at `bytes` (its own slack now, if
    // any, is replaced: it grows because its arena is below `ephemeral`).
    uint64_t slack = SlackBytes();
    if (!candidate.opens) {
      const Lane& lane = lanes_[candidate.lane];
      const uint64_t need = LaneNeed(lane);
      if (lane.arena.bytes > need) slack -= lane.arena.bytes - need;
    }
    for (uint64_t bytes : {std::max(largest, share), largest}) {
      const bool known = std::find(sizes.begin(), sizes.end(), bytes) != sizes.end();
      if (bytes > ephemeral && !known && slack + (bytes - ephemeral) <= SlackLimit()) sizes.push_back(bytes);
    }
  }
  sizes.push_back(ephemeral);
  return sizes;
}

bool DeviceMemoryImpl::GrowInPlace(Lane& lane, uint64_t bytes) {
  // The running iteration's bytes stay inside the lane, so nothing needs
  // retiring (the base moves down when the range before is taken).
  const uint64_t delta = bytes - lane.arena.bytes;
  const uint64_t after = space_.FreeBytesStartingAt(lane.arena.end());
  const uint64_t before = space_.FreeBytesEndingAt(lane.arena.offset);
  if (after + before < delta) return false;
  const uint64_t take_after = std::min(after, delta);
  const uint64_t take_before = delta - take_after;
  if (take_after > 0) space_.AllocateAt(lane.arena.end(), take_after);
  if (take_before > 0) space_.AllocateAt(lane.arena.offset - take_before, take_before);
  lane.arena = Range{lane.arena.offset - take_before, bytes};
  return true;
}

bool DeviceMemoryImpl::PlaceLane(const LaneCandidate& candidate, uint64_t ephemeral) {
  const std::vector<uint64_t> sizes = ArenaSizes(candidate, ephemeral);
  if (candidate.opens) {
    for (uint64_t bytes : sizes) {
      std::optional<uint64_t> offset = space_.Allocate(bytes, RangeAllocator::End::kHigh);
      if (!offset) continue;
      if (candidate.lane == NumLanes()) lanes_.emplace_back();
      Lane& lane = lanes_[candidate.lane];
      lane.open = true;
      lane.arena = Range{*offset, bytes};
      return true;
    }
    return false;
  }
  Lane& lane = lanes_[candidate.lane];
  if (lane.arena.bytes >= ephemeral) return true;
  // In place when the neighbours are free, else a new range (the old one is
  // retired: an iteration running in the lane may still use it).
  for (uint64_t bytes : sizes) {
    if (GrowInPlace(lane, bytes)) return true;
  }
  for (uint64_t bytes : sizes) {
    std::optional<uint64_t> offset = space_.Allocate(bytes, RangeAllocator::End::kHigh);
    if (!offset) continue;
    lane.retired.push_back(lane.arena);
    lane.arena = Range{*offset, bytes};
    return true;
  }
  return false;
}

std::optional<std::vector<uint64_t>> DeviceMemoryImpl::PlacePersistent(const std::vector<uint64_t>& aligned) {
  std::vector<size_t> order(aligned.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return aligned[a] > aligned[b]; });
  std::vector<uint64_t> offsets(aligned.size());
  for (size_t k = 0; k < order.size(); ++k) {
    std::optional<uint64_t> offset = space_.Allocate(aligned[order[k]], RangeAllocator::End::kLow);
    if (!offset) {
      for (size_t j = 0; j < k; ++j) space_.Free(offsets[order[j]], aligned[order[j]]);
      return std::nullopt;
    }
    offsets[order[k]] = *offset;
  }
  return offsets;
}

absl::StatusOr<JobMemoryGrant> DeviceMemoryImpl::Admit(const JobMemoryRequest& request) {
  const std::string& device_name = device_.info().name;
  if (jobs_.contains(request.job)) {
    return absl::AlreadyExistsError(
        absl::StrCat("job ", request.job, " ('", request.name, "') is already admitted on ", device_name));
  }
  if (request.lane < -1 || request.lane > NumLanes() || request.lane >= options_.max_lanes) {
    return absl::InvalidArgumentError(
        absl::StrCat("job ", request.job, " ('", request.name, "') asks for lane ", request.lane, " on ", device_name,
                     ", which has ", NumLanes(), " lanes (at most ", options_.max_lanes,
                     "); use -1 to let the allocator choose, or ", NumLanes(), " to open a lane"));
  }
  std::vector<uint64_t> aligned;
  aligned.reserve(request.persistent_bytes.size());
  uint64_t persistent = 0;
  for (uint64_t bytes : request.persistent_bytes) {
    aligned.push_back(std::min(space_.Aligned(bytes), std::numeric_limits<uint64_t>::max() / 4));
    persistent = SaturatingAdd(persistent, aligned.back());
  }
  const uint64_t ephemeral =
      std::min(space_.Aligned(request.ephemeral_bytes), std::numeric_limits<uint64_t>::max() / 4);
  const uint64_t total = SaturatingAdd(persistent, ephemeral);

  uint64_t quota = request.quota_bytes;
  if (options_.max_job_bytes != 0 && !request.quota_replaces_limit && (quota == 0 || options_.max_job_bytes < quota)) {
    quota = options_.max_job_bytes;
  }
  if (quota != 0 && total > quota) {
    ++jobs_refused_;
    const bool own = quota == request.quota_bytes;
    return Refusal(absl::StatusCode::kResourceExhausted, request, persistent, ephemeral,
                   absl::StrCat("it needs ", FormatBytes(total), ", over ",
                                own ? "its own quota of " : "the per-job limit of ", FormatBytes(quota)),
                   absl::StrCat("use a smaller batch or less persistent state (", FormatBytes(total - quota),
                                " less), or ", own ? "raise the job's quota" : "raise the daemon's max_job_bytes"));
  }
  if (total > usable_) {
    ++jobs_refused_;
    std::string suggestion =
        absl::StrCat("use a smaller batch or less persistent state (", FormatBytes(total - usable_), " less)");
    const uint64_t capacity = device_.info().capacity_bytes;
    if (total <= (capacity & ~uint64_t{device::kDeviceAlignment - 1})) {
      absl::StrAppend(&suggestion, ", or lower the reserve (", FormatBytes(options_.reserve_bytes), ") by at least ",
                      FormatBytes(total - usable_));
    }
    return Refusal(absl::StatusCode::kResourceExhausted, request, persistent, ephemeral,
                   absl::StrCat("it can never fit: it needs ", FormatBytes(total), " and the device has ",
                                FormatBytes(usable_), " usable even with no other job"),
                   suggestion);
  }

  std::vector<LaneCandidate> candidates;
  std::optional<std::vector<uint64_t>> offsets;
  const LaneCandidate* chosen = nullptr;
  // Persistent tensors first, then a lane; on failure nothing stays placed.
  auto place = [&] {
    candidates = LaneCandidates(request, ephemeral);
    offsets = PlacePersistent(aligned);
    if (!offsets) return;
    for (const LaneCandidate& candidate : candidates) {
      if (PlaceLane(candidate, ephemeral)) {
        chosen = &candidate;
        return;
      }
    }
    for (size_t i = 0; i < aligned.size(); ++i) space_.Free((*offsets)[i], aligned[i]);
  };
  place();
  if (chosen == nullptr && SlackBytes() > 0) {
    // The lanes' slack is a convenience; a job that fits without it comes
    // first. Refused all the same, the lanes get their slack back.
    const std::vector<Range> arenas = TrimSlack();
    place();
    if (chosen == nullptr) {
      RestoreSlack(arenas);
    } else {
      slack_trims_ += arenas.size();
    }
  }
  if (chosen == nullptr) {
    ++jobs_refused_;
    uint64_t cheapest = ephemeral;
    for (const LaneCandidate& candidate : candidates) cheapest = std::min(cheapest, candidate.growth);
    const uint64_t needed = persistent + cheapest;
    const uint64_t free = space_.free_bytes();
    if (needed > free) {
      const uint64_t deficit = needed - free;
      std::string suggestion = absl::StrCat("wait until other jobs leave (queue the job: it fits once ",
                                            FormatBytes(deficit), " more are free)");
      if (cheapest > 0) {
        absl::StrAppend(&suggestion, ", or use a smaller batch (its lane arena costs ", FormatBytes(cheapest), ")");
      }
      if (options_.reserve_bytes >= deficit) {
        absl::StrAppend(&suggestion, ", or lower the reserve (", FormatBytes(options_.reserve_bytes), ") by ",
                        FormatBytes(deficit));
      }
      return Refusal(
          absl::StatusCode::kFailedPrecondition, request, persistent, ephemeral,
          absl::StrCat("it needs ", FormatBytes(needed), " free (", FormatBytes(persistent), " persistent + ",
                       FormatBytes(cheapest), " more lane arena) and ", FormatBytes(free), " are free now"),
          suggestion);
    }
    return Refusal(absl::StatusCode::kFailedPrecondition, request, persistent, ephemeral,
                   absl::StrCat("it needs ", FormatBytes(needed), " and ", FormatBytes(free),
                                " are free, but split into ranges of at most ", FormatBytes(space_.largest_free())),
                   "compact the device's memory when its lanes are idle (it undoes the fragmentation), "
                   "or wait until other jobs leave");
  }

  Job job;
  job.id = request.job;
  job.name = request.name;
  job.lane = chosen->lane;
  job.ephemeral = ephemeral;
  job.persistent = persistent;
  JobMemoryGrant grant;
  grant.lane = chosen->lane;
  for (size_t i = 0; i < aligned.size(); ++i) {
    job.tensors.push_back(Tensor{(*offsets)[i], request.persistent_bytes[i], aligned[i]});
    grant.persistent.push_back(Address((*offsets)[i]));
  }
  lanes_[chosen->lane].jobs.push_back(request.job);
  jobs_.emplace(request.job, std::move(job));
  persistent_bytes_ += persistent;
  persistent_peak_ = std::max(persistent_peak_, persistent_bytes_);
  persistent_allocated_ += aligned.size();
  ++jobs_admitted_;
  return grant;
}

void DeviceMemoryImpl::Release(JobId id) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return;
  Job& job = it->second;
  for (const Tensor& tensor : job.tensors) space_.Free(tensor.offset, tensor.aligned);
  persistent_bytes_ -= job.persistent;
  persistent_freed_ += job.tensors.size();
  LeaveLane(job);
  jobs_.erase(it);
  TrimLanes();
}

void DeviceMemoryImpl::LeaveLane(const Job& job) {
  Lane& lane = lanes_[job.lane];
  std::erase(lane.jobs, job.id);
  if (lane.jobs.empty()) {
    lane.retired.push_back(lane.arena);
    lane.arena = Range{};
    lane.open = false;
  } else {
    // Shrink in place (the base stays, the tail is retired) unless the
    // lanes' slack, this lane's new slack included, is within the limit.
    const uint64_t need = LaneNeed(lane);
    if (need < lane.arena.bytes && SlackBytes() > SlackLimit()) {
      lane.retired.push_back(Range{lane.arena.offset + need, lane.arena.bytes - need});
      lane.arena.bytes = need;
    }
  }
}

absl::Status DeviceMemoryImpl::MoveJob(JobId id, int to) {
  auto it = jobs_.find(id);
  if (it == jobs_.end()) {
    return absl::NotFoundError(absl::StrCat("job ", id, " is not admitted on ", device_.info().name));
  }
  Job& job = it->second;
  if (to == job.lane) return absl::OkStatus();
  if (to < 0 || to > NumLanes() || to >= options_.max_lanes) {
    return absl::InvalidArgumentError(absl::StrCat("lane ", to, " does not exist on ", device_.info().name, " (",
                                                   NumLanes(), " lanes, at most ", options_.max_lanes, ")"));
  }
  const bool opens = to == NumLanes() || !lanes_[to].open;
  if (opens && OpenLanes() >= static_cast<uint64_t>(options_.max_lanes)) {
    return absl::FailedPreconditionError(absl::StrCat("all ", options_.max_lanes, " lanes are open"));
  }
  LaneCandidate candidate{to, opens, opens ? job.ephemeral : 0};
  if (!opens && job.ephemeral > lanes_[to].arena.bytes) candidate.growth = job.ephemeral - lanes_[to].arena.bytes;
  if (!PlaceLane(candidate, job.ephemeral)) {  // may add a lane: take references after
    return absl::FailedPreconditionError(absl::StrCat("lane ", to, " cannot grow to ", FormatBytes(job.ephemeral), ": ",
                                                      FormatBytes(space_.largest_free()),
                                                      " is the largest free range"));
  }
  LeaveLane(job);
  job.lane = to;
  lanes_[to].jobs.push_back(id);
  TrimLanes();
  return absl::OkStatus();
}

std::vector<Range> DeviceMemoryImpl::TrimSlack() {
  std::vector<Range> trimmed(lanes_.size());
  for (size_t i = 0; i < lanes_.size(); ++i) {
    Lane& lane = lanes_[i];
    if (!lane.open) continue;
    const uint64_t need = LaneNeed(lane);
    if (lane.arena.bytes <= need) continue;
    trimmed[i] = lane.arena;
    space_.Free(lane.arena.offset + need, lane.arena.bytes - need);
    lane.arena.bytes = need;
  }
  std::erase_if(trimmed, [](const Range& r) { return r.bytes == 0; });
  return trimmed;
}

void DeviceMemoryImpl::RestoreSlack(const std::vector<Range>& arenas) {
  for (Lane& lane : lanes_) {
    if (!lane.open) continue;
    for (const Range& arena : arenas) {
      if (arena.offset != lane.arena.offset) continue;
      // The tail is free: the refused placement freed all it took.
      if (space_.AllocateAt(lane.arena.end(), arena.bytes - lane.arena.bytes)) lane.arena = arena;
    }
  }
}

void DeviceMemoryImpl::TrimLanes() {
  while (!lanes_.empty() && !lanes_.back().open && lanes_.back().retired.empty()) {
    lanes_.pop_back();
  }
}

void* DeviceMemoryImpl::LaneArena(int lane) const {
  if (lane < 0 || lane >= NumLanes() || !lanes_[lane].open) return nullptr;
  return Address(lanes_[lane].arena.offset);
}

void DeviceMemoryImpl::ReleaseRetired(int lane) {
  if (lane < 0 || lane >= NumLanes()) return;
  for (const Range& range : lanes_[lane].retired) space_.Free(range.offset, range.bytes);
  lanes_[lane].retired.clear();
  TrimLanes();
}

bool DeviceMemoryImpl::HasRetired(int lane) const {
  return lane >= 0 && lane < NumLanes() && !lanes_[lane].retired.empty();
}

DeviceMemoryStats DeviceMemoryImpl::Stats() const {
  DeviceMemoryStats stats;
  stats.capacity_bytes = device_.info().capacity_bytes;
  stats.reserve_bytes = options_.reserve_bytes;
  stats.usable_bytes = usable_;
  stats.persistent_bytes = persistent_bytes_;
  stats.persistent_peak_bytes = persistent_peak_;
  stats.lane_bytes = LaneBytes();
  stats.retired_bytes = RetiredBytes();
  stats.free_bytes = space_.free_bytes();
  stats.largest_free_bytes = space_.largest_free();
  stats.persistent_allocated = persistent_allocated_;
  stats.persistent_freed = persistent_freed_;
  stats.jobs_admitted = jobs_admitted_;
  stats.jobs_refused = jobs_refused_;
  stats.compactions = compactions_;
  stats.slack_trims = slack_trims_;
  stats.compaction_bytes_moved = compaction_bytes_moved_;
  for (int i = 0; i < NumLanes(); ++i) {
    const Lane& lane = lanes_[i];
    if (!lane.open) continue;
    LaneStats lane_stats;
    lane_stats.lane = i;
    lane_stats.arena_bytes = lane.arena.bytes;
    lane_stats.jobs = lane.jobs;
    for (const Range& range : lane.retired) lane_stats.retired_bytes += range.bytes;
    stats.lanes.push_back(std::move(lane_stats));
  }
  for (const auto& [id, job] : jobs_) {
    stats.jobs.push_back(JobMemoryStats{id, job.name, job.lane, job.persistent, job.tensors.size(), job.ephemeral});
  }
  return stats;
}

std::vector<void*> DeviceMemoryImpl::PersistentAddresses(JobId id) const {
  std::vector<void*> addresses;
  auto it = jobs_.find(id);
  if (it == jobs_.end()) return addresses;
  for (const Tensor& tensor : it->second.tensors) addresses.push_back(Address(tensor.offset));
  return addresses;
}

absl::Status DeviceMemoryImpl::Refusal(absl::StatusCode code, const JobMemoryRequest& request, uint64_t persistent,
                                       uint64_t ephemeral, const std::string& reason,
                                       const std::string& suggestion) const {
  const size_t tensors = request.persistent_bytes.size();
  return absl::Status(code, absl::StrCat("cannot admit job ", request.job, " ('", request.name, "') on ",
                                         device_.info().name, ": ", reason, ". It requests ", FormatBytes(persistent),
                                         " persistent (", tensors, tensors == 1 ? " tensor) + " : " tensors) + ",
                                         FormatBytes(ephemeral), " ephemeral (its planned peak). Device: ",
                                         DescribeUsage(Stats()), ". To make it fit: ", suggestion, "."));
}

}  // namespace tandem::memory
