// The `arc` tool's config: JSON or YAML files, deep-merged in order, then --set overrides; and which
// file each key came from, for messages. No LibTorch here: the tool's launcher reads it too.
#include <arc/cli/config_file.h>

#include <arc/base/config.h>
#include <arc/base/detail/yaml.h>
#include <arc/base/error.h>

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>

namespace arc::cli {
namespace {

bool is_yaml(const std::string& path) {
  for (const std::string suffix : {".yaml", ".yml"})
    if (path.size() > suffix.size() && path.compare(path.size() - suffix.size(), suffix.size(), suffix) == 0)
      return true;
  return false;
}

// `given_by`: what named the file (--config, or an environment variable).
nlohmann::json read_file(const std::string& path, const std::string& given_by) {
  std::ifstream in(path);
  ARC_CHECK(in.good(), "cannot read config file '", path, "'; check the path given to ", given_by);
  std::stringstream text;
  text << in.rdbuf();
  const auto file = is_yaml(path) ? from_yaml(text.str(), path) : parse_json(text.str(), path);
  ARC_CHECK(file.is_object(), "config file '", path,
            "' must hold a mapping with sections module, data and trainer (and optimizer, lr_scheduler)");
  return file;
}

// As LightningCLI merges configs: mappings key by key, anything else (lists too) replaced.
void deep_merge(nlohmann::json& into, const nlohmann::json& from) {
  for (const auto& [key, value] : from.items()) {
    auto found = into.find(key);
    if (found != into.end() && found->is_object() && value.is_object()) {
      deep_merge(*found, value);
    } else {
      into[key] = value;
    }
  }
}

// Every key path of `value` ("trainer.callbacks[1].init_args.mode" and its parents) as from `source`.
void record(const nlohmann::json& value, const std::string& path, const std::string& source,
            std::map<std::string, std::string>& origins) {
  if (!path.empty()) origins[path] = source;
  if (value.is_object())
    for (const auto& [key, item] : value.items()) record(item, path.empty() ? key : path + "." + key, source, origins);
  if (value.is_array())
    for (size_t i = 0; i < value.size(); ++i) record(value[i], path + "[" + std::to_string(i) + "]", source, origins);
}

// Whether `config` has the key path `path` ("trainer.callbacks[1].init_args.mode").
bool holds(const nlohmann::json& config, const std::string& path) {
  const nlohmann::json* node = &config;
  for (size_t begin = 0; begin < path.size();) {
    const size_t end = std::min(path.find_first_of(".[", begin + 1), path.size());
    if (path[begin] == '[') {
      const size_t index = std::stoul(path.substr(begin + 1));
      if (!node->is_array() || index >= node->size()) return false;
      node = &(*node)[index];
    } else {
      const size_t start = path[begin] == '.' ? begin + 1 : begin;
      const std::string key = path.substr(start, end - start);
      if (!node->is_object() || !node->contains(key)) return false;
      node = &(*node)[key];
    }
    begin = end;
  }
  return true;
}

// The top-level keys that LightningCLI's flags set whole.
const std::set<std::string> kWholeKeys = {"model", "module", "data", "optimizer", "lr_scheduler", "seed_everything"};
// The other top-level keys of a config.
const std::set<std::string> kSectionKeys = {"trainer", "ckpt_path", "verbose"};

// `message`, when it says that a key is missing from the config ("missing config key
// 'trainer.logger[0].init_args.save_dir'; add it to the config", Config::require's words), with the
// flag that gives it instead: "--trainer.logger.save_dir=<value>, after the flag that added its entry",
// or "--optimizer.lr=<value>" ("--trainer.logger.save_dir=<value>") for an entry that is no list's; else
// as it is.
std::string with_flag_to_add(const std::string& message) {
  const std::string opening = kMissingKey, closing = kAddItToTheConfig;
  const size_t begin = message.find(opening), end = message.find(closing);
  if (begin == std::string::npos || end == std::string::npos || end < begin) return message;
  // "trainer.logger[0].init_args.save_dir" is --trainer.logger.save_dir after the flag that added the
  // entry; "optimizer.init_args.lr" is --optimizer.lr, "trainer.logger.init_args.save_dir"
  // --trainer.logger.save_dir.
  std::string key = message.substr(begin + opening.size(), end - begin - opening.size()), after;
  const std::string init_args = ".init_args.";
  const size_t open = key.find('['), entry = key.find(init_args);
  if (open != std::string::npos) {
    const size_t shut = key.find("]" + init_args);
    if (shut == std::string::npos || key.find('[', open + 1) != std::string::npos) return message;
    key.erase(open, shut + init_args.size() - open);
    after = ", after the flag that added its entry";
  } else if (entry != std::string::npos) {
    key.erase(entry, init_args.size() - 1);
  } else {
    return message;
  }
  return message.substr(0, end) + "'; give it on the command line: --" + key + "=<value>" + after +
         message.substr(end + closing.size());
}

}  // namespace

std::vector<std::string> with_dotted_flags(const std::vector<std::string>& args) {
  std::vector<std::string> out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    const size_t equals = arg.find('=');
    const size_t dot = arg.find('.');
    const bool dotted = arg.size() > 2 && arg.compare(0, 2, "--") == 0 &&
                        std::isalpha(static_cast<unsigned char>(arg[2])) && dot != std::string::npos && dot < equals;
    // LightningCLI's flags that give a whole top-level key: --model=cnn_classifier, --optimizer Adam.
    const bool whole = arg.compare(0, 2, "--") == 0 && kWholeKeys.count(arg.substr(2, equals - 2)) > 0;
    if (!dotted && !whole) {
      out.push_back(arg);
      continue;
    }
    const std::string key = arg.substr(2, equals == std::string::npos ? std::string::npos : equals - 2);
    const bool given = equals != std::string::npos || (i + 1 < args.size() && args[i + 1].compare(0, 2, "--") != 0);
    const std::string value = equals != std::string::npos ? arg.substr(equals + 1) : given ? args[++i] : "";
    // jsonargparse's --trainer.callbacks.help ModelCheckpoint: the init_args of a class that key takes.
    const std::string help = ".help";
    if (key.size() > help.size() && key.compare(key.size() - help.size(), help.size(), help) == 0) {
      out.push_back("--class_help");
      out.push_back(key.substr(0, key.size() - help.size()) + "=" + value);
      continue;
    }
    ARC_CHECK(given, "--", key, " needs a value: write --", key, "=<value> or --", key, " <value>");
    out.push_back("--set");
    out.push_back(key + "=" + value);
  }
  return out;
}

EnvironmentDefaults environment_defaults(const std::string& prefix) {
  EnvironmentDefaults out;
  const std::string head = prefix + "_";
  for (char** entry = environ; *entry != nullptr; ++entry) {
    const std::string variable = *entry;
    const auto equals = variable.find('=');
    const std::string name = variable.substr(0, equals), value = variable.substr(equals + 1);
    if (name.rfind(head, 0) != 0 || equals == std::string::npos) continue;
    std::string key = name.substr(head.size());
    if (key == "CONFIG") {
      out.config_file = value;
      out.config_variable = name;
      continue;
    }
    for (auto& c : key) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    for (size_t at = key.find("__"); at != std::string::npos; at = key.find("__", at + 1)) key.replace(at, 2, ".");
    // Only keys of the config's sections: the prefix's other variables (PL_GLOBAL_SEED) are not keys.
    if (kWholeKeys.count(key.substr(0, key.find('.'))) > 0 || kSectionKeys.count(key.substr(0, key.find('.'))) > 0)
      out.overrides.emplace_back(key + "=" + value, name);
  }
  std::sort(out.overrides.begin(), out.overrides.end(),
            [](const auto& a, const auto& b) { return a.second < b.second; });
  return out;
}

LoadedConfig load_config(const std::vector<std::string>& config_paths, const std::vector<std::string>& overrides,
                         const EnvironmentDefaults& environment, const nlohmann::json& base) {
  LoadedConfig out;
  out.config = base;
  const auto apply = [&out](const std::string& item, const std::string& source) {
    const auto equals = item.find('=');
    ARC_CHECK(equals != std::string::npos, "--set needs key=value, e.g. trainer.max_epochs=3, got '", item, "'");
    const std::string path = set_dotted(out.config, item.substr(0, equals), item.substr(equals + 1));
    // Keys a file set inside a value that this one replaced are gone, and no message is the file's.
    for (auto it = out.origins.lower_bound(path); it != out.origins.end() && it->first.rfind(path, 0) == 0;)
      it = it->first.size() > path.size() && !holds(out.config, it->first) ? out.origins.erase(it) : std::next(it);
    out.origins[path] = source;
  };
  const auto merge = [&out](const std::string& path, const std::string& given_by) {
    const auto file = read_file(path, given_by);
    deep_merge(out.config, file);
    record(file, "", path, out.origins);
  };
  if (!environment.config_file.empty()) merge(environment.config_file, environment.config_variable);
  for (const auto& [item, variable] : environment.overrides) apply(item, variable);
  for (const auto& path : config_paths) merge(path, "--config");
  for (const auto& item : overrides) apply(item, "--set");
  return out;
}

std::string LoadedConfig::locate(const std::string& message) const {
  // The longest key path the message names is the one it is about. A top-level key ("model") is
  // named where it opens the message or a quoted key path, not where the word is prose ("another model").
  const auto names = [&message](const std::string& path) {
    if (path.find_first_of(".[") != std::string::npos) return message.find(path) != std::string::npos;
    for (const char* after : {"'", ".", "["})
      if (message.find("'" + path + after) != std::string::npos) return true;
    const char next = message.size() > path.size() ? message[path.size()] : ' ';
    return message.rfind(path, 0) == 0 && !std::isalnum(static_cast<unsigned char>(next)) && next != '_';
  };
  std::string best;
  for (const auto& [path, source] : origins)
    if (path.size() > best.size() && names(path)) best = path;
  if (best.empty() || message.rfind(origins.at(best) + ":", 0) == 0) return message;
  return origins.at(best) + ": " + (origins.at(best) == "--set" ? with_flag_to_add(message) : message);
}

}  // namespace arc::cli
