// Checkpoint files: the reader (header, trailer, index, checksums, every entry kind) and a Trainer's
// resume from one (parameters, optimizer and scheduler state, loop counters, RNG states).
// Input: a mode byte, then
//   0: the file's bytes as they are;
//   1: a format version byte, the index's JSON text, "\n" and the data region: the file is framed
//      around them with a valid header, trailer and index checksum, and each entry's data checksum
//      computed afresh, so that mutations reach what the checksums guard.
#include "checkpoint_file.h"
#include "fuzz_module.h"
#include "fuzz_target.h"

#include <arc/fabric/checkpoint.h>

namespace {

void read_everything(const arc::CheckpointReader& reader) {
  (void)reader.meta().dump();
  for (const auto& name : reader.top_names()) (void)reader.holds_under(name);
  for (const auto& name : reader.tensor_names()) (void)reader.tensor(name).sum();
  arc::fuzz::FuzzModule module;
  arc::fuzz::rejecting([&] { reader.load_module(module, false); });
}

}  // namespace

ARC_FUZZ_TARGET(checkpoint) {
  if (input.empty()) return;
  std::string file;
  if (input[0] == 1 && input.size() >= 2) {
    const auto body = input.substr(2);
    const auto newline = body.find('\n');
    const auto index = body.substr(0, newline);
    const auto data = newline == std::string_view::npos ? std::string_view() : body.substr(newline + 1);
    file = arc::fuzz::checkpoint_file(static_cast<uint8_t>(input[1]), std::string(index), data);
  } else {
    file = std::string(input.substr(1));
  }
  const auto path = arc::fuzz::scratch_file("fuzzed.ckpt", file);
  arc::fuzz::rejecting([&] { read_everything(arc::CheckpointReader(path)); });
  arc::fuzz::rejecting([&] { (void)arc::CheckpointReader::read_meta(path); });
  arc::fuzz::rejecting([&] {
    arc::fuzz::FuzzModule module;
    arc::Trainer trainer(arc::fuzz::fuzz_options(arc::fuzz::scratch_path("root")));
    trainer.fit(module, arc::fuzz::fuzz_data(), {}, path);
  });
}
