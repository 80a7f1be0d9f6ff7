// from_class_path: LightningCLI's {"class_path": <name>, "init_args": {...}} entries, built by a
// registry with every init_args key read, and errors that say which entry.
#pragma once

#include <arc/base/config.h>
#include <arc/base/registry.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace arc::detail {

/// The key of `init_args` that `message` names first, as a whole word ("ModelCheckpoint mode must be
/// ..." names mode), or "" when it names none.
inline std::string key_named_in(const std::string& message, const nlohmann::json& init_args) {
  const auto is_word = [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; };
  std::string key;
  size_t first = std::string::npos;
  for (const auto& item : init_args.items()) {
    const std::string& name = item.key();
    for (size_t at = message.find(name); at != std::string::npos && at < first; at = message.find(name, at + 1)) {
      const size_t end = at + name.size();
      if ((at == 0 || !is_word(message[at - 1])) && (end == message.size() || !is_word(message[end]))) {
        first = at;
        key = name;
      }
    }
  }
  return key;
}

/// The name a registry knows `class_path` by: the part after the last dot, so that LightningCLI's
/// import paths ("lightning.pytorch.callbacks.EarlyStopping", "torch.optim.AdamW") name the same
/// classes as their short names do.
inline std::string registered_name(const std::string& class_path) {
  const size_t dot = class_path.rfind('.');
  return dot == std::string::npos ? class_path : class_path.substr(dot + 1);
}

/// Whether the string `value` names a class as LightningCLI's configs give them: "CSVLogger" or an
/// import path ("lightning.pytorch.loggers.CSVLogger"), not a plain value such as "cpu" or "bf16-mixed".
inline bool names_a_class(const nlohmann::json& value) {
  const auto last = registered_name(value.get_ref<const std::string&>());
  return !last.empty() && std::isupper(static_cast<unsigned char>(last.front())) != 0 &&
         std::all_of(last.begin(), last.end(),
                     [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '_'; });
}

/// `entry` with the keys beside class_path and init_args moved into init_args, as jsonargparse takes
/// `--optimizer.lr 0.01` for `--optimizer.init_args.lr 0.01`; a key given both ways with two values
/// is an error. A string (a class_path alone) becomes {"class_path": entry}.
inline nlohmann::json with_init_args_gathered(const nlohmann::json& entry, const std::string& path) {
  if (!entry.is_object()) return entry.is_string() ? nlohmann::json{{"class_path", entry}} : entry;
  nlohmann::json gathered = entry;
  auto& init_args = gathered["init_args"];
  if (init_args.is_null()) init_args = nlohmann::json::object();
  if (!init_args.is_object()) return entry;  // Config says what init_args must be
  for (const auto& item : entry.items()) {
    const std::string& key = item.key();
    if (key == "class_path" || key == "init_args") continue;
    const auto given = init_args.find(key);
    ARC_CHECK(given == init_args.end() || *given == item.value(), path, ".", key, " (", item.value().dump(), ") and ",
              path, ".init_args.", key, " (", given == init_args.end() ? "" : given->dump(),
              ") disagree; set one of them (--", path, ".init_args.", key, "=<value> overrides a config file's)");
    init_args[key] = item.value();
    gathered.erase(key);
  }
  return gathered;
}

/// What `build(class name, init_args)` makes of `entry` ({"class_path", "init_args"}, or the
/// class_path alone as a string, as LightningCLI takes it, and keys beside class_path as init_args:
/// with_init_args_gathered), every init_args key read; errors name `path` (the entry's place in the
/// config). `resolved`, when given, gets the entry as {"class_path", "init_args"} with the default of
/// every init_arg the build read and the entry left out (Config::defaults_taken).
template <typename Build>
auto with_class_path(const nlohmann::json& entry, const std::string& path, const Build& build,
                     nlohmann::json* resolved = nullptr) {
  Config fields(with_init_args_gathered(entry, path), path);
  const auto class_path = fields.require<std::string>("class_path");
  const auto* init_json = fields.find("init_args");
  fields.finish();
  Config init_args(init_json != nullptr ? *init_json : nlohmann::json::object(), path + ".init_args");
  // finish() after the build, outside its handler: its message names the key already.
  auto built = [&] {
    try {
      return build(registered_name(class_path), init_args);
    } catch (const Error& error) {
      // A misspelt key explains a missing or defaulted one best ("save_dri": did you mean "save_dir"?).
      const std::string message = error.what();
      init_args.finish_after(message);
      // Config's messages name the key already ('trainer.callbacks[1].init_args.mode'); the registry's
      // names the class, and a constructor's the option, which is the init_args key of that name.
      if (message.find("'" + path) != std::string::npos) throw;
      const auto key = init_json != nullptr ? key_named_in(message, *init_json) : std::string();
      throw Error((key.empty() ? path : path + ".init_args." + key) + " (" + class_path + "): " + message);
    }
  }();
  init_args.finish();
  if (resolved != nullptr) {
    auto spelt = init_json != nullptr ? *init_json : nlohmann::json::object();
    spelt.update(init_args.defaults_taken());
    // Built apart and moved in: clang 14 at -O1 and above loses the string `*resolved` held when a
    // braced list is assigned to it here (GCC does not; valgrind shows it without sanitizers).
    nlohmann::json entry_resolved = {{"class_path", class_path}, {"init_args", spelt}};
    *resolved = std::move(entry_resolved);
  }
  return built;
}

/// `T` built by `registry` from `entry`, as with_class_path.
template <typename T>
std::shared_ptr<T> from_class_path(const Registry<T, const Config&>& registry, const nlohmann::json& entry,
                                   const std::string& path, nlohmann::json* resolved = nullptr) {
  return with_class_path(
      entry, path, [&](const std::string& name, const Config& init_args) { return registry.create(name, init_args); },
      resolved);
}

/// Every entry of `list`: an array of such entries, or one entry (an object or a class_path string),
/// as Lightning's Trainer takes one callback or logger or a list; `path` names the list in errors.
/// `resolved`, when given, gets the list of the entries resolved as with_class_path resolves them.
template <typename T>
std::vector<std::shared_ptr<T>> from_class_paths(const Registry<T, const Config&>& registry, const nlohmann::json& list,
                                                 const std::string& path, nlohmann::json* resolved = nullptr) {
  const auto entries = list.is_object() || list.is_string() ? nlohmann::json::array({list}) : list;
  ARC_CHECK(entries.is_array(), "config key '", path,
            "' must be a list of {class_path, init_args} entries (or one entry), got ", list.dump());
  std::vector<std::shared_ptr<T>> out;
  if (resolved != nullptr) *resolved = nlohmann::json::array();
  for (size_t i = 0; i < entries.size(); ++i)
    out.push_back(from_class_path(registry, entries[i], list.is_array() ? path + "[" + std::to_string(i) + "]" : path,
                                  resolved != nullptr ? &resolved->emplace_back() : nullptr));
  return out;
}

}  // namespace arc::detail
