// LsfEnvironment.
#include <arc/strategies/cluster/lsf_environment.h>

#include <arc/base/detail/host.h>
#include <arc/base/error.h>

#include <algorithm>
#include <fstream>
#include <vector>

namespace arc::cluster {
namespace {

// Hosts of the job's tasks: the rank file lists the launch node first, then one line per task.
std::vector<std::string> task_hosts() {
  const auto path = env("LSB_DJOB_RANKFILE");
  ARC_CHECK(path.has_value(), "LSB_DJOB_RANKFILE is not set; run under an LSF job with jsrun");
  std::ifstream in(*path);
  ARC_CHECK(in.good(), "cannot read LSB_DJOB_RANKFILE='", *path, "'; check that the LSF job is still running");
  std::vector<std::string> hosts;
  std::string line;
  while (std::getline(in, line))
    if (!line.empty()) hosts.push_back(line);
  ARC_CHECK(hosts.size() >= 2, "LSB_DJOB_RANKFILE='", *path, "' lists no compute host after the launch node");
  hosts.erase(hosts.begin());
  return hosts;
}

}  // namespace

bool LsfEnvironment::detect() {
  return env("LSB_JOBID").has_value() && env("LSB_DJOB_RANKFILE").has_value() &&
         env("JSM_NAMESPACE_SIZE").has_value() && env("JSM_NAMESPACE_RANK").has_value();
}

std::string LsfEnvironment::main_address() const {
  if (const auto address = env("MASTER_ADDR")) return *address;
  return task_hosts().front();
}

// As Lightning: 10000 + the job id modulo 1000.
int64_t LsfEnvironment::main_port() const {
  if (const auto port = master_port()) return *port;
  return 10000 + env_int("LSB_JOBID") % 1000;
}

int64_t LsfEnvironment::world_size() const { return env_int("JSM_NAMESPACE_SIZE"); }
int64_t LsfEnvironment::global_rank() const { return env_int("JSM_NAMESPACE_RANK"); }
int64_t LsfEnvironment::local_rank() const { return env_int("JSM_NAMESPACE_LOCAL_RANK"); }

int64_t LsfEnvironment::node_rank() const {
  const std::string name = host_name();
  std::vector<std::string> unique;
  for (const auto& host : task_hosts())
    if (unique.empty() || unique.back() != host) unique.push_back(host);
  for (size_t i = 0; i < unique.size(); ++i)
    if (unique[i] == name) return static_cast<int64_t>(i);
  ARC_FAIL("this host '", name, "' is not in LSB_DJOB_RANKFILE; check the LSF job's host list");
}

int64_t LsfEnvironment::local_world_size() const {
  const auto hosts = task_hosts();
  const auto here = hosts[static_cast<size_t>(global_rank()) % hosts.size()];
  return std::count(hosts.begin(), hosts.end(), here);
}

}  // namespace arc::cluster
