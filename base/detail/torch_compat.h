// The one place for LibTorch 1.13 / 2.x differences: code elsewhere calls these.
#pragma once

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>
#include <c10/util/intrusive_ptr.h>

#include <memory>
#include <string>

namespace at {
class Tensor;
}

namespace torch::optim {
class Optimizer;
class OptimizerParamState;
}  // namespace torch::optim

namespace c10d {
class TCPStore;
struct TCPStoreOptions;
}  // namespace c10d

namespace arc::compat {

/// Autocast state of a device type (CPU or CUDA).
bool autocast_enabled(c10::DeviceType device);
c10::ScalarType autocast_dtype(c10::DeviceType device);
void set_autocast(c10::DeviceType device, bool enabled, c10::ScalarType dtype);

/// Opens a TCPStore client or server. From LibTorch 2.4 both ask for the libuv backend by default,
/// which builds without libuv (Debian's) refuse: a store that fails on it is opened again on the
/// classic backend, whose error, if any, is the one thrown.
c10::intrusive_ptr<c10d::TCPStore> open_tcp_store(const std::string& host, c10d::TCPStoreOptions options);

/// The state `optimizer` keeps for `parameter` (nullptr when it has none yet), and setting it
/// (nullptr removes it): LibTorch 1.x keys that map by the text of the parameter's TensorImpl address,
/// 2.x by the address.
torch::optim::OptimizerParamState* param_state(const torch::optim::Optimizer& optimizer, const at::Tensor& parameter);
void set_param_state(torch::optim::Optimizer& optimizer, const at::Tensor& parameter,
                     std::unique_ptr<torch::optim::OptimizerParamState> state);

}  // namespace arc::compat
