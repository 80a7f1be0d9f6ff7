// MpiEnvironment.
#include <arc/strategies/cluster/mpi_environment.h>

#include <arc/base/error.h>

#include <algorithm>

namespace arc::cluster {
namespace {

constexpr int64_t kFirstDerivedPort = 15000;
constexpr int64_t kDerivedPorts = 17000;

bool open_mpi() { return env("OMPI_COMM_WORLD_SIZE").has_value(); }

}  // namespace

bool MpiEnvironment::detect() {
  return (open_mpi() && env("OMPI_COMM_WORLD_RANK").has_value()) ||
         (env("PMI_SIZE").has_value() && env("PMI_RANK").has_value());
}

std::string MpiEnvironment::main_address() const { return env("MASTER_ADDR").value_or("127.0.0.1"); }

// Without MASTER_PORT, every rank derives the same port from the job id (OpenMPI's
// OMPI_MCA_ess_base_jobid; absent: 29500), in 15000..31999: below Linux's ephemeral ports (32768
// and up), which any outgoing connection on the machine may hold when the store opens.
int64_t MpiEnvironment::main_port() const {
  if (const auto port = master_port()) return *port;
  const auto job = env("OMPI_MCA_ess_base_jobid");
  if (!job) return 29500;
  return kFirstDerivedPort + static_cast<int64_t>(std::hash<std::string>{}(*job) % kDerivedPorts);
}

int64_t MpiEnvironment::world_size() const {
  return open_mpi() ? env_int("OMPI_COMM_WORLD_SIZE") : env_int("PMI_SIZE");
}
int64_t MpiEnvironment::global_rank() const {
  return open_mpi() ? env_int("OMPI_COMM_WORLD_RANK") : env_int("PMI_RANK");
}
std::string MpiEnvironment::rank_variables() const {
  return open_mpi() ? "OMPI_COMM_WORLD_RANK and OMPI_COMM_WORLD_SIZE" : "PMI_RANK and PMI_SIZE";
}

int64_t MpiEnvironment::local_rank() const {
  return open_mpi() ? env_int("OMPI_COMM_WORLD_LOCAL_RANK") : env_int_or("MPI_LOCALRANKID", global_rank());
}

// OpenMPI's OMPI_COMM_WORLD_NODE_RANK is a rank within the node, not the node's index, so the
// node index comes from NODE_RANK, or from the default by-slot mapping (a node's ranks are
// consecutive): the first rank on this node divided by the ranks per node.
int64_t MpiEnvironment::node_rank() const {
  if (env("NODE_RANK")) return env_int("NODE_RANK");
  return (global_rank() - local_rank()) / std::max<int64_t>(local_world_size(), 1);
}

int64_t MpiEnvironment::local_world_size() const {
  return open_mpi() ? env_int_or("OMPI_COMM_WORLD_LOCAL_SIZE", world_size())
                    : env_int_or("MPI_LOCALNRANKS", world_size());
}

}  // namespace arc::cluster
