// torch.save's files read without Python: the zip archive's directory, then its pickle by a reader
// that builds only what torch.load(weights_only=True) builds (dicts, lists, tuples, plain values and
// tensors over the archive's storages) and refuses every other Python object, so that nothing a file
// says is ever executed.
#pragma once

#include <arc/fabric/weights.h>

#include <memory>
#include <string>

namespace arc::detail {

/// The state_dict of a file that torch.save wrote (`torch.save(model.state_dict(), path)`: a dict of
/// name -> tensor), or of a checkpoint that holds one under "state_dict" (Lightning's `.ckpt`). The
/// archive, the whole pickle and every tensor's place in its storage are checked before this
/// returns; reading a tensor later copies it from the file once.
std::unique_ptr<WeightsReader> open_torch_file(const std::string& path);

}  // namespace arc::detail
