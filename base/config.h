// Strict reading of JSON configuration sections: every key is type-checked, unknown keys are
// errors with a suggestion, and every message names the key by its dotted path.
#pragma once

#include <arc/base/error.h>

#include <nlohmann/json.hpp>

#include <cctype>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

namespace arc {

/// `text` in lower case (Lightning's callbacks take their mode names in any case).
inline std::string lowercase(std::string text) {
  for (auto& c : text) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return text;
}

/// How Config::require's message for a missing key begins and ends ("missing config key 'a.b'; add
/// it to the config"); the `arc` tool gives the flag instead for keys that its command line set.
///@{
inline constexpr const char* kMissingKey = "missing config key '";
inline constexpr const char* kAddItToTheConfig = "'; add it to the config";
///@}

/// One JSON object read key by key. Call `finish()` when done: keys never asked for are errors.
class Config {
 public:
  /// `path` is the dotted name of this section in messages ("trainer", "module").
  Config(nlohmann::json values, std::string path);

  /// An empty section that a reader goes through to say which keys it reads (keys_with_defaults):
  /// require() notes its key and gives `T{}` instead of failing, so that the keys after it are read too.
  static Config survey(std::string path);

  /// Value of `key`, or `fallback` when absent or null (null is the default, as None is for
  /// Lightning's arguments, so that LightningCLI's printed configs read). A value of another type
  /// is an error.
  template <typename T>
  T get(const std::string& key, const T& fallback) const {
    if constexpr (std::is_constructible_v<nlohmann::json, const T&>) defaults_[key] = fallback;
    const auto* value = find(key);
    return value == nullptr || value->is_null() ? fallback : convert<T>(key, *value);
  }

  /// Value of `key`, or nullopt when absent or null.
  template <typename T>
  std::optional<T> get_optional(const std::string& key) const {
    defaults_[key] = nullptr;
    const auto* value = find(key);
    if (value == nullptr || value->is_null()) return std::nullopt;
    return convert<T>(key, *value);
  }

  /// Sets `field` to the value of `key` when present and not null (an optional field: null unsets it).
  ///@{
  template <typename T>
  void read(const std::string& key, T& field) const {
    field = get<T>(key, field);
  }
  template <typename T>
  void read(const std::string& key, std::optional<T>& field) const {
    const auto fallback = field;
    if (find(key) != nullptr) field = get_optional<T>(key);
    if constexpr (std::is_constructible_v<nlohmann::json, const T&>)
      defaults_[key] = fallback ? nlohmann::json(*fallback) : nlohmann::json();
  }
  ///@}

  /// Value of `key` that must be present.
  template <typename T>
  T require(const std::string& key) const {
    required_.insert(key);
    const auto* value = find(key);
    if (value == nullptr && surveying_) return T{};
    ARC_CHECK(value != nullptr, kMissingKey, qualified(key), kAddItToTheConfig);
    return convert<T>(key, *value);
  }

  /// Seconds of `key` in Lightning's forms of a duration: seconds, "DD:HH:MM:SS" or {"days",
  /// "hours", "minutes", "seconds"}; nullopt when absent or null.
  std::optional<double> duration(const std::string& key) const;

  /// Raw JSON value of `key` (marks it as read), or nullptr when absent.
  const nlohmann::json* find(const std::string& key) const;

  /// "<path>.<key>" for messages.
  std::string qualified(const std::string& key) const;

  /// Throws for the first key that was never read, naming the allowed keys.
  void finish() const;

  /// The keys read so far, in order of name, with their defaults: "hidden=256", "lr=0.05", "name
  /// (required)" (a key read without a default alone); what a class built from a survey() reads.
  std::vector<std::string> keys_with_defaults() const;

  /// The keys asked for that the section did not hold, each with the default its reader took (keys
  /// read without a default, and required ones, left out): with the section, every value the reader
  /// used, as LightningCLI's saved configs spell them out.
  nlohmann::json defaults_taken() const;

  /// For a reader that stopped at `error` before asking for every key it knows: throws for the
  /// first key never read that looks like a misspelling of one it asked for and did not find (a
  /// misspelt key explains a missing one best), naming both and `error`. Nothing otherwise: a key
  /// not read yet may be one the reader would have asked for next.
  void finish_after(const std::string& error) const;

 private:
  template <typename T>
  T convert(const std::string& key, const nlohmann::json& value) const {
    ARC_CHECK(matches<T>(value), "config key '", qualified(key), "' must be ", type_name<T>(), ", got ", value.dump());
    return value.get<T>();
  }

  template <typename T>
  static bool matches(const nlohmann::json& value) {
    if constexpr (std::is_same_v<T, bool>) {
      return value.is_boolean();
    } else if constexpr (std::is_integral_v<T>) {
      return value.is_number_integer() && (std::is_signed_v<T> || value.get<int64_t>() >= 0);
    } else if constexpr (std::is_floating_point_v<T>) {
      return value.is_number();
    } else if constexpr (std::is_same_v<T, std::string>) {
      return value.is_string();
    } else if constexpr (std::is_same_v<T, std::vector<int64_t>>) {
      if (!value.is_array()) return false;
      for (const auto& item : value)
        if (!item.is_number_integer()) return false;
      return true;
    } else if constexpr (std::is_same_v<T, std::vector<double>>) {
      if (!value.is_array()) return false;
      for (const auto& item : value)
        if (!item.is_number()) return false;
      return true;
    } else {
      return true;
    }
  }

  template <typename T>
  static const char* type_name() {
    if constexpr (std::is_same_v<T, bool>) return "true or false";
    if constexpr (std::is_integral_v<T> && std::is_unsigned_v<T>) return "a non-negative integer";
    if constexpr (std::is_integral_v<T>) return "an integer";
    if constexpr (std::is_floating_point_v<T>) return "a number";
    if constexpr (std::is_same_v<T, std::string>) return "a string";
    if constexpr (std::is_same_v<T, std::vector<int64_t>>) return "a list of integers";
    if constexpr (std::is_same_v<T, std::vector<double>>) return "a list of numbers";
    return "a JSON value";
  }

  nlohmann::json values_;
  std::string path_;
  mutable std::set<std::string> read_;
  mutable nlohmann::json defaults_ = nlohmann::json::object();
  mutable std::set<std::string> required_;
  bool surveying_ = false;
};

/// Sets `path` ("trainer.max_epochs") in `root` to `text` parsed as JSON, or kept as a string
/// when it is not JSON; this is how `--set key=value` reaches a config. For lists of class entries
/// it takes LightningCLI's forms: "trainer.callbacks+" appends the value (a class name, an entry or
/// a list of them) to the list, a lone entry there becoming its first; and a path that goes on
/// through a list ("trainer.callbacks.patience") sets that key of the list's last entry, so that the
/// keys after "--trainer.callbacks+=EarlyStopping" are the init_args of the entry it appended. A
/// class given alone, at the top level ("optimizer=Adam") or by a class name anywhere
/// ("trainer.logger=CSVLogger"), takes keys the same way ("optimizer.lr=0.01"); an
/// entry's key goes to its init_args where it has them; and, as jsonargparse, naming an entry's class
/// again keeps its init_args (another class replaces them).
/// Returns the path set ("trainer.callbacks" for "trainer.callbacks+").
std::string set_dotted(nlohmann::json& root, const std::string& path, const std::string& text);

/// The JSON document `text` of the config file `source`, read as strictly as YAML configs are: a
/// syntax error names the line and column, and a key given twice in one object is an error naming
/// its path (rather than the last value kept silently).
nlohmann::json parse_json(const std::string& text, const std::string& source);

}  // namespace arc
