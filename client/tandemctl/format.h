// Text output of tandemctl: aligned tables and human units.
//
// Thread-safety: plain values and functions.
#ifndef TANDEM_CLIENT_TANDEMCTL_FORMAT_H_
#define TANDEM_CLIENT_TANDEMCTL_FORMAT_H_

#include <cstdint>
#include <string>
#include <vector>

namespace tandem::ctl {

// Columns padded to their widest cell; a column whose header starts with a
// '>' (dropped from the output) is right-aligned, for numbers.
class TextTable {
 public:
  explicit TextTable(std::vector<std::string> headers);
  void AddRow(std::vector<std::string> cells);  // missing cells are empty
  size_t rows() const { return rows_.size(); }
  std::string Render() const;

 private:
  std::vector<std::string> headers_;
  std::vector<bool> right_;
  std::vector<std::vector<std::string>> rows_;
};

// 0 B, 512 B, 1.5 KiB, 20.0 MiB, 8.0 GiB.
std::string HumanBytes(uint64_t bytes);
// Seconds as "-" (0), "850us", "12.3ms", "1.25s".
std::string HumanSeconds(double seconds);
// An uptime: "42s", "5m07s", "3h02m", "2d04h".
std::string HumanDuration(double seconds);
// A fraction as a percentage: "-" for 0, else "37.5%".
std::string Percent(double fraction);
// "1.83x", or "-" when not measured (0).
std::string Factor(double factor);

}  // namespace tandem::ctl

#endif  // TANDEM_CLIENT_TANDEMCTL_FORMAT_H_
