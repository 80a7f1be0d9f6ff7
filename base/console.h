// Rank-aware console output through spdlog: rank 0 speaks, other ranks only warn, and lines are
// tagged with the rank when several processes run.
#pragma once

#include <spdlog/logger.h>

#include <cstdint>
#include <exception>
#include <string>

namespace arc {

/// The console logger; `console().info(...)` is the rank-0 idiom.
spdlog::logger& console();

/// Tags lines with the rank and quiets ranks other than 0 (they keep warnings and errors).
void set_console_rank(int64_t rank, int64_t world_size);

/// Whether this process is the first of its launch, or alone: the rank a launcher gave it (ddp_spawn,
/// torchrun, srun, mpirun) is 0 or there is none. What every rank would say alike, such as a
/// warning about the config that every rank reads, is said by that process only.
bool first_of_launch();

/// What `error` says, for a user to read: a LibTorch error (c10::Error) without the C++ stack trace
/// it carries, unless TORCH_SHOW_CPP_STACKTRACES=1 asks for it, as in PyTorch.
std::string message_of(const std::exception& error);

}  // namespace arc
