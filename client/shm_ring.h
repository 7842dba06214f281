// A ring allocator over a client's shared-memory region: feeds of
// iterations in flight take slices in submission order and give them back
// when their iteration's reply has arrived (replies may be collected out of
// order; space is reclaimed from the oldest end).
//
// Not thread-safe; the client guards it with its mutex.
#ifndef TANDEM_CLIENT_SHM_RING_H_
#define TANDEM_CLIENT_SHM_RING_H_

#include <cstdint>
#include <deque>
#include <optional>

namespace tandem::client {

class ShmRing {
 public:
  explicit ShmRing(uint64_t capacity) : capacity_(capacity) {}

  // Offset of `bytes` contiguous bytes owned by `owner`, or nullopt when the
  // ring has no such space now (the caller then sends the bytes inline).
  std::optional<uint64_t> Allocate(uint64_t owner, uint64_t bytes);
  // Gives back every slice of `owner`.
  void Release(uint64_t owner);
  uint64_t capacity() const { return capacity_; }
  uint64_t in_use() const;

 private:
  struct Slice {
    uint64_t owner;
    uint64_t begin;
    uint64_t end;
    bool released;
  };
  const uint64_t capacity_;
  std::deque<Slice> slices_;  // in allocation order
};

}  // namespace tandem::client

#endif  // TANDEM_CLIENT_SHM_RING_H_
