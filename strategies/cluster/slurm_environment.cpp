// SlurmEnvironment.
#include <arc/strategies/cluster/slurm_environment.h>

#include <arc/base/detail/subprocess.h>
#include <arc/base/error.h>

#include <utility>

namespace arc::cluster {

SlurmEnvironment::SlurmEnvironment(SlurmEnvironmentOptions requeue) : requeue_(std::move(requeue)) {
  requeue_signal_number(requeue_.requeue_signal());
}

bool SlurmEnvironment::detect() { return env("SLURM_NTASKS").has_value() && env("SLURM_PROCID").has_value(); }

std::string SlurmEnvironment::main_address() const {
  if (const auto address = env("MASTER_ADDR")) return *address;
  const auto nodes = env("SLURM_NODELIST") ? env("SLURM_NODELIST") : env("SLURM_JOB_NODELIST");
  ARC_CHECK(nodes.has_value(),
            "SLURM_NODELIST is not set, so the main address is unknown; run under srun or set MASTER_ADDR");
  return first_host(*nodes);
}

// As Lightning: 15000 + the job id's last four digits, so jobs sharing a node differ.
int64_t SlurmEnvironment::main_port() const {
  if (const auto port = master_port()) return *port;
  const auto job = env("SLURM_JOB_ID");
  ARC_CHECK(job.has_value(), "SLURM_JOB_ID is not set, so the main port is unknown; run under srun or set MASTER_PORT");
  const std::string digits = job->size() > 4 ? job->substr(job->size() - 4) : *job;
  char* end = nullptr;
  const long tail = std::strtol(digits.c_str(), &end, 10);
  ARC_CHECK(*end == '\0', "SLURM_JOB_ID='", *job, "' is not numeric; set MASTER_PORT instead");
  return 15000 + tail;
}

int64_t SlurmEnvironment::world_size() const { return env_int("SLURM_NTASKS"); }
int64_t SlurmEnvironment::global_rank() const { return env_int("SLURM_PROCID"); }
int64_t SlurmEnvironment::local_rank() const { return env_int("SLURM_LOCALID"); }
int64_t SlurmEnvironment::node_rank() const { return env_int("SLURM_NODEID"); }

int64_t SlurmEnvironment::local_world_size() const {
  if (env("SLURM_NTASKS_PER_NODE")) return env_int("SLURM_NTASKS_PER_NODE");
  return world_size() / std::max<int64_t>(1, env_int_or("SLURM_NNODES", 1));
}

void SlurmEnvironment::validate(int64_t devices, int64_t num_nodes) const {
  if (env("SLURM_NTASKS_PER_NODE")) {
    const int64_t per_node = env_int("SLURM_NTASKS_PER_NODE");
    ARC_CHECK(per_node == devices, "SLURM runs ", per_node, " tasks per node but devices=", devices,
              "; set --ntasks-per-node=", devices, " to match devices=", devices, " (or devices=", per_node, ")");
  }
  if (env("SLURM_NNODES")) {
    const int64_t nodes = env_int("SLURM_NNODES");
    ARC_CHECK(nodes == num_nodes, "SLURM allocated ", nodes, " nodes but num_nodes=", num_nodes,
              "; set --nodes=", num_nodes, " or num_nodes=", nodes);
  }
  ClusterEnvironment::validate(devices, num_nodes);
}

int64_t SlurmEnvironment::restart_count() const { return env_int_or("SLURM_RESTART_COUNT", 0); }

std::optional<std::string> SlurmEnvironment::requeue_signal() const {
  if (!requeue_.auto_requeue() || !env("SLURM_JOB_ID")) return std::nullopt;
  return requeue_.requeue_signal();
}

std::string SlurmEnvironment::requeue_job() const { return "SLURM job " + env("SLURM_JOB_ID").value_or(""); }

void SlurmEnvironment::requeue() const {
  const std::string job = env("SLURM_JOB_ID").value_or("");
  int code = 0;
  try {
    code = run_program({"scontrol", "requeue", job}, std::chrono::seconds(60));
  } catch (const Error& error) {
    ARC_FAIL("'scontrol requeue ", job, "' failed (", error.what(), ")");
  }
  ARC_CHECK(code == 0, "'scontrol requeue ", job, "' failed (exit code ", code, ")");
}

}  // namespace arc::cluster
