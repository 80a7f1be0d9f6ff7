// ClusterEnvironment defaults, detection and the helpers that read launcher variables.
#include <arc/strategies/cluster/cluster_environment.h>

#include <arc/base/error.h>
#include <arc/strategies/cluster/kubeflow_environment.h>
#include <arc/strategies/cluster/local_environment.h>
#include <arc/strategies/cluster/lsf_environment.h>
#include <arc/strategies/cluster/mpi_environment.h>
#include <arc/strategies/cluster/slurm_environment.h>
#include <arc/strategies/cluster/torchelastic_environment.h>
#include <arc/strategies/detail/rank_processes.h>

#include <csignal>
#include <cstdlib>
#include <utility>

namespace arc::cluster {
namespace {

const std::vector<std::pair<std::string, int>> kRequeueSignals = {
    {"SIGUSR1", SIGUSR1}, {"SIGUSR2", SIGUSR2}, {"SIGHUP", SIGHUP}, {"SIGALRM", SIGALRM}};

}  // namespace

std::vector<std::string> requeue_signal_names() {
  std::vector<std::string> names;
  for (const auto& [name, number] : kRequeueSignals) names.push_back(name);
  return names;
}

int requeue_signal_number(const std::string& name) {
  for (const auto& [known, number] : kRequeueSignals)
    if (known == name) return number;
  throw Error(unknown_name_message("requeue_signal", name, requeue_signal_names()));
}

int64_t ClusterEnvironment::local_world_size() const { return world_size(); }

std::string ClusterEnvironment::no_launcher_reason() const {
  return "no launcher's variables were found (cluster environment '" + name() +
         "'); start the program under a launcher, or use strategy 'ddp_spawn' to start the processes from here";
}

void ClusterEnvironment::validate(int64_t devices, int64_t num_nodes) const {
  const int64_t expected = devices * num_nodes;
  ARC_CHECK(world_size() == expected, "the ", name(), " launch has ", world_size(), " processes, but devices=", devices,
            " x num_nodes=", num_nodes, " asks for ", expected, "; start ", expected,
            " processes or set devices and num_nodes to match the launch");
  ARC_CHECK(global_rank() >= 0 && global_rank() < world_size(), "rank ", global_rank(), " is outside world size ",
            world_size(), " (cluster environment '", name(), "' reads them from ", rank_variables(),
            "); each process needs a rank from 0 to ", world_size() - 1,
            ", and the world size its launch's process count");
}

std::string ClusterEnvironment::requeue_job() const {
  ARC_FAIL("the ", name(), " launcher cannot requeue a job; resubmit it to resume from the saved checkpoint");
}

// requeue_job() says why this launcher cannot.
void ClusterEnvironment::requeue() const { requeue_job(); }

std::optional<std::string> env(const std::string& name) {
  const char* value = std::getenv(name.c_str());
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

int64_t env_int(const std::string& name) {
  const auto value = env(name);
  ARC_CHECK(value.has_value(), "environment variable ", name, " is not set; the launcher should set it, ",
            "or export it by hand");
  char* end = nullptr;
  const long long parsed = std::strtoll(value->c_str(), &end, 10);
  ARC_CHECK(*end == '\0', "environment variable ", name, "='", *value, "' is not an integer; fix or unset it");
  return parsed;
}

int64_t env_int_or(const std::string& name, int64_t fallback) { return env(name) ? env_int(name) : fallback; }

std::optional<int64_t> master_port() {
  if (!env("MASTER_PORT")) return std::nullopt;
  const int64_t port = env_int("MASTER_PORT");
  ARC_CHECK(port > 0 && port < 65536, "MASTER_PORT=", port, " is not a TCP port; use 1..65535");
  return port;
}

int64_t required_master_port(const std::string& launcher) {
  const auto port = master_port();
  ARC_CHECK(port.has_value(), "MASTER_PORT is not set; ", launcher, " sets it, so check the launch, or export it");
  return *port;
}

std::string first_host(const std::string& nodelist) {
  // Split at the first comma outside brackets: "rack[1-2],x" → "rack[1-2]".
  int depth = 0;
  size_t end = nodelist.size();
  for (size_t i = 0; i < nodelist.size(); ++i) {
    if (nodelist[i] == '[') ++depth;
    if (nodelist[i] == ']') --depth;
    if (nodelist[i] == ',' && depth == 0) {
      end = i;
      break;
    }
  }
  const std::string first = nodelist.substr(0, end);
  const auto open = first.find('[');
  if (open == std::string::npos) return first;
  const auto close = first.find(']', open);
  ARC_CHECK(close != std::string::npos, "host list '", nodelist, "' has an unclosed '['; fix the node list, ",
            "or set MASTER_ADDR");
  std::string range = first.substr(open + 1, close - open - 1);
  range = range.substr(0, range.find_first_of(",-"));
  return first.substr(0, open) + range + first.substr(close + 1);
}

Registry<ClusterEnvironment, const SlurmEnvironmentOptions&>& cluster_registry() {
  using Requeue = const SlurmEnvironmentOptions&;
  static Registry<ClusterEnvironment, Requeue> registry = [] {
    Registry<ClusterEnvironment, Requeue> r("cluster environment");
    r.add("local", [](Requeue) { return std::make_shared<LocalEnvironment>(); });
    r.add_class<SlurmEnvironment>("slurm");
    r.add("torchelastic", [](Requeue) { return std::make_shared<TorchElasticEnvironment>(); });
    r.add("mpi", [](Requeue) { return std::make_shared<MpiEnvironment>(); });
    r.add("lsf", [](Requeue) { return std::make_shared<LsfEnvironment>(); });
    r.add("kubeflow", [](Requeue) { return std::make_shared<KubeflowEnvironment>(); });
    return r;
  }();
  return registry;
}

std::shared_ptr<ClusterEnvironment> detect(const SlurmEnvironmentOptions& requeue) {
  if (TorchElasticEnvironment::detect()) return std::make_shared<TorchElasticEnvironment>();
  if (SlurmEnvironment::detect()) return std::make_shared<SlurmEnvironment>(requeue);
  if (LsfEnvironment::detect()) return std::make_shared<LsfEnvironment>();
  if (MpiEnvironment::detect()) return std::make_shared<MpiEnvironment>();
  if (KubeflowEnvironment::detect()) return std::make_shared<KubeflowEnvironment>();
  return std::make_shared<LocalEnvironment>();
}

std::string auto_strategy(int64_t devices, int64_t num_nodes) {
  if (devices == 1 && num_nodes == 1) return "single_device";
  if (env(kSpawnChildVariable)) return "ddp_spawn";
  return num_nodes > 1 || detect()->creates_processes_externally() ? "ddp" : "ddp_spawn";
}

StrategyName parse_strategy_name(const std::string& text) {
  for (const bool value : {true, false}) {
    const std::string suffix = std::string("_find_unused_parameters_") + (value ? "true" : "false");
    if (text.size() > suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0)
      return {text.substr(0, text.size() - suffix.size()), value};
  }
  return {text, std::nullopt};
}

}  // namespace arc::cluster
