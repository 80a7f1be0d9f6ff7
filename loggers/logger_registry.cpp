// The shipped loggers by Lightning's class names, built from init_args.
#include <arc/loggers/logger_registry.h>

#include <arc/loggers/csv_logger.h>
#include <arc/loggers/jsonl_logger.h>
#include <arc/loggers/tensorboard_logger.h>

namespace arc {
namespace {

// save_dir (required, as Lightning's), name and version (an integer; -1 or absent: the next free one).
template <typename T, typename... Extra>
std::shared_ptr<Logger> folder_logger(const Config& config, Extra... extra) {
  return std::make_shared<T>(config.require<std::string>("save_dir"), config.get<std::string>("name", "lightning_logs"),
                             config.get<int64_t>("version", -1), extra...);
}

Registry<Logger, const Config&> shipped_loggers() {
  Registry<Logger, const Config&> r("logger");
  r.add("CSVLogger", [](const Config& config) {
    return folder_logger<CSVLogger>(config, config.get<int64_t>("flush_logs_every_n_steps", 100));
  });
  r.add("TensorBoardLogger", [](const Config& config) { return folder_logger<TensorBoardLogger>(config); });
  r.add("JsonLinesLogger", [](const Config& config) { return folder_logger<JsonLinesLogger>(config); });
  return r;
}

}  // namespace

Registry<Logger, const Config&>& logger_registry() {
  static Registry<Logger, const Config&> registry = shipped_loggers();
  return registry;
}

bool detail::add_logger(const std::string& name, Registry<Logger, const Config&>::Factory factory) {
  logger_registry().add(name, std::move(factory));
  return true;
}

std::vector<std::shared_ptr<Logger>> loggers_from_json(const nlohmann::json& value, const std::string& path) {
  return detail::from_class_paths(logger_registry(), value, path);
}

}  // namespace arc
