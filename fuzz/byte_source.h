// A fuzzer's input read as a stream of choices: each Take* consumes bytes
// from the front and maps them onto the range asked for; an exhausted input
// yields zeros (the smallest choice), so every input, however short, is a
// valid sequence of choices. Deterministic: the same bytes give the same
// choices, which is what makes a crashing input a reproducer.
#ifndef TANDEM_FUZZ_BYTE_SOURCE_H_
#define TANDEM_FUZZ_BYTE_SOURCE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <string>

namespace tandem::fuzz {

class ByteSource {
 public:
  ByteSource(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return at_ >= size_; }

  uint64_t TakeU64() {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v = (v << 8) | TakeByte();
    return v;
  }
  uint8_t TakeByte() { return at_ < size_ ? data_[at_++] : 0; }
  bool TakeBool() { return (TakeByte() & 1) != 0; }
  // In [lo, hi]; one byte when the range fits in one.
  int64_t TakeInRange(int64_t lo, int64_t hi) {
    const uint64_t span = static_cast<uint64_t>(hi) - static_cast<uint64_t>(lo);
    uint64_t v = span < 256 ? TakeByte() : TakeU64();
    if (span != std::numeric_limits<uint64_t>::max()) v %= span + 1;
    return static_cast<int64_t>(static_cast<uint64_t>(lo) + v);
  }
  // An integer attribute's value: mostly small, sometimes an edge
  // (0, -1, the int32 and int64 extremes, powers of two), sometimes anything.
  int64_t TakeAttrInt() {
    switch (TakeByte() % 8) {
      case 0:
        return TakeInRange(-4, 8);
      case 1:
        return TakeInRange(0, 64);
      case 2: {
        static constexpr int64_t kEdges[] = {0,
                                             -1,
                                             1,
                                             std::numeric_limits<int32_t>::max(),
                                             std::numeric_limits<int32_t>::min(),
                                             std::numeric_limits<int64_t>::max(),
                                             std::numeric_limits<int64_t>::min(),
                                             int64_t{1} << 31,
                                             int64_t{1} << 32,
                                             int64_t{1} << 62,
                                             (int64_t{1} << 62) + 1,
                                             -(int64_t{1} << 62)};
        return kEdges[TakeByte() % (sizeof(kEdges) / sizeof(kEdges[0]))];
      }
      case 3:
        return static_cast<int64_t>(TakeU64());
      default:
        return TakeInRange(-2, 4);
    }
  }
  double TakeAttrFloat() {
    switch (TakeByte() % 6) {
      case 0:
        return 0.0;
      case 1:
        return std::numeric_limits<double>::infinity();
      case 2:
        return std::numeric_limits<double>::quiet_NaN();
      case 3: {
        double d;
        const uint64_t bits = TakeU64();
        std::memcpy(&d, &bits, sizeof(d));
        return d;
      }
      default:
        return static_cast<double>(TakeInRange(-100, 100)) / 8;
    }
  }
  // A string of up to `max` bytes.
  std::string TakeString(size_t max) {
    const size_t n = static_cast<size_t>(TakeInRange(0, static_cast<int64_t>(max)));
    std::string s;
    for (size_t i = 0; i < n && !empty(); ++i) s.push_back(static_cast<char>(TakeByte()));
    return s;
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t at_ = 0;
};

}  // namespace tandem::fuzz

#endif  // TANDEM_FUZZ_BYTE_SOURCE_H_
