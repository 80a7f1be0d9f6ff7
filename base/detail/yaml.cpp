// to_yaml and from_yaml.
#include <arc/base/detail/yaml.h>

#include <arc/base/error.h>

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <regex>
#include <sstream>
#include <vector>

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
  // A number outside a double's range is an error, not infinity or 0: JSON, which configs become,
  // has no infinity.
  const auto real_number = [&] {
    try {
      return std::stod(text);
    } catch (const std::out_of_range&) {
      ARC_FAIL(at, ": ", text, " is outside what a double holds (magnitudes from about 2.2e-308 to 1.8e308); ",
               "write a number within it, or quote it for the text");
    }
  };
  if (std::regex_match(text, integer)) {
    try {
      return std::stoll(text);
    } catch (const std::out_of_range&) {
      return real_number();
    }
  }
  if (std::regex_match(text, real)) return real_number();
  ARC_CHECK(!std::regex_match(text, yaml11_bool), at, ": '", text,
            "' is a boolean in YAML 1.1 but text in YAML 1.2; write true or false, or quote it for the text");
  return text;
}

// What `node` is, for messages.
const char* kind(const YAML::Node& node) {
  return node.IsMap() ? "a mapping" : node.IsSequence() ? "a list" : node.IsScalar() ? "a scalar" : "empty";
}

// PyYAML's merge key (YAML 1.1's `<<: *defaults`), which LightningCLI's configs may use: a plain `<<`.
bool is_merge_key(const YAML::Node& key) { return key.Tag() != "!" && key.Scalar() == "<<"; }

void merge(nlohmann::json& out, const YAML::Node& value, const std::string& source, const std::string& path);

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
      std::vector<YAML::Node> merged;
      for (const auto& item : node) {
        ARC_CHECK(item.first.IsScalar(), where(source, item.first, path), ": a key is ", kind(item.first),
                  "; keys must be plain names such as max_epochs");
        if (is_merge_key(item.first)) {
          merged.push_back(item.second);
          continue;
        }
        const std::string name = item.first.Scalar();
        const std::string child = path.empty() ? name : path + "." + name;
        ARC_CHECK(!out.contains(name), where(source, item.first, child), ": the key appears twice; keep one");
        out[name] = convert(item.second, source, child);
      }
      for (const auto& value : merged) merge(out, value, source, path);
      return out;
    }
  }
  return nullptr;
}

// Adds to `out` the keys of the mapping (or list of mappings) `value` of a merge key that `out` does
// not have: the mapping's own keys win, and of several mappings the earlier one.
void merge(nlohmann::json& out, const YAML::Node& value, const std::string& source, const std::string& path) {
  const std::string at = where(source, value, path.empty() ? "<<" : path + ".<<");
  const auto merge_one = [&](const YAML::Node& mapping) {
    ARC_CHECK(mapping.IsMap(), at,
              ": the merge key << takes a mapping or a list of mappings (<<: *defaults or <<: "
              "[*a, *b]), got ",
              kind(mapping));
    const auto entries = convert(mapping, source, path);
    for (const auto& [name, item] : entries.items())
      if (!out.contains(name)) out[name] = item;
  };
  if (!value.IsSequence()) return merge_one(value);
  for (size_t i = 0; i < value.size(); ++i) merge_one(value[i]);
}

// Whether line `line` (from 1) of `text` has a tab in its indentation.
bool indents_with_tab(const std::string& text, int line) {
  std::istringstream lines(text);
  std::string content;
  for (int i = 0; i < line; ++i)
    if (!std::getline(lines, content)) return false;
  const auto indentation = content.substr(0, content.find_first_not_of(" \t"));
  return indentation.find('\t') != std::string::npos;
}

// The documents of a YAML text, as parse events tell them. yaml-cpp's LoadAll never returns from a
// text where a "," stands where a document's value begins (each call yields an empty document
// without moving on); document_values makes that an error.
class DocumentStarts : public YAML::EventHandler {
 public:
  void OnDocumentStart(const YAML::Mark& mark) override {
    starts.push_back(mark);
    values.push_back(mark);
    awaiting_value = true;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& mark, YAML::anchor_t) override { value_at(mark); }
  void OnAlias(const YAML::Mark& mark, YAML::anchor_t) override { value_at(mark); }
  void OnScalar(const YAML::Mark& mark, const std::string&, YAML::anchor_t, const std::string&) override {
    value_at(mark);
  }
  void OnSequenceStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    value_at(mark);
  }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& mark, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {
    value_at(mark);
  }
  void OnMapEnd() override {}

  /// Where each document starts (its "---", if any), and where its value does.
  std::vector<YAML::Mark> starts, values;

 private:
  void value_at(const YAML::Mark& mark) {
    if (awaiting_value) values.back() = mark;
    awaiting_value = false;
  }
  bool awaiting_value = false;
};

// Where the value of each document of `text` begins, reading no further than a second document.
std::vector<YAML::Mark> document_values(const std::string& text, const std::string& source) {
  std::istringstream in(text);
  YAML::Parser parser(in);
  DocumentStarts documents;
  while (documents.starts.size() < 2 && parser.HandleNextDocument(documents)) {
    const auto& starts = documents.starts;
    const auto at = static_cast<size_t>(starts.back().pos);
    ARC_CHECK(starts.size() < 2 || starts[0].pos != starts[1].pos, source, ":", starts.back().line + 1,
              ": not valid YAML (a value cannot begin with '", at < text.size() ? text.substr(at, 1) : "",
              "'); check its syntax");
  }
  return documents.values;
}

// The length of the UTF-8 sequence that starts at `at`, or 0 when none does (RFC 3629's table).
size_t utf8_sequence(const std::string& text, size_t at) {
  const auto byte = [&](size_t i) { return i < text.size() ? static_cast<unsigned char>(text[i]) : 0u; };
  const auto in = [](unsigned value, unsigned low, unsigned high) { return value >= low && value <= high; };
  const unsigned first = byte(at), second = byte(at + 1);
  if (first < 0x80) return 1;
  if (in(first, 0xC2, 0xDF)) return in(second, 0x80, 0xBF) ? 2 : 0;
  const unsigned low = first == 0xE0 ? 0xA0 : first == 0xF0 ? 0x90 : 0x80;
  const unsigned high = first == 0xED ? 0x9F : first == 0xF4 ? 0x8F : 0xBF;
  size_t length = 0;
  if (in(first, 0xE0, 0xEF)) length = 3;
  if (in(first, 0xF0, 0xF4)) length = 4;
  if (length == 0 || !in(second, low, high)) return 0;
  for (size_t i = 2; i < length; ++i)
    if (!in(byte(at + i), 0x80, 0xBF)) return 0;
  return length;
}

}  // namespace

void check_utf8(const std::string& text, const std::string& source) {
  for (size_t at = 0; at < text.size();) {
    const size_t length = utf8_sequence(text, at);
    if (length == 0) {
      char hex[8];
      std::snprintf(hex, sizeof(hex), "0x%02X", static_cast<unsigned char>(text[at]));
      ARC_FAIL(source, ":", std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(at), '\n') + 1,
               ": not UTF-8 text (byte ", hex, " at byte ", at, "); write it in UTF-8");
    }
    at += length;
  }
}

nlohmann::json from_yaml(const std::string& text, const std::string& source) {
  check_utf8(text, source);
  YAML::Node document;
  std::vector<YAML::Mark> starts;
  try {
    starts = document_values(text, source);
    if (starts.size() == 1) document = YAML::Load(text);
  } catch (const YAML::Exception& error) {
    const int line = error.mark.line + 1;
    throw Error(source + ":" + std::to_string(line) + ": not valid YAML (" + error.msg + "); " +
                (indents_with_tab(text, line) ? "YAML indents with spaces, and this line indents with a tab"
                                              : "check its syntax"));
  }
  // As PyYAML's safe_load, which LightningCLI reads configs with: a second document is an error, not
  // keys silently left out.
  ARC_CHECK(starts.size() <= 1, source, ":", starts.size() < 2 ? 0 : starts[1].line + 1,
            ": a second YAML document begins here (after ---); a config is one document: put its keys in the "
            "first, or give it its own --config");
  return starts.empty() ? nlohmann::json() : convert(document, source, "");
}

std::string to_yaml(const nlohmann::json& value) {
  if (!value.is_structured() || value.empty()) return scalar(value) + "\n";
  std::ostringstream out;
  write(out, value, 0);
  return out.str();
}

}  // namespace arc
