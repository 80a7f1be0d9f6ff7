// Module and data module registries.
#include <arc/core/module_registry.h>

namespace arc {
namespace {

std::map<std::string, std::string>& default_data() {
  static std::map<std::string, std::string> map;
  return map;
}

}  // namespace

Registry<TrainModule, const Config&>& module_registry() {
  static Registry<TrainModule, const Config&> registry("module");
  return registry;
}

Registry<DataModule, const Config&>& data_module_registry() {
  static Registry<DataModule, const Config&> registry("data module");
  return registry;
}

std::string default_data_module(const std::string& module_name) {
  const auto found = default_data().find(module_name);
  return found == default_data().end() ? "" : found->second;
}

namespace detail {

bool set_default_data_module(const std::string& name, const std::string& data) {
  if (!data.empty()) default_data()[name] = data;
  return true;
}

}  // namespace detail
}  // namespace arc
