// ARC_ARG declares an option with a default, a fluent setter and a getter, as TORCH_ARG does.
#pragma once

#include <utility>

/// `ARC_ARG(int64_t, max_steps) = -1;` gives `max_steps(v)` (returns *this; an rvalue is moved in)
/// and `max_steps()`.
#define ARC_ARG(T, name)                                          \
 public:                                                          \
  inline auto name(const T& new_##name)->decltype(*this) {        \
    this->name##_ = new_##name;                                   \
    return *this;                                                 \
  }                                                               \
  inline auto name(T&& new_##name)->decltype(*this) {             \
    this->name##_ = std::move(new_##name);                        \
    return *this;                                                 \
  }                                                               \
  inline const T& name() const noexcept { return this->name##_; } \
  inline T& name() noexcept { return this->name##_; }             \
                                                                  \
 private:                                                         \
  T name##_
