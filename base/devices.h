// Devices: which devices a run uses, as Lightning's `devices` flag — "auto", a count (-1 = all),
// a list of indices, or a string of either ("2", "0,1", "-1"). LibTorch-free: the `arc` launcher
// reads it too.
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

namespace arc {

/// Which devices to use: "auto", a count (-1 = all) or explicit indices. Converts from what
/// Lightning's `devices=` takes: `devices(2)`, `devices(-1)`, `devices({0, 1})`, `devices("auto")`,
/// `devices("0,1")`.
struct Devices {
  /// "auto": as many as the accelerator (or the launcher) gives.
  bool is_auto = true;
  /// How many devices (-1: all), unless is_auto.
  int64_t count = 1;
  /// The devices by index, when named so.
  std::vector<int64_t> indices;

  /// "auto".
  Devices() = default;
  /// A count; -1 means every device.
  Devices(int64_t count) : is_auto(false), count(count) {}  // NOLINT(google-explicit-constructor)
  /// Device indices.
  ///@{
  Devices(std::initializer_list<int64_t> ids) : Devices(std::vector<int64_t>(ids)) {}
  Devices(std::vector<int64_t> ids)  // NOLINT(google-explicit-constructor)
      : is_auto(false), count(static_cast<int64_t>(ids.size())), indices(std::move(ids)) {}
  ///@}
  /// Lightning's string forms: "auto", a count ("2", "-1"), or indices ("0,1"; "1," is index 1).
  ///@{
  Devices(const std::string& text) : Devices(parse(text)) {}  // NOLINT(google-explicit-constructor)
  template <size_t N>
  Devices(const char (&text)[N]) : Devices(parse(std::string(text))) {}  // NOLINT(google-explicit-constructor)
  ///@}

  /// "auto", `n` devices, or the devices of `ids`.
  ///@{
  static Devices automatic() { return {}; }
  static Devices of_count(int64_t n) { return Devices(n); }
  static Devices of_indices(std::vector<int64_t> ids) { return Devices(std::move(ids)); }
  ///@}
  /// The string forms above; anything else is an arc::Error that names `what` and the forms.
  static Devices parse(const std::string& text, const std::string& what = "devices");
  /// The JSON forms: "auto", an integer, a list of integers, or a string form; `key` names it in errors.
  static Devices from_json(const nlohmann::json& value, const std::string& key);
  /// The JSON form that from_json reads back.
  nlohmann::json to_json() const;
  /// Processes a launcher starts for these devices without asking the hardware: the count or the
  /// number of indices; 0 for "auto" and -1, which only the accelerator can count.
  int64_t known_count() const;
};

}  // namespace arc
