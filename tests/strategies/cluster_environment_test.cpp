// Each cluster environment's detection and values from synthetic launcher variables.
#include <arc/base/error.h>
#include <arc/strategies/cluster/cluster_environment.h>
#include <arc/strategies/cluster/lsf_environment.h>
#include <arc/strategies/cluster/mpi_environment.h>
#include <arc/strategies/cluster/slurm_environment.h>

#include "support/errors.h"
#include "support/scratch.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <map>
#include <set>
#include <vector>

namespace arc::cluster {
namespace {

const char* kVariables[] = {"SLURM_NTASKS",
                            "SLURM_PROCID",
                            "SLURM_LOCALID",
                            "SLURM_NODEID",
                            "SLURM_NODELIST",
                            "SLURM_JOB_NODELIST",
                            "SLURM_JOB_ID",
                            "SLURM_NTASKS_PER_NODE",
                            "SLURM_NNODES",
                            "SLURM_RESTART_COUNT",
                            "TORCHELASTIC_RUN_ID",
                            "TORCHELASTIC_USE_AGENT_STORE",
                            "TORCHELASTIC_RESTART_COUNT",
                            "RANK",
                            "LOCAL_RANK",
                            "WORLD_SIZE",
                            "GROUP_RANK",
                            "LOCAL_WORLD_SIZE",
                            "MASTER_ADDR",
                            "MASTER_PORT",
                            "NODE_RANK",
                            "OMPI_COMM_WORLD_SIZE",
                            "OMPI_COMM_WORLD_RANK",
                            "OMPI_COMM_WORLD_LOCAL_RANK",
                            "OMPI_COMM_WORLD_LOCAL_SIZE",
                            "OMPI_COMM_WORLD_NODE_RANK",
                            "OMPI_MCA_ess_base_jobid",
                            "PMI_SIZE",
                            "PMI_RANK",
                            "LSB_JOBID",
                            "LSB_DJOB_RANKFILE",
                            "JSM_NAMESPACE_SIZE",
                            "JSM_NAMESPACE_RANK",
                            "JSM_NAMESPACE_LOCAL_RANK",
                            "KUBERNETES_PORT",
                            "ARC_SPAWN_CHILD"};

// Sets exactly `values` among the launcher variables for the test's duration.
class Env {
 public:
  explicit Env(const std::map<std::string, std::string>& values) {
    for (const char* name : kVariables) {
      if (const char* old = std::getenv(name)) saved_[name] = old;
      unsetenv(name);
    }
    for (const auto& [name, value] : values) setenv(name.c_str(), value.c_str(), 1);
  }
  ~Env() {
    for (const char* name : kVariables) unsetenv(name);
    for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
  }

 private:
  std::map<std::string, std::string> saved_;
};

using testing::error_of;

TEST(ClusterEnvironment, FirstHostOfEveryNodelistForm) {
  EXPECT_EQ(first_host("node[5-9]"), "node5");
  EXPECT_EQ(first_host("node[01-04,7]"), "node01");
  EXPECT_EQ(first_host("a,b"), "a");
  EXPECT_EQ(first_host("rack1-[1-3]"), "rack1-1");
  EXPECT_EQ(first_host("gpu[3,5],cpu[1-2]"), "gpu3");
  EXPECT_EQ(first_host("solo"), "solo");
  EXPECT_THROW(first_host("node[1-2"), Error);
}

TEST(ClusterEnvironment, NothingSetIsLocalWithOneProcess) {
  Env env({});
  auto found = detect();
  EXPECT_EQ(found->name(), "local");
  EXPECT_FALSE(found->creates_processes_externally());
  EXPECT_EQ(found->world_size(), 1);
  EXPECT_EQ(found->main_address(), "127.0.0.1");
}

// Lightning's choice for strategy "auto": one process runs alone; several are started here unless a
// launcher already started them.
TEST(ClusterEnvironment, AutoStrategyIsDdpUnderALauncherAndDdpSpawnWithout) {
  {
    Env env({});
    EXPECT_EQ(auto_strategy(1, 1), "single_device");
    EXPECT_EQ(auto_strategy(2, 1), "ddp_spawn");
    EXPECT_EQ(auto_strategy(1, 2), "ddp");
  }
  for (const auto& launcher : std::vector<std::map<std::string, std::string>>{
           {{"TORCHELASTIC_RUN_ID", "r"}, {"RANK", "0"}, {"LOCAL_RANK", "0"}, {"WORLD_SIZE", "2"}},
           {{"SLURM_NTASKS", "2"}, {"SLURM_PROCID", "1"}},
           {{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}, {"OMPI_MCA_ess_base_jobid", "1"}},
           {{"RANK", "1"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "2"}}}) {
    Env env(launcher);
    EXPECT_EQ(auto_strategy(2, 1), "ddp") << launcher.begin()->first;
    EXPECT_EQ(auto_strategy(1, 1), "single_device");
  }
  // A rank that ddp_spawn started has the rank variables too, and stays ddp_spawn.
  Env env({{"ARC_SPAWN_CHILD", "1"}, {"RANK", "1"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "2"}});
  EXPECT_EQ(auto_strategy(2, 1), "ddp_spawn");
}

TEST(ClusterEnvironment, Slurm) {
  Env env({{"SLURM_NTASKS", "8"},
           {"SLURM_PROCID", "5"},
           {"SLURM_LOCALID", "1"},
           {"SLURM_NODEID", "2"},
           {"SLURM_NODELIST", "node[01-04,7]"},
           {"SLURM_JOB_ID", "1234567"},
           {"SLURM_NTASKS_PER_NODE", "2"},
           {"SLURM_NNODES", "4"},
           {"SLURM_RESTART_COUNT", "3"}});
  auto found = detect();
  ASSERT_EQ(found->name(), "slurm");
  EXPECT_EQ(found->restart_count(), 3);
  EXPECT_EQ(found->world_size(), 8);
  EXPECT_EQ(found->global_rank(), 5);
  EXPECT_EQ(found->local_rank(), 1);
  EXPECT_EQ(found->node_rank(), 2);
  EXPECT_EQ(found->main_address(), "node01");
  EXPECT_EQ(found->main_port(), 15000 + 4567);
  EXPECT_EQ(found->local_world_size(), 2);
  EXPECT_NO_THROW(found->validate(2, 4));
  EXPECT_NE(error_of([&] { found->validate(4, 2); }).find("set --ntasks-per-node=4 to match devices=4"),
            std::string::npos);
  setenv("SLURM_PROCID", "8", 1);
  EXPECT_NE(error_of([&] { found->validate(2, 4); })
                .find("rank 8 is outside world size 8 (cluster environment 'slurm' reads them from SLURM_PROCID and "
                      "SLURM_NTASKS)"),
            std::string::npos);
}

TEST(ClusterEnvironment, SlurmMasterVariablesOverride) {
  Env env({{"SLURM_NTASKS", "2"},
           {"SLURM_PROCID", "0"},
           {"SLURM_LOCALID", "0"},
           {"SLURM_NODEID", "0"},
           {"SLURM_NODELIST", "a,b"},
           {"SLURM_JOB_ID", "77"},
           {"MASTER_ADDR", "10.1.2.3"},
           {"MASTER_PORT", "4000"}});
  SlurmEnvironment slurm;
  EXPECT_EQ(slurm.main_address(), "10.1.2.3");
  EXPECT_EQ(slurm.main_port(), 4000);
  // Every environment checks an explicit MASTER_PORT the same way.
  Env bad(std::map<std::string, std::string>{{"MASTER_PORT", "0"}});
  EXPECT_NE(error_of([&] { slurm.main_port(); }).find("MASTER_PORT=0 is not a TCP port; use 1..65535"),
            std::string::npos);
}

TEST(ClusterEnvironment, SlurmBadValuesAreClearErrors) {
  Env env({{"SLURM_NTASKS", "two"}, {"SLURM_PROCID", "0"}, {"SLURM_JOB_ID", "abc"}});
  SlurmEnvironment slurm;
  EXPECT_NE(error_of([&] { slurm.world_size(); }).find("SLURM_NTASKS='two' is not an integer"), std::string::npos);
  EXPECT_NE(error_of([&] { slurm.local_rank(); }).find("SLURM_LOCALID is not set"), std::string::npos);
  EXPECT_NE(error_of([&] { slurm.main_address(); }).find("SLURM_NODELIST is not set"), std::string::npos);
  EXPECT_NE(error_of([&] { slurm.main_port(); }).find("SLURM_JOB_ID='abc' is not numeric"), std::string::npos);
}

TEST(ClusterEnvironment, TorchElasticWinsOverSlurm) {
  Env env({{"TORCHELASTIC_RUN_ID", "x"},
           {"RANK", "3"},
           {"LOCAL_RANK", "1"},
           {"WORLD_SIZE", "4"},
           {"GROUP_RANK", "1"},
           {"LOCAL_WORLD_SIZE", "2"},
           {"MASTER_ADDR", "h0"},
           {"MASTER_PORT", "29400"},
           {"SLURM_NTASKS", "4"},
           {"SLURM_PROCID", "0"}});
  auto found = detect();
  ASSERT_EQ(found->name(), "torchelastic");
  EXPECT_EQ(found->global_rank(), 3);
  EXPECT_EQ(found->node_rank(), 1);
  EXPECT_EQ(found->local_world_size(), 2);
  EXPECT_EQ(found->main_address(), "h0");
  EXPECT_EQ(found->main_port(), 29400);
  EXPECT_FALSE(found->launcher_hosts_store());
  EXPECT_EQ(found->restart_count(), 0);
}

TEST(ClusterEnvironment, TorchrunAgentStoreAndRestarts) {
  Env env({{"TORCHELASTIC_RUN_ID", "x"},
           {"RANK", "0"},
           {"LOCAL_RANK", "0"},
           {"WORLD_SIZE", "2"},
           {"TORCHELASTIC_USE_AGENT_STORE", "True"},
           {"TORCHELASTIC_RESTART_COUNT", "2"}});
  auto found = detect();
  EXPECT_TRUE(found->launcher_hosts_store());
  EXPECT_EQ(found->restart_count(), 2);
  Env bad(std::map<std::string, std::string>{{"TORCHELASTIC_RESTART_COUNT", "two"}});
  EXPECT_NE(error_of([&] { found->restart_count(); }).find("TORCHELASTIC_RESTART_COUNT='two'"), std::string::npos);
}

TEST(ClusterEnvironment, OpenMpiAndPmi) {
  {
    Env env({{"OMPI_COMM_WORLD_SIZE", "4"},
             {"OMPI_COMM_WORLD_RANK", "2"},
             {"OMPI_COMM_WORLD_LOCAL_RANK", "0"},
             {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
             {"OMPI_COMM_WORLD_NODE_RANK", "0"},
             {"MASTER_PORT", "5000"}});
    auto found = detect();
    ASSERT_EQ(found->name(), "mpi");
    EXPECT_EQ(found->world_size(), 4);
    EXPECT_EQ(found->global_rank(), 2);
    EXPECT_EQ(found->node_rank(), 1) << "ranks 2 and 3 of 4, two per node, are on node 1";
    EXPECT_EQ(found->local_world_size(), 2);
    EXPECT_EQ(found->main_port(), 5000);
  }
  {
    Env env({{"PMI_SIZE", "3"}, {"PMI_RANK", "1"}});
    auto found = detect();
    ASSERT_EQ(found->name(), "mpi");
    EXPECT_EQ(found->world_size(), 3);
    EXPECT_EQ(found->global_rank(), 1);
    EXPECT_EQ(found->main_address(), "127.0.0.1");
  }
}

// Without MASTER_PORT the ranks of one OpenMPI job agree on a port from its job id, below the
// ephemeral ports (32768 and up) that outgoing connections take: one of them once held the port.
TEST(ClusterEnvironment, OpenMpiDerivesOnePortPerJobBelowTheEphemeralRange) {
  std::set<int64_t> ports;
  for (int job = 0; job < 2000; ++job) {
    Env env({{"OMPI_COMM_WORLD_SIZE", "2"},
             {"OMPI_COMM_WORLD_RANK", "0"},
             {"OMPI_MCA_ess_base_jobid", std::to_string(job * 65536 + 1)}});
    const int64_t port = detect()->main_port();
    EXPECT_GE(port, 15000);
    EXPECT_LT(port, 32768);
    EXPECT_EQ(MpiEnvironment().main_port(), port);
    ports.insert(port);
  }
  EXPECT_GT(ports.size(), 1850u) << "the ports spread over the range (2000 uniform picks of 17000 give ~1890)";
}

TEST(ClusterEnvironment, Lsf) {
  const std::string rankfile = (arc::testing::process_scratch() / "lsf_rankfile").string();
  std::ofstream(rankfile) << "launch\nhostA\nhostA\nhostB\nhostB\n";
  Env env({{"LSB_JOBID", "98765"},
           {"LSB_DJOB_RANKFILE", rankfile},
           {"JSM_NAMESPACE_SIZE", "4"},
           {"JSM_NAMESPACE_RANK", "3"},
           {"JSM_NAMESPACE_LOCAL_RANK", "1"}});
  auto found = detect();
  ASSERT_EQ(found->name(), "lsf");
  EXPECT_EQ(found->main_address(), "hostA");
  EXPECT_EQ(found->main_port(), 10000 + 765);
  EXPECT_EQ(found->world_size(), 4);
  EXPECT_EQ(found->local_world_size(), 2);
  std::remove(rankfile.c_str());
  LsfEnvironment gone;
  EXPECT_NE(error_of([&] { gone.main_address(); }).find("cannot read LSB_DJOB_RANKFILE"), std::string::npos);
}

TEST(ClusterEnvironment, Kubeflow) {
  Env env({{"KUBERNETES_PORT", "tcp://10.0.0.1:443"},
           {"MASTER_ADDR", "job-master-0"},
           {"MASTER_PORT", "23456"},
           {"WORLD_SIZE", "3"},
           {"RANK", "2"}});
  auto found = detect();
  ASSERT_EQ(found->name(), "kubeflow");
  EXPECT_EQ(found->node_rank(), 2);
  EXPECT_EQ(found->local_rank(), 0);
  EXPECT_EQ(found->main_address(), "job-master-0");
}

TEST(ClusterEnvironment, LocalWithVariablesAndBadValues) {
  Env env({{"RANK", "1"}, {"LOCAL_RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_PORT", "70000"}});
  auto found = detect();
  ASSERT_EQ(found->name(), "local");
  EXPECT_TRUE(found->creates_processes_externally());
  EXPECT_EQ(found->global_rank(), 1);
  EXPECT_NE(error_of([&] { found->main_port(); }).find("MASTER_PORT=70000 is not a TCP port"), std::string::npos);
  EXPECT_NE(error_of([&] { found->validate(3, 1); }).find("has 2 processes, but devices=3"), std::string::npos);
  // A rank outside the world, as processes started by hand can have, names the variables to fix
  // (env's destructor unsets it).
  setenv("RANK", "5", 1);
  EXPECT_EQ(error_of([&] { found->validate(2, 1); }),
            "rank 5 is outside world size 2 (cluster environment 'local' reads them from RANK and WORLD_SIZE); each "
            "process needs a rank from 0 to 1, and the world size its launch's process count");
}

TEST(ClusterEnvironment, SelectableByNameWithSuggestions) {
  EXPECT_EQ(cluster_registry().create("slurm", {})->name(), "slurm");
  EXPECT_NE(error_of([] { cluster_registry().create("slrum", {}); }).find("did you mean 'slurm'"), std::string::npos);
}

// The requeue knobs live on the SLURM environment (Lightning's SLURMEnvironment(auto_requeue,
// requeue_signal)); a job requeues only inside SLURM, and other launchers say they cannot.
TEST(ClusterEnvironment, OnlyASlurmJobWithAutoRequeueCatchesTheRequeueSignal) {
  Env env({{"SLURM_NTASKS", "1"}, {"SLURM_PROCID", "0"}, {"SLURM_JOB_ID", "77"}});
  const auto signal = [](const char* name) { return SlurmEnvironmentOptions().requeue_signal(name); };
  EXPECT_EQ(detect(signal("SIGUSR2"))->requeue_signal(), std::optional<std::string>("SIGUSR2"));
  EXPECT_EQ(detect(signal("SIGUSR2").auto_requeue(false))->requeue_signal(), std::nullopt);
  EXPECT_EQ(cluster_registry().create("slurm", signal("SIGHUP"))->requeue_signal(),
            std::optional<std::string>("SIGHUP"));
  EXPECT_EQ(cluster_registry().create("slurm", signal("SIGHUP"))->requeue_job(), "SLURM job 77");
  const auto local = cluster_registry().create("local", {});
  EXPECT_EQ(local->requeue_signal(), std::nullopt);
  EXPECT_NE(error_of([&] { local->requeue(); }).find("the local launcher cannot requeue a job"), std::string::npos);
  EXPECT_NE(error_of([&] { SlurmEnvironment(signal("USR1")); }).find("unknown requeue_signal 'USR1'"),
            std::string::npos);
  Env outside_a_job({{"SLURM_NTASKS", "1"}, {"SLURM_PROCID", "0"}, {"SLURM_JOB_ID", ""}});
  EXPECT_EQ(SlurmEnvironment().requeue_signal(), std::nullopt);
}

}  // namespace
}  // namespace arc::cluster
