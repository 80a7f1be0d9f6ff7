// Name → constructor maps for accelerators, strategies, modules, data modules, callbacks and
// loggers, so that everything can be built from text.
#pragma once

#include <arc/base/error.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace arc {

/// Maps names to factories of `T`; an unknown name is an error that lists the known ones.
template <typename T, typename... Args>
class Registry {
 public:
  /// Makes a `T` from the arguments that create() passes on.
  using Factory = std::function<std::shared_ptr<T>(Args...)>;

  /// `what` names the kind of thing in messages ("strategy", "module").
  explicit Registry(std::string what) : what_(std::move(what)) {}

  /// Registers `factory` under `name`; registering a name twice is an error. Returns true, so that
  /// a registration can initialize a static (ARC_REGISTER).
  bool add(const std::string& name, Factory factory) {
    ARC_CHECK(factories_.count(name) == 0, what_, " '", name, "' is registered twice; give one of them another name");
    factories_.emplace(name, std::move(factory));
    return true;
  }

  /// Registers `Class`, constructed from create()'s arguments, under `name`.
  template <typename Class>
  bool add_class(const std::string& name) {
    return add(name, [](Args... args) { return std::make_shared<Class>(std::forward<Args>(args)...); });
  }

  /// Builds the thing registered as `name`.
  std::shared_ptr<T> create(const std::string& name, Args... args) const {
    const auto it = factories_.find(name);
    if (it == factories_.end()) throw Error(unknown_name_message(what_, name, names()));
    return it->second(std::forward<Args>(args)...);
  }

  /// Registered names, sorted.
  std::vector<std::string> names() const {
    std::vector<std::string> out;
    for (const auto& entry : factories_) out.push_back(entry.first);
    return out;
  }

 private:
  std::string what_;
  std::map<std::string, Factory> factories_;
};

}  // namespace arc

/// Registers `Class` in `registry` (an expression giving a Registry) as `name` when the program
/// starts, from any source file: what ARC_REGISTER_CALLBACK, ARC_REGISTER_LOGGER and
/// ARC_REGISTER_DATA_MODULE expand to. `kind` keeps the registrations of one class in several
/// registries apart.
#define ARC_REGISTER(kind, registry, Class, name) \
  static const bool arc_##kind##_registered_##Class = (registry).add_class<Class>(name)
