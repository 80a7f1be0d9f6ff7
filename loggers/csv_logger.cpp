// CSVLogger.
#include <arc/loggers/csv_logger.h>

#include <arc/base/error.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iomanip>
#include <sstream>

namespace arc {

CSVLogger::CSVLogger(const std::string& save_dir, std::string name, int64_t version, int64_t flush_every)
    : FolderLogger(save_dir, std::move(name), version), flush_every_(std::max<int64_t>(1, flush_every)) {}

void CSVLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  auto row = prefixed(metrics);
  row["step"] = static_cast<double>(step);
  for (const auto& entry : row) columns_.insert(entry.first);
  rows_.push_back(std::move(row));
  if (static_cast<int64_t>(rows_.size() - written_) >= flush_every_) save();
}

// A run resumed in its version folder continues the file it wrote before.
void CSVLogger::load_existing(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  if (!std::getline(in, line)) return;
  std::vector<std::string> header;
  std::stringstream names(line);
  for (std::string name; std::getline(names, name, ',');) header.push_back(name);
  std::vector<std::map<std::string, double>> earlier;
  while (std::getline(in, line)) {
    std::map<std::string, double> row;
    std::stringstream cells(line);
    std::string cell;
    for (size_t i = 0; i < header.size() && std::getline(cells, cell, ','); ++i) {
      if (cell.empty()) continue;
      char* end = nullptr;
      row[header[i]] = std::strtod(cell.c_str(), &end);
      ARC_CHECK(*end == '\0', "'", path, "' holds '", cell, "' in column '", header[i],
                "', which is not a number; move the file away to start a new one");
    }
    earlier.push_back(std::move(row));
  }
  columns_.insert(header.begin(), header.end());
  rows_.insert(rows_.begin(), earlier.begin(), earlier.end());
}

// Rewrites the whole file: the header may have grown since the last write. Nothing logged, no file,
// as Lightning's.
void CSVLogger::save() {
  if (!opened_ && rows_.empty()) return;
  const std::string path = folder() + "/metrics.csv";
  if (!opened_) {
    opened_ = true;
    load_existing(path);
  }
  std::ofstream out(path + ".tmp");
  ARC_CHECK(out.good(), "cannot write '", path, "'; check permissions of the log folder");
  bool first = true;
  for (const auto& column : columns_) {
    out << (first ? "" : ",") << column;
    first = false;
  }
  out << '\n' << std::setprecision(10);
  for (const auto& row : rows_) {
    first = true;
    for (const auto& column : columns_) {
      if (!first) out << ',';
      first = false;
      const auto found = row.find(column);
      if (found != row.end()) out << found->second;
    }
    out << '\n';
  }
  out.close();
  std::filesystem::rename(path + ".tmp", path);
  written_ = rows_.size();
}

}  // namespace arc
