// torch.save's file format written from C++: a zip archive of a pickle whose dicts and lists are
// Python's own, which torch.load reads with weights_only=True (PyTorch's default since 2.6).
#pragma once

#include <ATen/core/ivalue.h>

#include <vector>

namespace arc::detail {

/// `value` (tensors, and dicts, lists and plain values of them) as the bytes torch.save would write.
/// LibTorch's pickle_save wraps dicts and lists in torch.jit._pickle.restore_type_tag, which
/// torch.load refuses with weights_only=True; this writes them untagged.
std::vector<char> torch_save_bytes(const c10::IValue& value);

}  // namespace arc::detail
