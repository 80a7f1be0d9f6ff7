// LocalEnvironment.
#include <arc/strategies/cluster/local_environment.h>

#include <arc/base/error.h>

namespace arc::cluster {

bool LocalEnvironment::detect() { return true; }

bool LocalEnvironment::creates_processes_externally() const { return env("LOCAL_RANK").has_value(); }

std::string LocalEnvironment::no_launcher_reason() const {
  if (!env("RANK") && !env("WORLD_SIZE")) return ClusterEnvironment::no_launcher_reason();
  return "LOCAL_RANK is not set (RANK or WORLD_SIZE is): processes started by hand need LOCAL_RANK too, each "
         "process's rank on its machine";
}

std::string LocalEnvironment::main_address() const { return env("MASTER_ADDR").value_or("127.0.0.1"); }

int64_t LocalEnvironment::main_port() const { return required_master_port("the ddp_spawn launcher"); }

int64_t LocalEnvironment::world_size() const { return env_int_or("WORLD_SIZE", 1); }
int64_t LocalEnvironment::global_rank() const { return env_int_or("RANK", 0); }
int64_t LocalEnvironment::local_rank() const { return env_int_or("LOCAL_RANK", 0); }
int64_t LocalEnvironment::node_rank() const { return env_int_or("NODE_RANK", 0); }
int64_t LocalEnvironment::local_world_size() const { return env_int_or("LOCAL_WORLD_SIZE", world_size()); }

}  // namespace arc::cluster
