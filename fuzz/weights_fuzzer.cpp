// Weights files from other tools: safetensors (one file, or Hugging Face's index and a shard),
// torch.save's zip of pickles (.pt) and Lightning's .ckpt, read whole and loaded into a module.
// Input: a mode byte, then
//   0: a .safetensors file;  1: a .pt file;  2: a Lightning .ckpt file;
//   3: an index's JSON text, "\n", and the bytes of the shard "shard.safetensors" beside it.
#include "fuzz_module.h"
#include "fuzz_target.h"

#include <arc/fabric/weights.h>

namespace {

std::string write_input(std::string_view input) {
  const auto body = input.substr(1);
  switch (static_cast<uint8_t>(input[0]) % 4) {
    case 0:
      return arc::fuzz::scratch_file("fuzzed.safetensors", body);
    case 1:
      return arc::fuzz::scratch_file("fuzzed.pt", body);
    case 2:
      return arc::fuzz::scratch_file("fuzzed.ckpt", body);
    default: {
      const auto newline = body.find('\n');
      arc::fuzz::scratch_file("shard.safetensors",
                              newline == std::string_view::npos ? std::string_view() : body.substr(newline + 1));
      return arc::fuzz::scratch_file("model.safetensors.index.json", body.substr(0, newline));
    }
  }
}

}  // namespace

ARC_FUZZ_TARGET(weights) {
  if (input.empty()) return;
  const auto path = write_input(input);
  arc::fuzz::rejecting([&] {
    const auto reader = arc::open_weights(path);
    for (const auto& [name, text] : reader->metadata()) (void)(name.size() + text.size());
    for (const auto& entry : reader->entries()) (void)reader->read(entry).sum();
  });
  arc::fuzz::rejecting([&] {
    arc::fuzz::FuzzModule module;
    (void)arc::load_weights(module, path, arc::LoadWeightsOptions().strict(false));
  });
}
