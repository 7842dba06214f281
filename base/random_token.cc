#include "base/random_token.h"

#include <sys/random.h>

namespace tandem {

std::string RandomToken(size_t bytes) {
  std::string token(bytes, '\0');
  size_t filled = 0;
  while (filled < token.size()) {
    const ssize_t got = ::getrandom(token.data() + filled, token.size() - filled, 0);
    if (got > 0) filled += static_cast<size_t>(got);
  }
  return token;
}

}  // namespace tandem
