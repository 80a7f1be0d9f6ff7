// LibTorch 2.0 keyed optimizer state by address instead of its text; 2.4 moved autocast to per-device-type functions
// and deprecated the CPU/GPU pairs, and made the TCPStore server's libuv backend the default.
#include <arc/base/detail/torch_compat.h>

#include <ATen/autocast_mode.h>
#include <torch/optim/optimizer.h>
#include <torch/version.h>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <sstream>
#include <type_traits>

#define ARC_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) || (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

namespace arc::compat {

#if ARC_TORCH_AT_LEAST(2, 4)

bool autocast_enabled(c10::DeviceType device) { return at::autocast::is_autocast_enabled(device); }

c10::ScalarType autocast_dtype(c10::DeviceType device) { return at::autocast::get_autocast_dtype(device); }

void set_autocast(c10::DeviceType device, bool enabled, c10::ScalarType dtype) {
  at::autocast::set_autocast_enabled(device, enabled);
  at::autocast::set_autocast_dtype(device, dtype);
}

#else

bool autocast_enabled(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}

c10::ScalarType autocast_dtype(c10::DeviceType device) {
  return device == c10::DeviceType::CUDA ? at::autocast::get_autocast_gpu_dtype()
                                         : at::autocast::get_autocast_cpu_dtype();
}

void set_autocast(c10::DeviceType device, bool enabled, c10::ScalarType dtype) {
  if (device == c10::DeviceType::CUDA) {
    at::autocast::set_enabled(enabled);
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_cpu_enabled(enabled);
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
}

#endif

c10::intrusive_ptr<c10d::TCPStore> open_tcp_store(const std::string& host, c10d::TCPStoreOptions options) {
#if ARC_TORCH_AT_LEAST(2, 4)
  if (options.useLibUV) {
    try {
      return c10::make_intrusive<c10d::TCPStore>(host, options);
    } catch (const std::exception&) {
      options.useLibUV = false;
    }
  }
#endif
  return c10::make_intrusive<c10d::TCPStore>(host, options);
}

namespace {

// The key of `parameter`'s entry in a state map keyed by `Key`.
template <typename Key>
Key state_key(const at::Tensor& parameter) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;
    text << static_cast<const void*>(parameter.unsafeGetTensorImpl());
    return text.str();
  } else {
    return parameter.unsafeGetTensorImpl();
  }
}

template <typename Map>
auto state_key_in(const Map&, const at::Tensor& parameter) {
  return state_key<typename Map::key_type>(parameter);
}

}  // namespace

torch::optim::OptimizerParamState* param_state(const torch::optim::Optimizer& optimizer, const at::Tensor& parameter) {
  const auto& states = optimizer.state();
  const auto found = states.find(state_key_in(states, parameter));
  return found == states.end() ? nullptr : found->second.get();
}

void set_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& parameter,
                     std::unique_ptr<torch::optim::OptimizerParamState> state) {
  auto& states = optimizer.state();
  if (state == nullptr) {
    states.erase(state_key_in(states, parameter));
  } else {
    states[state_key_in(states, parameter)] = std::move(state);
  }
}

}  // namespace arc::compat
