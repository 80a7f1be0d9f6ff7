// Strict config sections and dotted-path overrides.
#include <arc/base/config.h>

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

std::string Config::qualified(const std::string& key) const { return path_.empty() ? key : path_ + "." + key; }

void Config::finish() const {
  const std::vector<std::string> allowed(read_.begin(), read_.end());
  for (const auto& item : values_.items()) {
    if (read_.count(item.key()) > 0) continue;
    std::string message = "unknown config key '" + qualified(item.key()) + "'";
    const std::string suggestion = closest_match(item.key(), allowed);
    if (!suggestion.empty()) message += "; did you mean '" + suggestion + "'?";
    throw Error(message + (suggestion.empty() ? "; " : " ") + "known keys in '" + path_ + "': " + join(allowed));
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

void set_dotted(nlohmann::json& root, const std::string& path, const std::string& text) {
  ARC_CHECK(!path.empty() && path.front() != '.' && path.back() != '.',
            "--set needs key=value with a dotted key such as trainer.max_epochs=3, got '", path, "'");
  nlohmann::json* node = &root;
  size_t begin = 0;
  while (true) {
    const size_t dot = path.find('.', begin);
    const std::string part = path.substr(begin, dot - begin);
    ARC_CHECK(!part.empty(), "--set key '", path, "' has an empty part; write it as section.key");
    if (node->is_null()) *node = nlohmann::json::object();
    ARC_CHECK(node->is_object(), "--set key '", path, "': '", part, "' is inside a value that is not an object");
    if (dot == std::string::npos) {
      (*node)[part] = nlohmann::json::parse(text, nullptr, false);
      if ((*node)[part].is_discarded()) (*node)[part] = text;
      return;
    }
    node = &(*node)[part];
    begin = dot + 1;
  }
}

}  // namespace arc
