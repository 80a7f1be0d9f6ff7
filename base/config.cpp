// Strict config sections and dotted-path overrides.
#include <arc/base/config.h>

#include <arc/base/class_path.h>
#include <arc/base/detail/yaml.h>

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace arc {

Config::Config(nlohmann::json values, std::string path) : values_(std::move(values)), path_(std::move(path)) {
  if (values_.is_null()) values_ = nlohmann::json::object();
  ARC_CHECK(values_.is_object(), "config section '", path_, "' must be a JSON object, got ", values_.dump());
}

const nlohmann::json* Config::find(const std::string& key) const {
  read_.insert(key);
  const auto it = values_.find(key);
  return it == values_.end() ? nullptr : &*it;
}

std::optional<double> Config::duration(const std::string& key) const {
  const auto* value = find(key);
  if (value == nullptr || value->is_null()) return std::nullopt;
  const std::string hint =
      "' must be seconds, \"DD:HH:MM:SS\" or {\"days\", \"hours\", \"minutes\", \"seconds\"}, got ";
  if (value->is_number()) return value->get<double>();
  if (value->is_string()) {
    int days = 0, hours = 0, minutes = 0, seconds = 0;
    char tail = 0;
    const int read =
        std::sscanf(value->get<std::string>().c_str(), "%d:%d:%d:%d%c", &days, &hours, &minutes, &seconds, &tail);
    ARC_CHECK(read == 4, "config key '", qualified(key), hint, value->dump());
    return ((days * 24.0 + hours) * 60.0 + minutes) * 60.0 + seconds;
  }
  ARC_CHECK(value->is_object(), "config key '", qualified(key), hint, value->dump());
  Config parts(*value, qualified(key));
  const double total = parts.get<double>("days", 0) * 86400 + parts.get<double>("hours", 0) * 3600 +
                       parts.get<double>("minutes", 0) * 60 + parts.get<double>("seconds", 0);
  parts.finish();
  return total;
}

std::string Config::qualified(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

void Config::finish() const {
  const std::vector<std::string> allowed(read_.begin(), read_.end());
  for (const auto& item : values_.items()) {
    if (read_.count(item.key()) > 0) continue;
    std::string message = "unknown config key '" + qualified(item.key()) + "'";
    const std::string suggestion = closest_match(item.key(), allowed);
    if (!suggestion.empty()) message += "; did you mean '" + suggestion + "'?";
    const std::string known = path_.empty() ? "known top-level keys: " : "known keys in '" + path_ + "': ";
    throw Error(message + (suggestion.empty() ? "; " : " ") + known + join(allowed));
  }
}

void Config::finish_after(const std::string& error) const {
  // The keys asked for but absent: what a misspelt key would have been.
  std::vector<std::string> missing;
  for (const auto& key : read_)
    if (!values_.contains(key)) missing.push_back(key);
  for (const auto& item : values_.items()) {
    if (read_.count(item.key()) > 0) continue;
    const std::string suggestion = closest_match(item.key(), missing);
    if (!suggestion.empty())
      throw Error("unknown config key '" + qualified(item.key()) + "'; did you mean '" + suggestion +
                  "'? (and: " + error + ")");
  }
}

Config Config::survey(std::string path) {
  Config config(nlohmann::json::object(), std::move(path));
  config.surveying_ = true;
  return config;
}

std::vector<std::string> Config::keys_with_defaults() const {
  std::vector<std::string> out;
  for (const auto& key : read_) {
    if (required_.count(key) > 0)
      out.push_back(key + " (required)");
    else if (defaults_.contains(key))
      out.push_back(key + "=" + defaults_[key].dump());
    else
      out.push_back(key);
  }
  return out;
}

nlohmann::json Config::defaults_taken() const {
  nlohmann::json out = nlohmann::json::object();
  for (const auto& key : read_)
    if (!values_.contains(key) && required_.count(key) == 0 && defaults_.contains(key)) out[key] = defaults_[key];
  return out;
}

namespace {

bool has_null(const nlohmann::json& value) {
  return value.is_null() ||
         (value.is_structured() && std::any_of(value.begin(), value.end(), [](const auto& v) { return has_null(v); }));
}

// A value given as LightningCLI's flags take them, in YAML's flow style ("{0: 2}", "[{class_path: Timer}]"),
// where it is not JSON. Not one that YAML reads with a key and no value: "{epoch}" is a filename template.
std::optional<nlohmann::json> flow_collection(const std::string& text) {
  if (text.empty() || (text.front() != '{' && text.front() != '[')) return std::nullopt;
  try {
    auto value = from_yaml(text, "");
    if (value.is_structured() && !has_null(value)) return value;
  } catch (const Error&) {
  }
  return std::nullopt;
}

}  // namespace

std::string set_dotted(nlohmann::json& root, const std::string& key, const std::string& text) {
  check_utf8(key + "=" + text, "--set");
  const bool append = !key.empty() && key.back() == '+';
  const std::string path = append ? key.substr(0, key.size() - 1) : key;
  ARC_CHECK(!path.empty() && path.front() != '.' && path.back() != '.',
            "--set needs key=value with a dotted key such as trainer.max_epochs=3, got '", key, "'");
  auto value = nlohmann::json::parse(text, nullptr, false);
  if (value.is_discarded()) value = flow_collection(text).value_or(text);
  nlohmann::json* node = &root;
  size_t begin = 0;
  while (true) {
    const size_t dot = path.find('.', begin);
    const std::string part = path.substr(begin, dot - begin);
    ARC_CHECK(!part.empty(), "--set key '", path, "' has an empty part; write it as section.key");
    const nlohmann::json* holder = node;  // what the path so far names
    if (node->is_array()) {
      const std::string list = path.substr(0, begin - 1);
      ARC_CHECK(!node->empty(), "--set key '", path, "': '", list,
                "' is an empty list, so it has no last entry to set '", part, "' of; append one first (--", list,
                "+=<class name>)");
      node = &node->back();
      if (node->is_string()) *node = {{"class_path", *node}};
    } else if (node->is_string() && begin > 0 && (path.find('.') == begin - 1 || detail::names_a_class(*node))) {
      *node = {{"class_path", *node}};  // a class alone ("optimizer: Adam", "logger: CSVLogger"), given its init_args
    }
    if (node->is_null()) *node = nlohmann::json::object();
    if (!node->is_object()) {
      const std::string at = path.substr(0, begin - 1);
      ARC_FAIL("--set key '", path, "': '", at, "' holds ", holder->dump(), ", which has no key '", part, "'",
               holder->is_array() ? " in its last entry" : "", "; set '", at, "' itself (--", at, "=<value>)");
    }
    // An entry's own keys go to its init_args, where it has them ("optimizer.lr" is "optimizer.init_args.lr").
    if (node->contains("class_path") && node->contains("init_args") && (*node)["init_args"].is_object() &&
        part != "class_path" && part != "init_args")
      node = &(*node)["init_args"];
    if (dot == std::string::npos) {
      auto& target = (*node)[part];
      if (!append) {
        // As jsonargparse: a class named again keeps its entry's init_args; another class replaces them.
        // (Arclight's module and data sections name theirs by "name".)
        const auto class_name = [](const std::string& name) { return name.substr(name.rfind('.') + 1); };
        const auto named = target.is_object()
                               ? target.value(target.contains("class_path") ? "class_path" : "name", nlohmann::json())
                               : nlohmann::json();
        const bool same_class = named.is_string() && value.is_string() &&
                                class_name(named.get<std::string>()) == class_name(value.get<std::string>());
        if (!same_class) target = value;
        return path;
      }
      if (target.is_null()) target = nlohmann::json::array();
      if (target.is_object() || target.is_string()) target = nlohmann::json::array({target});
      ARC_CHECK(target.is_array(), "--", path, "+=", text, ": '", path, "' holds ", target.dump(),
                ", not a list of entries to append to; set it with --", path, "=<value>");
      if (!value.is_array()) value = nlohmann::json::array({value});
      for (auto& entry : value) target.push_back(std::move(entry));
      return path;
    }
    node = &(*node)[part];
    begin = dot + 1;
  }
}

nlohmann::json parse_json(const std::string& text, const std::string& source) {
  // The containers open at this point of the parse, each with the key or index now being read.
  struct Open {
    bool list = false;
    size_t index = 0;
    std::string key;
    std::set<std::string> keys;
  };
  std::vector<Open> open;
  const auto path = [&] {
    std::string out;
    for (const auto& level : open)
      out += level.list ? "[" + std::to_string(level.index) + "]" : (out.empty() ? "" : ".") + level.key;
    return out;
  };
  const auto next_item = [&] {
    if (!open.empty() && open.back().list) ++open.back().index;
  };
  const nlohmann::json::parser_callback_t check = [&](int, nlohmann::json::parse_event_t event,
                                                      nlohmann::json& parsed) {
    using Event = nlohmann::json::parse_event_t;
    if (event == Event::object_start || event == Event::array_start) {
      open.emplace_back();
      open.back().list = event == Event::array_start;
    }
    if (event == Event::object_end || event == Event::array_end) {
      open.pop_back();
      next_item();
    }
    if (event == Event::value) next_item();
    if (event == Event::key) {
      open.back().key = parsed.get<std::string>();
      ARC_CHECK(open.back().keys.insert(open.back().key).second, source, ": ", path(),
                ": the key appears twice; keep one");
    }
    return true;
  };
  try {
    return nlohmann::json::parse(text, check);
  } catch (const nlohmann::json::exception& error) {
    // "[json.exception.parse_error.101] parse error at line 3, column 2: ..." without the bracket (a
    // number past a double's range is an out_of_range error of the parse).
    const std::string what = error.what();
    throw Error("config file '" + source + "' is not valid JSON: " + what.substr(what.find(']') + 2) +
                "; check its syntax");
  }
}

}  // namespace arc
