// Registries of user modules and data modules, filled with one macro each, so that
// `arc train --config run.json` can build them by name from their config section.
#pragma once

#include <arc/base/config.h>
#include <arc/base/registry.h>
#include <arc/core/train_module.h>
#include <arc/data/data_module.h>

#include <map>
#include <string>

namespace arc {

/// Modules by name; each is built from its config section ("module").
Registry<TrainModule, const Config&>& module_registry();
/// Data modules by name; each is built from its config section ("data").
Registry<DataModule, const Config&>& data_module_registry();
/// The data module a registered module trains on unless the config names another ("" if none).
std::string default_data_module(const std::string& module_name);

namespace detail {
/// Records `data` ("" for none) as module `name`'s default data module; returns true.
bool set_default_data_module(const std::string& name, const std::string& data);
}  // namespace detail

}  // namespace arc

/// Registers `Class` (constructible from `const arc::Config&`) as module "name", optionally with
/// the name of its default data module: ARC_REGISTER_MODULE(MyNet, "my_net", "my_data").
#define ARC_REGISTER_MODULE(Class, ...)                                                     \
  static const bool arc_module_registered_##Class =                                         \
      ::arc::module_registry().add_class<Class>(::arc::detail::module_name(__VA_ARGS__)) && \
      ::arc::detail::set_default_data_module(::arc::detail::module_name(__VA_ARGS__),       \
                                             ::arc::detail::module_default_data(__VA_ARGS__))

/// Registers `Class` (constructible from `const arc::Config&`) as data module "name".
#define ARC_REGISTER_DATA_MODULE(Class, name) ARC_REGISTER(data_module, ::arc::data_module_registry(), Class, name)

namespace arc::detail {
inline std::string module_name(const std::string& name, const std::string& = "") { return name; }
inline std::string module_default_data(const std::string&, const std::string& data = "") { return data; }
}  // namespace arc::detail
