// Unguessable tokens: session tokens, checkpoint resume tokens.
#ifndef TANDEM_BASE_RANDOM_TOKEN_H_
#define TANDEM_BASE_RANDOM_TOKEN_H_

#include <cstddef>
#include <string>

namespace tandem {

// `bytes` bytes from the kernel's random source (getrandom, which blocks
// only until the pool is first initialized at boot).
std::string RandomToken(size_t bytes = 16);

}  // namespace tandem

#endif  // TANDEM_BASE_RANDOM_TOKEN_H_
