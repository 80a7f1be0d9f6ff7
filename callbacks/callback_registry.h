// The callbacks a config names, as LightningCLI's `trainer.callbacks`: a list of
// {"class_path": <registered name>, "init_args": {...}}, every shipped callback by Lightning's class
// name, users' own with one macro.
#pragma once

#include <arc/base/class_path.h>
#include <arc/core/callback.h>

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace arc {

/// Callbacks by class name, each built from its init_args.
Registry<Callback, const Config&>& callback_registry();

/// The callbacks of `list` (an array of class_path/init_args objects or class_path strings, or one
/// of them); `path` names the list in errors ("trainer.callbacks"), which then name the entry and key:
/// "trainer.callbacks[1].init_args.mode". `resolved`, when given, gets the list with each entry's
/// init_args spelt out, defaults included, as LightningCLI saves them.
std::vector<std::shared_ptr<Callback>> callbacks_from_json(const nlohmann::json& list, const std::string& path,
                                                           nlohmann::json* resolved = nullptr);

}  // namespace arc

/// Registers `Class` (constructible from `const arc::Config&`, its init_args) as callback "name".
#define ARC_REGISTER_CALLBACK(Class, name) ARC_REGISTER(callback, ::arc::callback_registry(), Class, name)
