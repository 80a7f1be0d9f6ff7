// to_yaml and from_yaml.
#include <arc/base/yaml.h>

#include <arc/base/error.h>

#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include <regex>
#include <sstream>

namespace arc {
namespace {

bool is_empty_container(const nlohmann::json& value) { return value.is_structured() && value.empty(); }

// A scalar on one line: strings in double quotes with JSON's escapes, which YAML reads the same.
std::string scalar(const nlohmann::json& value) {
  if (value.is_null()) return "null";
  if (value.is_object()) return "{}";
  if (value.is_array()) return "[]";
  return value.dump();
}

std::string key(const std::string& name) {
  static const std::regex plain("[A-Za-z_][A-Za-z0-9_.-]*");
  return std::regex_match(name, plain) ? name : nlohmann::json(name).dump();
}

void write(std::ostringstream& out, const nlohmann::json& value, int indent) {
  const std::string pad(static_cast<size_t>(indent), ' ');
  if (value.is_object()) {
    for (const auto& [name, item] : value.items()) {
      out << pad << key(name) << ":";
      if (item.is_structured() && !is_empty_container(item)) {
        out << "\n";
        write(out, item, indent + 2);
      } else {
        out << " " << scalar(item) << "\n";
      }
    }
    return;
  }
  for (const auto& item : value) {
    if (item.is_structured() && !is_empty_container(item)) {
      // The item's first line follows the dash; the rest align with it.
      std::ostringstream nested;
      write(nested, item, indent + 2);
      out << pad << "- " << nested.str().substr(static_cast<size_t>(indent) + 2);
    } else {
      out << pad << "- " << scalar(item) << "\n";
    }
  }
}

// Where a YAML node is, for messages.
std::string where(const std::string& source, const YAML::Node& node, const std::string& path) {
  return source + ":" + std::to_string(node.Mark().line + 1) + ": " + (path.empty() ? "the document" : path);
}

// A plain scalar by YAML 1.2's core schema.
nlohmann::json resolve(const std::string& text, const std::string& at) {
  static const std::regex null_value("null|Null|NULL|~|");
  static const std::regex true_value("true|True|TRUE");
  static const std::regex false_value("false|False|FALSE");
  static const std::regex integer("[-+]?[0-9]+");
  static const std::regex real("[-+]?(\\.[0-9]+|[0-9]+(\\.[0-9]*)?)([eE][-+]?[0-9]+)?");
  static const std::regex yaml11_bool("y|Y|yes|Yes|YES|n|N|no|No|NO|on|On|ON|off|Off|OFF");
  if (std::regex_match(text, null_value)) return nullptr;
  if (std::regex_match(text, true_value)) return true;
  if (std::regex_match(text, false_value)) return false;
  if (std::regex_match(text, integer)) {
    try {
      return std::stoll(text);
    } catch (const std::out_of_range&) {
      return std::stod(text);
    }
  }
  if (std::regex_match(text, real)) return std::stod(text);
  ARC_CHECK(!std::regex_match(text, yaml11_bool), at, ": '", text,
            "' is a boolean in YAML 1.1 but text in YAML 1.2; write true or false, or quote it for the text");
  return text;
}

nlohmann::json convert(const YAML::Node& node, const std::string& source, const std::string& path) {
  switch (node.Type()) {
    case YAML::NodeType::Null:
    case YAML::NodeType::Undefined:
      return nullptr;
    case YAML::NodeType::Scalar:
      // "!" marks a quoted (non-plain) scalar: text, whatever it reads like.
      return node.Tag() == "!" ? nlohmann::json(node.Scalar()) : resolve(node.Scalar(), where(source, node, path));
    case YAML::NodeType::Sequence: {
      nlohmann::json out = nlohmann::json::array();
      for (size_t i = 0; i < node.size(); ++i)
        out.push_back(convert(node[i], source, path + "[" + std::to_string(i) + "]"));
      return out;
    }
    case YAML::NodeType::Map: {
      nlohmann::json out = nlohmann::json::object();
      for (const auto& item : node) {
        ARC_CHECK(item.first.IsScalar(), where(source, item.first, path), ": a key is a ",
                  item.first.IsMap()        ? "mapping"
                  : item.first.IsSequence() ? "list"
                                            : "empty",
                  "; keys must be plain names such as max_epochs");
        const std::string name = item.first.Scalar();
        const std::string child = path.empty() ? name : path + "." + name;
        ARC_CHECK(!out.contains(name), where(source, item.first, child), ": the key appears twice; keep one");
        out[name] = convert(item.second, source, child);
      }
      return out;
    }
  }
  return nullptr;
}

}  // namespace

nlohmann::json from_yaml(const std::string& text, const std::string& source) {
  YAML::Node document;
  try {
    document = YAML::Load(text);
  } catch (const YAML::Exception& error) {
    throw Error(source + ":" + std::to_string(error.mark.line + 1) + ": not valid YAML (" + error.msg +
                "); check its syntax");
  }
  return convert(document, source, "");
}

std::string to_yaml(const nlohmann::json& value) {
  if (!value.is_structured() || value.empty()) return scalar(value) + "\n";
  std::ostringstream out;
  write(out, value, 0);
  return out.str();
}

}  // namespace arc
