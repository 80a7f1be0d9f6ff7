// Launchers' environment variables as the cluster environments read them (ranks, sizes, ports,
// SLURM and LSF host lists, LSF's rank file), and the strategy names of a `strategy` option.
// Input: lines "NAME=VALUE", for the variables the environments read (others are ignored); the
// value of LSB_DJOB_RANKFILE is the rank file's text, ";" for each line break.
#include "fuzz_target.h"

#include <arc/strategies/cluster/cluster_environment.h>

#include <algorithm>
#include <cstdlib>

namespace {

const char* const kVariables[] = {"GROUP_RANK",
                                  "JSM_NAMESPACE_LOCAL_RANK",
                                  "JSM_NAMESPACE_RANK",
                                  "JSM_NAMESPACE_SIZE",
                                  "KUBERNETES_PORT",
                                  "LOCAL_RANK",
                                  "LOCAL_WORLD_SIZE",
                                  "LSB_DJOB_RANKFILE",
                                  "LSB_JOBID",
                                  "MASTER_ADDR",
                                  "MASTER_PORT",
                                  "MPI_LOCALNRANKS",
                                  "MPI_LOCALRANKID",
                                  "NODE_RANK",
                                  "OMPI_COMM_WORLD_LOCAL_RANK",
                                  "OMPI_COMM_WORLD_LOCAL_SIZE",
                                  "OMPI_COMM_WORLD_RANK",
                                  "OMPI_COMM_WORLD_SIZE",
                                  "PMI_RANK",
                                  "PMI_SIZE",
                                  "RANK",
                                  "SLURM_JOB_ID",
                                  "SLURM_JOB_NODELIST",
                                  "SLURM_LOCALID",
                                  "SLURM_NNODES",
                                  "SLURM_NODEID",
                                  "SLURM_NODELIST",
                                  "SLURM_NTASKS",
                                  "SLURM_NTASKS_PER_NODE",
                                  "SLURM_PROCID",
                                  "SLURM_RESTART_COUNT",
                                  "TORCHELASTIC_MAX_RESTARTS",
                                  "TORCHELASTIC_RESTART_COUNT",
                                  "TORCHELASTIC_RUN_ID",
                                  "TORCHELASTIC_USE_AGENT_STORE",
                                  "WORLD_SIZE"};

// Everything an environment tells, each read on its own so that one error does not hide the rest.
void read_everything(const arc::cluster::ClusterEnvironment& environment) {
  using arc::fuzz::rejecting;
  rejecting([&] { (void)environment.no_launcher_reason(); });
  rejecting([&] { (void)environment.main_address(); });
  rejecting([&] { (void)environment.main_port(); });
  rejecting([&] { (void)environment.world_size(); });
  rejecting([&] { (void)environment.global_rank(); });
  rejecting([&] { (void)environment.local_rank(); });
  rejecting([&] { (void)environment.node_rank(); });
  rejecting([&] { (void)environment.local_world_size(); });
  rejecting([&] { (void)environment.restart_count(); });
  rejecting([&] { (void)environment.requeue_signal(); });
  rejecting([&] { (void)environment.requeue_job(); });
  for (const int64_t devices : {1, 2, 4})
    for (const int64_t nodes : {1, 2}) rejecting([&] { environment.validate(devices, nodes); });
}

}  // namespace

ARC_FUZZ_TARGET(cluster) {
  for (const char* name : kVariables) ::unsetenv(name);
  std::vector<std::string> values;
  for (const auto& line : arc::fuzz::split(input, '\n')) {
    const auto equals = line.find('=');
    if (equals == std::string::npos) continue;
    const auto name = line.substr(0, equals);
    auto value = line.substr(equals + 1);
    if (std::find(std::begin(kVariables), std::end(kVariables), name) == std::end(kVariables)) continue;
    if (value.find('\0') != std::string::npos) continue;
    values.push_back(value);
    if (name == "LSB_DJOB_RANKFILE") {
      std::replace(value.begin(), value.end(), ';', '\n');
      value = arc::fuzz::scratch_file("rankfile", value);
    }
    ::setenv(name.c_str(), value.c_str(), 1);
  }
  using arc::fuzz::rejecting;
  rejecting([&] { read_everything(*arc::cluster::detect()); });
  for (const auto& name : arc::cluster::cluster_registry().names())
    rejecting([&] {
      read_everything(*arc::cluster::cluster_registry().create(name, arc::cluster::SlurmEnvironmentOptions()));
    });
  rejecting([&] { (void)arc::cluster::auto_strategy(2, 1); });
  rejecting([&] { (void)arc::cluster::master_port(); });
  for (const auto& value : values) {
    rejecting([&] { (void)arc::cluster::first_host(value); });
    rejecting([&] { (void)arc::cluster::parse_strategy_name(value); });
    rejecting([&] { (void)arc::cluster::requeue_signal_number(value); });
  }
}
