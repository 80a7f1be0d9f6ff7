// AcceleratorBackend: the hardware a process computes on (cpu, cuda), Lightning's Accelerator. Named
// apart from arc::Accelerator, the deprecated name of arc::Fabric.
#pragma once

#include <arc/base/devices.h>
#include <arc/base/registry.h>

#include <c10/core/Device.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace arc {

/// Where tensors live: availability, device count and the device of each local rank.
class AcceleratorBackend {
 public:
  virtual ~AcceleratorBackend() = default;
  /// The name it is registered under ("cpu", "cuda").
  virtual std::string name() const = 0;
  /// Whether this machine has the hardware and this build supports it.
  virtual bool available() const = 0;
  /// Devices one node offers (processes for cpu).
  virtual int64_t device_count() const = 0;
  /// An error saying what is missing when this accelerator cannot run here.
  virtual void require_available() const {}
  /// Devices that `devices: "auto"` means: every GPU, one CPU process.
  virtual int64_t auto_device_count() const { return device_count(); }
  /// How many devices `devices` asks for here (a count, the indices, "auto" or -1), before any is
  /// selected; an error when the accelerator is not available.
  int64_t count(const Devices& devices) const;
  /// The devices selected by the `devices` option; an error when they cannot be had.
  virtual std::vector<c10::Device> select(const Devices& devices) const = 0;
  /// Makes `device` current for this process (e.g. cudaSetDevice).
  virtual void setup_device(c10::Device) {}
  /// Utilisation and memory figures of `device` under Lightning's names, for DeviceStatsMonitor.
  virtual std::map<std::string, double> device_stats(c10::Device device) = 0;
};

/// Accelerators by name: "cpu", "cuda" (alias "gpu").
Registry<AcceleratorBackend>& accelerator_registry();

/// The accelerator for the `accelerator` option; "auto" picks cuda when a device is present.
std::shared_ptr<AcceleratorBackend> resolve_accelerator(const std::string& name);

}  // namespace arc
