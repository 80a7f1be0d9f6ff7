// The `arc` tool's own launcher. The tool is two programs: `arc`, which loads no LibTorch, and
// `arc-engine`, which does the work. For a ddp_spawn run on this machine's CPU, `arc` starts every
// rank of the engine at once, so that no rank waits for another to load LibTorch before it starts
// loading its own; anything else it hands to the engine unchanged (exec).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace arc::cli {

/// The number of ranks the launcher starts for `args` (argv without the program): the devices
/// of a train/validate/test/predict command whose config asks for ddp_spawn on the CPU, on one
/// node. 0 for everything else, and for a command line or config the engine should judge (it
/// reports errors; a ddp_spawn it runs itself is only slower to start).
int64_t spawn_world(const std::vector<std::string>& args);

/// Starts `world` ranks of `engine` with `args`, lets rank 0 pass the rendezvous port to the
/// others, passes SIGTERM and SIGHUP on to them (Ctrl-C reaches them from the terminal), and ends them all when one
/// fails, naming its rank and cause. Returns the exit status: 0 when every rank succeeded.
int run_ranks(const std::string& engine, const std::vector<std::string>& args, int64_t world);

}  // namespace arc::cli
