// from_class_path: LightningCLI's {"class_path": <name>, "init_args": {...}} entries, built by a
// registry with every init_args key read, and errors that say which entry.
#pragma once

#include <arc/base/config.h>
#include <arc/base/registry.h>

#include <nlohmann/json.hpp>

#include <memory>
#include <string>
#include <vector>

namespace arc::detail {

/// `T` built from `entry` ({"class_path", "init_args"}) by `registry`, every init_args key read;
/// errors name `path` (the entry's place in the config).
template <typename T>
std::shared_ptr<T> from_class_path(const Registry<T, const Config&>& registry, const nlohmann::json& entry,
                                   const std::string& path) {
  Config fields(entry, path);
  const auto class_path = fields.require<std::string>("class_path");
  const auto* init_json = fields.find("init_args");
  fields.finish();
  Config init_args(init_json != nullptr ? *init_json : nlohmann::json::object(), path + ".init_args");
  try {
    auto built = registry.create(class_path, init_args);
    init_args.finish();
    return built;
  } catch (const Error& error) {
    // A misspelt key explains a missing or defaulted one best ("save_dri": did you mean "save_dir"?).
    init_args.finish();
    const std::string message = error.what();
    // Messages of the registry and of Config name the key already; a constructor's names the option.
    if (message.find(path) != std::string::npos) throw;
    throw Error(path + " (" + class_path + "): " + message);
  }
}

/// Every entry of `list`, which must be an array of such entries; `path` names the list in errors.
template <typename T>
std::vector<std::shared_ptr<T>> from_class_paths(const Registry<T, const Config&>& registry, const nlohmann::json& list,
                                                 const std::string& path) {
  ARC_CHECK(list.is_array(), "config key '", path, "' must be a list of {class_path, init_args} entries, got ",
            list.dump());
  std::vector<std::shared_ptr<T>> out;
  for (size_t i = 0; i < list.size(); ++i)
    out.push_back(from_class_path(registry, list[i], path + "[" + std::to_string(i) + "]"));
  return out;
}

}  // namespace arc::detail
