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

  /// Registers `factory` under `name`; registering a name twice is an error.
  void add(const std::string& name, Factory factory) {
    ARC_CHECK(factories_.count(name) == 0, what_, " '", name, "' is registered twice; give one of them another name");
    factories_.emplace(name, std::move(factory));
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
