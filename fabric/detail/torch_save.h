// torch.save's file format written from C++: a zip archive of a pickle whose dicts and lists are
// Python's own, which torch.load reads with weights_only=True (PyTorch's default since 2.6).
#pragma once

#include <arc/base/output_file.h>

#include <ATen/core/ivalue.h>

namespace arc::detail {

/// Writes `value` (tensors, and dicts, lists and plain values of them) to `file` as torch.save
/// would, each tensor's bytes straight from its storage. LibTorch's pickle_save wraps dicts and
/// lists in torch.jit._pickle.restore_type_tag, which torch.load refuses with weights_only=True;
/// this writes them untagged. The caller commits the file.
void torch_save(const c10::IValue& value, OutputFile& file);

}  // namespace arc::detail
