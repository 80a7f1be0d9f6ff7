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

bool add_module(const std::string& name, Registry<TrainModule, const Config&>::Factory factory,
                const std::string& data) {
  module_registry().add(name, std::move(factory));
  if (!data.empty()) default_data()[name] = data;
  return true;
}

bool add_data_module(const std::string& name, Registry<DataModule, const Config&>::Factory factory) {
  data_module_registry().add(name, std::move(factory));
  return true;
}

}  // namespace detail
}  // namespace arc
