// The one place for LibTorch 1.13 / 2.x differences: code elsewhere calls these.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

namespace arc::compat {

/// Autocast state of a device type (CPU or CUDA).
bool autocast_enabled(c10::DeviceType device);
c10::ScalarType autocast_dtype(c10::DeviceType device);
void set_autocast(c10::DeviceType device, bool enabled, c10::ScalarType dtype);

}  // namespace arc::compat
