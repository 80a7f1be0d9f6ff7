// JsonLinesLogger.
#include <arc/loggers/jsonl_logger.h>

#include <arc/core/error.h>

namespace arc {

JsonLinesLogger::JsonLinesLogger(const std::string& save_dir, std::string name, int64_t version)
    : FolderLogger(save_dir, std::move(name), version) {
  out_.open(log_dir() + "/metrics.jsonl", std::ios::app);
  ARC_CHECK(out_.good(), "cannot open '", log_dir(), "/metrics.jsonl' for writing; check permissions of save_dir");
}

void JsonLinesLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  nlohmann::json record = {{"step", step}};
  for (const auto& [key, value] : metrics) record[key] = value;
  out_ << record.dump() << '\n';
}

void JsonLinesLogger::save() { out_.flush(); }

}  // namespace arc
