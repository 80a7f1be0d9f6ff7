// Swapped: a value held in a slot for a scope, the slot's own put back at the scope's end however it
// ends (a return, an exception).
#pragma once

#include <utility>

namespace arc {

/// Puts `slot` back as it was when it goes out of scope, holding `value` there meanwhile.
template <typename T>
class Swapped {
 public:
  Swapped(T& slot, T value) : slot_(slot), saved_(std::exchange(slot, std::move(value))) {}
  ~Swapped() { slot_ = std::move(saved_); }
  Swapped(const Swapped&) = delete;
  Swapped& operator=(const Swapped&) = delete;

 private:
  T& slot_;
  T saved_;
};

}  // namespace arc
