// CSVLogger.
#include <arc/loggers/csv_logger.h>

#include <arc/core/error.h>
#include <arc/loggers/jsonl_logger.h>

#include <filesystem>
#include <fstream>
#include <iomanip>

namespace arc {

CSVLogger::CSVLogger(std::string save_dir, std::string name, int64_t version, int64_t flush_every)
    : name_(std::move(name)),
      version_(version >= 0 ? version : next_version(save_dir + "/" + name_)),
      flush_every_(std::max<int64_t>(1, flush_every)) {
  dir_ = save_dir + "/" + name_ + "/version_" + std::to_string(version_);
  std::error_code error;
  std::filesystem::create_directories(dir_, error);
  ARC_CHECK(!error, "cannot create the log folder '", dir_, "': ", error.message(), "; check save_dir");
}

void CSVLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  auto row = metrics;
  row["step"] = static_cast<double>(step);
  for (const auto& entry : row) columns_.insert(entry.first);
  rows_.push_back(std::move(row));
  if (static_cast<int64_t>(rows_.size() - written_) >= flush_every_) save();
}

void CSVLogger::log_hyperparams(const nlohmann::json& hparams) {
  std::ofstream(dir_ + "/hparams.json") << hparams.dump(2) << '\n';
}

// Rewrites the whole file: the header may have grown since the last write.
void CSVLogger::save() {
  const std::string path = dir_ + "/metrics.csv";
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
