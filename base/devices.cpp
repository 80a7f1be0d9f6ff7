// Devices: parsing Lightning's forms of the `devices` flag.
#include <arc/base/devices.h>

#include <arc/base/error.h>

#include <nlohmann/json.hpp>

#include <cstdlib>
#include <sstream>

namespace arc {
namespace {

const char* const kForms = "\"auto\", a count (-1 = all), a list of indices such as [0, 1], or \"0,1\"";

// The whole of `text` as an integer, or false.
bool read_integer(const std::string& text, int64_t* value) {
  if (text.empty()) return false;
  char* end = nullptr;
  *value = std::strtoll(text.c_str(), &end, 10);
  return *end == '\0';
}

}  // namespace

Devices Devices::parse(const std::string& text, const std::string& what) {
  if (text == "auto") return {};
  int64_t count = 0;
  // As Lightning: a string without a comma is a count, with commas a list of indices.
  if (text.find(',') == std::string::npos) {
    ARC_CHECK(read_integer(text, &count), what, " must be ", kForms, ", got \"", text, "\"");
    return Devices(count);
  }
  std::vector<int64_t> ids;
  std::stringstream parts(text);
  std::string part;
  while (std::getline(parts, part, ',')) {
    int64_t id = 0;
    ARC_CHECK(read_integer(part, &id) && id >= 0, what, " lists device indices, which must be integers >= 0, got \"",
              text, "\"; write ", kForms);
    ids.push_back(id);
  }
  return Devices(std::move(ids));
}

Devices Devices::from_json(const nlohmann::json& value, const std::string& key) {
  if (value.is_number_integer()) return Devices(value.get<int64_t>());
  if (value.is_string()) return parse(value.get<std::string>(), "config key '" + key + "'");
  ARC_CHECK(value.is_array(), "config key '", key, "' must be ", kForms, ", got ", value.dump());
  std::vector<int64_t> ids;
  for (const auto& item : value) {
    ARC_CHECK(item.is_number_integer() && item.get<int64_t>() >= 0, "config key '", key,
              "' lists device indices, which must be integers >= 0, got ", value.dump());
    ids.push_back(item.get<int64_t>());
  }
  return Devices(std::move(ids));
}

nlohmann::json Devices::to_json() const {
  if (is_auto) return "auto";
  if (!indices.empty()) return indices;
  return count;
}

int64_t Devices::known_count() const {
  if (is_auto || count == -1) return 0;
  return count;
}

}  // namespace arc
