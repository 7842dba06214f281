// Byte counts as people read them, for reports and error messages.
//
// FormatBytes(9771050598) == "9.1 GiB"; exact below 1 KiB ("512 B"), one
// decimal above ("1.5 KiB", "12.0 MiB"). Binary units (KiB = 1024 B) because
// device capacities are powers of two. Pure functions; thread-safe.
#ifndef TANDEM_MEMORY_BYTE_FORMAT_H_
#define TANDEM_MEMORY_BYTE_FORMAT_H_

#include <cstdint>
#include <string>

namespace tandem::memory {

std::string FormatBytes(uint64_t bytes);

// `bytes` rounded up to a multiple of `alignment` (a power of two).
inline uint64_t AlignUp(uint64_t bytes, uint64_t alignment) { return (bytes + alignment - 1) & ~(alignment - 1); }

}  // namespace tandem::memory

#endif  // TANDEM_MEMORY_BYTE_FORMAT_H_
