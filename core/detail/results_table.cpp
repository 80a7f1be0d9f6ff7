// The results table of validate and test.
#include <arc/core/detail/results_table.h>

#include <arc/base/config.h>

#include <fmt/format.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <map>
#include <string_view>
#include <vector>

namespace arc::detail {
namespace {

constexpr std::string_view kLoaderSuffix = "/dataloader_idx_";

// As Python's repr of a float, which Lightning prints: shortest round trip, whole numbers with ".0".
std::string python_float(double value) {
  std::string text = fmt::format("{}", value);
  if (std::isfinite(value) && text.find_first_of(".e") == std::string::npos) text += ".0";
  return text;
}

// The values of each metric name, one cell per loader (" " where a loader has none).
std::map<std::string, std::vector<std::string>> cells_by_name(const Metrics& metrics, size_t loaders) {
  std::map<std::string, std::vector<std::string>> cells;
  for (const auto& [key, value] : metrics) {
    const size_t at = key.find(kLoaderSuffix);
    const std::string name = key.substr(0, at);
    auto& row = cells.try_emplace(name, loaders, " ").first->second;
    const std::string text = python_float(value);
    if (at == std::string::npos) {
      std::fill(row.begin(), row.end(), text);
      continue;
    }
    const size_t loader = std::strtoull(key.c_str() + at + kLoaderSuffix.size(), nullptr, 10);
    if (loader < loaders) row[loader] = text;
  }
  return cells;
}

std::string centred_row(const std::vector<std::string>& cells, size_t width) {
  std::string line;
  for (const auto& cell : cells) line += fmt::format("{:^{}}", cell, width);
  line.erase(line.find_last_not_of(' ') + 1);
  return line + "\n";
}

size_t terminal_columns() {
  if (const char* columns = std::getenv("COLUMNS")) {
    const long value = std::strtol(columns, nullptr, 10);
    if (value > 0) return static_cast<size_t>(value);
  }
  winsize size{};
  if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 0) return size.ws_col;
  return 120;
}

// Python writes UTF-8 under the C locale too; only a locale that names another encoding has no "─".
bool utf8_locale() {
  for (const char* variable : {"LC_ALL", "LC_CTYPE", "LANG"}) {
    const char* value = std::getenv(variable);
    if (value == nullptr || *value == '\0') continue;
    const std::string locale = lowercase(value);
    return locale == "c" || locale == "posix" || locale.find("utf-8") != std::string::npos ||
           locale.find("utf8") != std::string::npos;
  }
  return true;
}

}  // namespace

std::string results_table(const Metrics& metrics, const std::string& stage, size_t loaders, size_t columns,
                          bool unicode) {
  const auto cells = cells_by_name(metrics, loaders);
  if (cells.empty() || loaders == 0) return "";
  std::vector<std::string> headers;
  for (size_t i = 0; i < loaders; ++i) headers.push_back("DataLoader " + std::to_string(i));
  size_t longest = std::max<size_t>(25, headers.back().size());
  for (const auto& [name, row] : cells) longest = std::max(longest, name.size());
  const size_t width = std::max<size_t>(1, std::min(longest, columns / 2));
  const size_t per_table = std::max<size_t>(1, (columns - std::min(columns, width)) / width);
  const size_t half = std::max<size_t>(1, columns / 2);
  std::string bar;
  for (size_t i = 0; i < columns; ++i) bar += unicode ? "─" : "-";
  bar += "\n";
  std::string title = stage + " metric";
  title[0] = static_cast<char>(std::toupper(static_cast<unsigned char>(title[0])));

  std::string text;
  for (size_t first = 0; first < loaders; first += per_table) {
    const size_t last = std::min(loaders, first + per_table);
    std::vector<std::string> header = {title};
    header.insert(header.end(), headers.begin() + static_cast<std::ptrdiff_t>(first),
                  headers.begin() + static_cast<std::ptrdiff_t>(last));
    text += bar + centred_row(header, width) + bar;
    for (const auto& [name, row] : cells) {
      // A name wider than half the terminal is cut into pieces, the values beside the first.
      std::vector<std::string> line = {name.substr(0, half)};
      line.insert(line.end(), row.begin() + static_cast<std::ptrdiff_t>(first),
                  row.begin() + static_cast<std::ptrdiff_t>(last));
      text += centred_row(line, width);
      for (size_t at = half; at < name.size(); at += half) text += centred_row({name.substr(at, half)}, width);
    }
    text += bar;
  }
  return text;
}

void print_results(const Metrics& metrics, const std::string& stage, size_t loaders) {
  std::cout << results_table(metrics, stage, loaders, terminal_columns(), utf8_locale()) << std::flush;
}

}  // namespace arc::detail
