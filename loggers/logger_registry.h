// The loggers a config names, as LightningCLI's `trainer.logger`: a list (or one entry) of
// {"class_path": <registered name>, "init_args": {...}}; users register their own with one macro.
#pragma once

#include <arc/base/class_path.h>
#include <arc/loggers/logger.h>

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace arc {

/// Loggers by class name ("CSVLogger", "TensorBoardLogger", "JsonLinesLogger"), built from init_args.
Registry<Logger, const Config&>& logger_registry();

/// The loggers of `value`: one class_path/init_args entry (or class_path string) or a list of them;
/// `path` names it in errors. `resolved`, when given, gets the list with each entry's init_args spelt
/// out, defaults included.
std::vector<std::shared_ptr<Logger>> loggers_from_json(const nlohmann::json& value, const std::string& path,
                                                       nlohmann::json* resolved = nullptr);

}  // namespace arc

/// Registers `Class` (constructible from `const arc::Config&`, its init_args) as logger "name".
#define ARC_REGISTER_LOGGER(Class, name) ARC_REGISTER(logger, ::arc::logger_registry(), Class, name)
