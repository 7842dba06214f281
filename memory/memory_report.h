// Human-readable summaries of a device's memory, for refusals, logs and the
// admin interface.
//
//   DescribeUsage(stats) ==
//     "capacity 16.0 GiB, reserve 1.0 GiB, usable 15.0 GiB = 9.0 GiB persistent
//      + 4.0 GiB in 2 lanes + 0 B retired + 2.0 GiB free (largest free range
//      2.0 GiB); lane 0: 3.0 GiB arena, jobs 1, 2; lane 1: ...; job 1 'mlp':
//      1.0 GiB persistent (12 tensors) + 3.0 GiB ephemeral in lane 0; ..."
//
// Pure functions; thread-safe.
#ifndef TANDEM_MEMORY_MEMORY_REPORT_H_
#define TANDEM_MEMORY_MEMORY_REPORT_H_

#include <cstddef>
#include <string>

#include "memory/device_memory.h"

namespace tandem::memory {

// Lists at most `max_jobs` jobs (the largest first), then how many more.
std::string DescribeUsage(const DeviceMemoryStats& stats, size_t max_jobs = 16);

}  // namespace tandem::memory

#endif  // TANDEM_MEMORY_MEMORY_REPORT_H_
