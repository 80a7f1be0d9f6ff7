// JsonLinesLogger.
#include <arc/loggers/jsonl_logger.h>

#include <arc/base/error.h>

namespace arc {

JsonLinesLogger::JsonLinesLogger(const std::string& save_dir, std::string name, int64_t version)
    : FolderLogger(save_dir, std::move(name), version) {}

void JsonLinesLogger::log_metrics(const std::map<std::string, double>& metrics, int64_t step) {
  // Appends: a resumed run continues the file of its version.
  if (!out_.is_open()) {
    const std::string path = folder() + "/metrics.jsonl";
    out_.open(path, std::ios::app);
    ARC_CHECK(out_.good(), "cannot open '", path, "' for writing; make save_dir writable or choose another");
  }
  nlohmann::json record = {{"step", step}};
  for (const auto& [key, value] : prefixed(metrics)) record[key] = value;
  out_ << record.dump() << '\n';
}

void JsonLinesLogger::save() { out_.flush(); }

}  // namespace arc
