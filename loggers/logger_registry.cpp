// The shipped loggers by Lightning's class names, built from init_args.
#include <arc/loggers/logger_registry.h>

#include <arc/base/console.h>
#include <arc/loggers/csv_logger.h>
#include <arc/loggers/jsonl_logger.h>
#include <arc/loggers/tensorboard_logger.h>

namespace arc {
namespace {

// save_dir (required, as Lightning's), name, version (an integer; -1 or absent: the next free one)
// and Lightning's prefix.
template <typename T, typename... Extra>
std::shared_ptr<T> folder_logger(const Config& config, Extra... extra) {
  auto logger =
      std::make_shared<T>(config.require<std::string>("save_dir"), config.get<std::string>("name", "lightning_logs"),
                          config.get<int64_t>("version", -1), extra...);
  logger->set_prefix(config.get<std::string>("prefix", ""));
  return logger;
}

// Lightning's TensorBoardLogger arguments; the graph and the HParams tab's summaries are not
// written, which the run says when they are asked for (Lightning's own default asks for hp_metric).
std::shared_ptr<Logger> tensorboard_logger(const Config& config) {
  auto logger = folder_logger<TensorBoardLogger>(config);
  logger->set_sub_dir(config.get<std::string>("sub_dir", ""));
  if (config.get<bool>("log_graph", false))
    console().warn(
        "config key '{}' is not used: Arclight writes no graph to TensorBoard (Lightning's needs a traced "
        "module)",
        config.qualified("log_graph"));
  if (config.get<bool>("default_hp_metric", false))
    console().warn(
        "config key '{}' is not used: Arclight writes no HParams summary, so there is no hp_metric "
        "placeholder; the hyper-parameters are in hparams.yaml",
        config.qualified("default_hp_metric"));
  return logger;
}

Registry<Logger, const Config&> shipped_loggers() {
  Registry<Logger, const Config&> r("logger");
  r.add("CSVLogger", [](const Config& config) {
    return folder_logger<CSVLogger>(config, config.get<int64_t>("flush_logs_every_n_steps", 100));
  });
  r.add("TensorBoardLogger", tensorboard_logger);
  r.add("JsonLinesLogger", [](const Config& config) { return folder_logger<JsonLinesLogger>(config); });
  return r;
}

}  // namespace

Registry<Logger, const Config&>& logger_registry() {
  static Registry<Logger, const Config&> registry = shipped_loggers();
  return registry;
}

std::vector<std::shared_ptr<Logger>> loggers_from_json(const nlohmann::json& value, const std::string& path,
                                                       nlohmann::json* resolved) {
  return detail::from_class_paths(logger_registry(), value, path, resolved);
}

}  // namespace arc
