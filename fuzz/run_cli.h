// Runs the `arc` command line in this process, for the command_line and config targets.
#pragma once

#include <string>
#include <vector>

namespace arc::fuzz {

/// arc::cli::run over `args` (after the program's name), its std::cout and std::cerr kept, not
/// printed; returns what it wrote to std::cout. A run that fails with anything but arc::Error (exit
/// code 1, "failed") is a finding: it throws std::runtime_error with what the run printed.
std::string run_cli(std::vector<std::string> args);

}  // namespace arc::fuzz
