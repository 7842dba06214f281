#include "memory/byte_format.h"

#include "absl/strings/str_format.h"

namespace tandem::memory {

std::string FormatBytes(uint64_t bytes) {
  static constexpr const char* kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return absl::StrFormat("%d B", bytes);
  double value = static_cast<double>(bytes) / 1024.0;
  int unit = 0;
  // Switch units at 1023.95 so that rounding never prints "1024.0 KiB".
  while (value >= 1023.95 && unit + 1 < static_cast<int>(std::size(kUnits))) {
    value /= 1024.0;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

}  // namespace tandem::memory
