// The `arc` tool's own launcher. The tool is two programs: `arc`, which loads no LibTorch, and
// `arc-engine`, which does the work. For a ddp_spawn run on this machine, `arc` starts every
// rank of the engine at once, so that no rank waits for another to load LibTorch before it starts
// loading its own; anything else it hands to the engine unchanged (exec).
#pragma once

#include <arc/strategies/detail/rank_processes.h>

#include <cstdint>
#include <string>
#include <vector>

namespace arc::cli {

/// What the launcher starts: `world` ranks (0: none, the engine runs alone); once one of them
/// finished, the others have the trainer's `timeout_s` to finish too.
struct SpawnPlan {
  int64_t world = 0;
  double timeout_s = 1800;
};

/// The plan for `args` (argv without the program): a rank per device of a train/validate/test/
/// predict command whose config asks for ddp_spawn (or "auto", which means it here) on one node with
/// `devices` a count (2 or more) or a list. No ranks for everything else,
/// and for a command line or config the engine should judge (it reports errors; a ddp_spawn it
/// runs itself is only slower to start).
SpawnPlan spawn_plan(const std::vector<std::string>& command_line);

/// The lines the tool prints for its ranks' errors (given in the order they arrived): each distinct
/// error once, in the order of its first report; as one process prints it ("arc: error: <message>")
/// when all `world` ranks reported it, else naming the ranks that did ("arc: error: ranks 0, 2: ...").
std::vector<std::string> rank_error_lines(const std::vector<RankError>& errors, int64_t world);

/// Starts the plan's ranks of `engine` with `args`, lets rank 0 pass the rendezvous port to the
/// others, passes SIGTERM, SIGHUP and a sent SIGINT on to them (Ctrl-C reaches them from the
/// terminal), ends them all at once on a second SIGINT, and ends them all when one fails. A rank that
/// reported its error gives the others half a second to end by themselves (a config error ends every
/// rank) and the errors are printed by rank_error_lines; one that did not is named with its cause.
/// Returns 0 when every rank succeeded, 130 when SIGINT stopped them, else the failed rank's exit
/// status (a config error is 2, as in one process; 1 when a signal ended it).
int run_ranks(const std::string& engine, const std::vector<std::string>& args, const SpawnPlan& plan);

}  // namespace arc::cli
