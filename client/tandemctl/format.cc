#include "client/tandemctl/format.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace tandem::ctl {

TextTable::TextTable(std::vector<std::string> headers) {
  for (std::string& h : headers) {
    bool right = !h.empty() && h[0] == '>';
    right_.push_back(right);
    headers_.push_back(right ? h.substr(1) : std::move(h));
  }
}

void TextTable::AddRow(std::vector<std::string> cells) {
  cells.resize(headers_.size());
  rows_.push_back(std::move(cells));
}

std::string TextTable::Render() const {
  std::vector<size_t> width(headers_.size());
  for (size_t c = 0; c < headers_.size(); ++c) {
    width[c] = headers_[c].size();
    for (const auto& row : rows_) width[c] = std::max(width[c], row[c].size());
  }
  auto line = [&](const std::vector<std::string>& cells) {
    std::string out;
    for (size_t c = 0; c < cells.size(); ++c) {
      std::string pad(width[c] - cells[c].size(), ' ');
      bool last = c + 1 == cells.size();
      if (right_[c]) {
        absl::StrAppend(&out, pad, cells[c]);
      } else {
        absl::StrAppend(&out, cells[c], last ? "" : pad);
      }
      if (!last) out += "  ";
    }
    out += "\n";
    return out;
  };
  std::string out = line(headers_);
  for (const auto& row : rows_) out += line(row);
  return out;
}

std::string HumanBytes(uint64_t bytes) {
  static const char* const kUnits[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
  if (bytes < 1024) return absl::StrCat(bytes, " B");
  double value = static_cast<double>(bytes) / 1024;
  int unit = 0;
  while (value >= 1024 && unit < 4) {
    value /= 1024;
    ++unit;
  }
  return absl::StrFormat("%.1f %s", value, kUnits[unit]);
}

std::string HumanSeconds(double seconds) {
  if (!(seconds > 0)) return "-";
  if (seconds < 1e-3) return absl::StrFormat("%.0fus", seconds * 1e6);
  if (seconds < 1) return absl::StrFormat("%.1fms", seconds * 1e3);
  return absl::StrFormat("%.2fs", seconds);
}

std::string HumanDuration(double seconds) {
  int64_t s = static_cast<int64_t>(std::max(0.0, seconds));
  if (s < 60) return absl::StrCat(s, "s");
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%02dm", s / 3600, (s % 3600) / 60);
  return absl::StrFormat("%dd%02dh", s / 86400, (s % 86400) / 3600);
}

std::string Percent(double fraction) {
  if (!(fraction > 0)) return "-";
  return absl::StrFormat("%.1f%%", fraction * 100);
}

std::string Factor(double factor) {
  if (!(factor > 0)) return "-";
  return absl::StrFormat("%.2fx", factor);
}

}  // namespace tandem::ctl
