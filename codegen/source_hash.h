// A stable 128-bit hash of a text as 32 hex digits (two 64-bit FNV-1a
// hashes with different offset bases), for naming generated kernels and
// their cache files. Stable across processes, builds and machines. Not a
// cryptographic hash: the kernel cache keeps each kernel's source beside
// its binary and compares it on load, so a collision costs a compile, never
// a wrong kernel.
#ifndef TANDEM_CODEGEN_SOURCE_HASH_H_
#define TANDEM_CODEGEN_SOURCE_HASH_H_

#include <cstdint>
#include <string>

#include "absl/strings/str_format.h"
#include "absl/strings/string_view.h"

namespace tandem::codegen {

inline std::string SourceHash(absl::string_view text) {
  constexpr uint64_t kPrime = 0x100000001b3ull;
  uint64_t h1 = 0xcbf29ce484222325ull;
  uint64_t h2 = 0x84222325cbf29ce4ull;
  for (unsigned char c : text) {
    h1 = (h1 ^ c) * kPrime;
    h2 = (h2 ^ static_cast<unsigned char>(c + 0x5b)) * kPrime;
  }
  return absl::StrFormat("%016x%016x", h1, h2);
}

}  // namespace tandem::codegen

#endif  // TANDEM_CODEGEN_SOURCE_HASH_H_
