// The `arc` command line through arc::cli::run with --print_config, so that everything up to the
// run itself is taken: argument parsing, LightningCLI's dotted flags, --set and += overrides,
// class_path/init_args sections, the trainer's options and the module's and data's init_args.
// Input: a subcommand byte (fit, validate, test, predict, lr_find, scale_batch_size), then
// arguments, one per line.
#include "fuzz_target.h"
#include "run_cli.h"

ARC_FUZZ_TARGET(command_line) {
  static const char* const kCommands[] = {"fit", "validate", "test", "predict", "lr_find", "scale_batch_size"};
  if (input.empty()) return;
  std::vector<std::string> args = {kCommands[static_cast<uint8_t>(input[0]) % 6], "--print_config"};
  for (auto& arg : arc::fuzz::split(input.substr(1), '\n')) {
    // Only --print_config keeps the command from running; files are the config target's.
    if (arg.find("print_config") != std::string::npos || arg.find('/') != std::string::npos ||
        arg.find('\0') != std::string::npos)
      return;
    args.push_back(arg);
  }
  arc::fuzz::run_cli(args);
}
