// Config files (YAML and JSON) as `arc fit --config <file> --print_config` reads them: the parsers,
// LightningCLI's sections and class_path/init_args, every trainer option, the module's and data's
// init_args, and init_weights specifications.
// Input: a format byte (even: YAML, odd: JSON), then the file's text.
#include "fuzz_target.h"
#include "run_cli.h"

ARC_FUZZ_TARGET(config) {
  if (input.empty()) return;
  const auto path =
      arc::fuzz::scratch_file(static_cast<uint8_t>(input[0]) % 2 == 0 ? "fuzzed.yaml" : "fuzzed.json", input.substr(1));
  arc::fuzz::run_cli({"fit", "--print_config", "--config", path});
}
