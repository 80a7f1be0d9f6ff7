// Running a short external command (scontrol) from inside a training process: spawned without
// fork, waited for with a deadline, killed when it overruns.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace arc {

/// Runs `argv` (found on PATH) and returns its exit code; an arc::Error when it cannot start,
/// is killed by a signal, or runs past `timeout` (it is then killed).
int run_program(const std::vector<std::string>& argv, std::chrono::milliseconds timeout);

}  // namespace arc
