// Strategy ddp under the real HPC launchers (mpirun, torchrun, and srun / sbatch on a SLURM
// cluster that the test starts), what SIGTERM and SLURM's requeue signal do to a fit, and
// strategy elastic surviving killed workers under torchrun --max_restarts.
#include "support/command.h"
#include "support/launchers.h"
#include "support/scratch.h"
#include "support/slurm_cluster.h"
#include "support/terminal.h"

#include <arc/fabric/checkpoint.h>
#include <arc/fabric/sharded_checkpoint.h>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

using arc::testing::CommandRun;
using arc::testing::fresh_folder;
using arc::testing::read_file;
using arc::testing::run_command;
using arc::testing::SlurmCluster;
using arc::testing::timings;
using arc::testing::torchrun;
using arc::testing::wait_for_text;

const std::string kProbe = ARC_PROBE;

bool installed(const std::string& program) { return run_command("command -v " + program).status == 0; }

// Final weights of an uninterrupted ddp_spawn run of the probe with `args`, once per step count and args.
std::string reference_weights(int64_t steps, const std::string& args = "") {
  static std::map<std::string, std::string> cache;
  const std::string key = std::to_string(steps) + args;
  if (cache.count(key) == 0) {
    const std::string dir = fresh_folder("reference_" + std::to_string(steps));
    const auto run = run_command("timeout 120 " + kProbe + " --strategy ddp_spawn --steps " + std::to_string(steps) +
                                 args + " --root " + dir + " --out " + dir + "/w.bin");
    EXPECT_EQ(run.status, 0) << run.output;
    cache[key] = read_file(dir + "/w.bin");
    std::filesystem::remove_all(dir);
  }
  return cache[key];
}

// A probe run in the background, its output in a file, so that the test can signal it.
class Background {
 public:
  Background(const std::string& args, const std::string& output) : output_(output) {
    const std::string command = "exec " + kProbe + " " + args + " > " + output + " 2>&1";
    const char* argv[] = {"sh", "-c", command.c_str(), nullptr};
    posix_spawnp(&pid_, "sh", nullptr, nullptr, const_cast<char**>(argv), environ);
  }
  ~Background() {
    if (pid_ == 0) return;
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  void signal(int number) const { kill(pid_, number); }
  /// The exit code, or -signal; -1000 after `seconds` (the probe is then killed).
  int wait(double seconds) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    int status = 0;
    while (waitpid(pid_, &status, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() > deadline) return -1000;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    pid_ = 0;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }

 private:
  std::string output_;
  pid_t pid_ = 0;
};

TEST(Launchers, MpirunRunsDdpAsDdpSpawnDoes) {
  if (!installed("mpirun")) GTEST_SKIP() << "mpirun is not installed (Debian package openmpi-bin)";
  const std::string dir = fresh_folder("mpirun");
  const auto run = run_command(arc::testing::mpirun(kProbe) + " --strategy ddp --steps 30 --root " + dir + " --out " +
                               dir + "/w.bin");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("rank 0 of 2 on cpu (mpi environment, shared memory"), std::string::npos) << run.output;
  EXPECT_EQ(read_file(dir + "/w.bin"), reference_weights(30));
  std::filesystem::remove_all(dir);
}

TEST(Launchers, TorchrunStaticRunsDdpAsDdpSpawnDoes) {
  if (!installed("torchrun")) GTEST_SKIP() << "torchrun is not installed (Debian package python3-torch)";
  const std::string dir = fresh_folder("torchrun");
  const auto run =
      run_command(torchrun(kProbe) + " --strategy ddp --steps 30 --root " + dir + " --out " + dir + "/w.bin");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("rank 0 of 2 on cpu (torchelastic environment"), std::string::npos) << run.output;
  EXPECT_EQ(read_file(dir + "/w.bin"), reference_weights(30));
  std::filesystem::remove_all(dir);
}

// The torchrun agent of node `node` of two over loopback at `port`, starting two ranks of the probe
// with `probe_args` (and --num-nodes 2).
std::string agent(int node, const std::string& port, const std::string& dir, const std::string& agent_flags,
                  const std::string& probe_args) {
  return "timeout 120 torchrun -r 9:1 -t 9:1 " + arc::testing::torchrun_log_dir() + " --nnodes 2 --node_rank " +
         std::to_string(node) + " --nproc_per_node 2 " + agent_flags + " --master_addr 127.0.0.1 --master_port " +
         port + " --no_python " + kProbe + " --num-nodes 2 --root " + dir + " " + probe_args;
}

// Two torchrun agents, --nnodes 2 --node_rank 1|0: node 0's output is the command's, node 1's goes to
// dir/node1.log; the command fails if either agent does.
std::string two_nodes(const std::string& dir, const std::string& agent_flags, const std::string& probe_args) {
  const std::string port = std::to_string(arc::testing::free_port());
  return agent(1, port, dir, agent_flags, probe_args) + " > " + dir + "/node1.log 2>&1 & node1=$!; " +
         agent(0, port, dir, agent_flags, probe_args) + " 2>&1; status=$?; wait $node1 || exit 1; exit $status";
}

// Every rank's weights as --out-every-rank wrote them next to `out`.
std::vector<std::string> weights_of_ranks(const std::string& out) {
  std::vector<std::string> weights;
  for (int rank = 0; rank < 4; ++rank) weights.push_back(read_file(out + "." + std::to_string(rank)));
  return weights;
}

// Runs `launch(out)` twice (`out`: where the ranks write their weights), each time in the cluster
// environment `environment` reducing through shared memory within each node and Gloo across 2;
// every rank of both runs must end with the same bits, which it returns.
std::string same_bits_on_every_rank_twice(const std::string& dir, const std::string& environment,
                                          const std::function<CommandRun(const std::string&)>& launch) {
  std::vector<std::string> weights;
  for (const std::string attempt : {"0", "1"}) {
    const std::string out = dir + "/w" + attempt + ".bin";
    const auto run = launch(out);
    EXPECT_EQ(run.status, 0) << run.output << read_file(dir + "/node1.log");
    EXPECT_NE(run.output.find("rank 0 of 4 on cpu (" + environment +
                              " environment, shared memory within each node, gloo across 2 nodes"),
              std::string::npos)
        << run.output;
    for (auto& rank : weights_of_ranks(out)) weights.push_back(std::move(rank));
  }
  EXPECT_FALSE(weights.front().empty());
  for (size_t i = 1; i < weights.size(); ++i)
    EXPECT_EQ(weights[i], weights.front()) << "rank " << i % 4 << " of run " << i / 4;
  return weights.front();
}

// A launcher's command (which starts with `timeout 120`) without its timeout, so that the shell's $! is
// the launcher itself, to be killed: the shells below do so within 120 s whatever happens.
std::string without_timeout(std::string command) {
  const std::string timeout = "timeout 120 ";
  EXPECT_EQ(command.rfind(timeout, 0), 0u) << command;
  return command.erase(0, timeout.size());
}

// What a launcher SIGKILLed mid-run leaves: its log, and how many of the processes `tag` names are
// still alive 30 s after the kill (they are then killed).
struct KilledLauncher {
  std::string output;
  int left;
};

// Runs `command` (a launcher with no `timeout` in front, so that the shell's $! is the launcher
// itself), its output to `log`; once the ranks train (or after 120 s), SIGKILLs the launcher alone.
KilledLauncher kill_launcher_once_training(const std::string& command, const std::string& log, const std::string& tag) {
  run_command(command + " > " + log + " 2>&1 & launcher=$!; for i in $(seq 1200); do grep -q 'TIMING start' " + log +
              " && break; sleep 0.1; done; kill -9 $launcher; wait $launcher");
  const int left = arc::testing::count_tagged_after(tag, 30);
  arc::testing::kill_tagged(tag);
  const auto output = read_file(log);
  EXPECT_NE(output.find("TIMING start"), std::string::npos) << output;
  return {output, left};
}

// SIGKILL to the launcher of a ddp run: its ranks (in sessions of their own under PyTorch 2.x's torchrun,
// in process groups of their own under mpirun) exit too, as ddp_spawn's ranks do with their launcher,
// instead of running on alone. Under torchrun they say so; mpirun took their output along.
TEST(Launchers, RanksExitWithTheirKilledTorchrunAgentOrMpirun) {
  for (const std::string launcher : {"torchrun", "mpirun"}) {
    if (!installed(launcher)) continue;
    SCOPED_TRACE(launcher);
    const std::string dir = fresh_folder("killed_" + launcher);
    const std::string tag = arc::testing::process_tag("killed_" + launcher);
    const std::string command =
        without_timeout(launcher == "torchrun" ? torchrun(kProbe) : arc::testing::mpirun(kProbe)) +
        " --strategy ddp --steps 100000 --step-ms 5 --root " + dir + " --tag " + tag;
    const auto [output, left] = kill_launcher_once_training(command, dir + "/launcher.log", tag);
    EXPECT_EQ(left, 0) << "a rank outlived its launcher: " << output;
    // The first rank to see its launcher gone says so; the other may end first on that rank's exit.
    if (launcher == "torchrun") {
      EXPECT_GE(arc::testing::occurrences(output, "torchrun's agent (pid"), 1) << output;
      EXPECT_NE(output.find("is gone, so the rank exits too, as it would with its node; start the job again\n"),
                std::string::npos)
          << output;
      EXPECT_EQ(output.find("rejoins"), std::string::npos) << "elastic's advice under ddp: " << output;
    }
    std::filesystem::remove_all(dir);
  }
}

// Two nodes of two ranks on one machine. Node identity is host name + node rank, so Arclight reduces
// through shared memory within each "node" and Gloo across them; every rank ends with the same
// weights, and a second run gives the same bits.
TEST(Launchers, TwoTorchrunNodesOfTwoRanksTrainToTheSameBitsOnEveryRank) {
  if (!installed("torchrun")) GTEST_SKIP() << "torchrun is not installed (Debian package python3-torch)";
  const std::string dir = fresh_folder("two_nodes");
  same_bits_on_every_rank_twice(dir, "torchelastic", [&](const std::string& out) {
    return run_command(two_nodes(dir, "", "--strategy ddp --steps 30 --out-every-rank 1 --out " + out));
  });
  std::filesystem::remove_all(dir);
}

// Strategy fsdp under the launchers runs as ddp does: under torchrun and mpirun to ddp_spawn's bits;
// on two torchrun nodes (shared memory within each, Gloo across, the reduce-scatter hierarchical) to
// the same bits on every rank, twice.
TEST(Launchers, FsdpRunsUnderTorchrunMpirunAndOnTwoNodes) {
  const std::string dir = fresh_folder("fsdp_launchers");
  const std::string args = " --strategy fsdp --steps 30 --optimizer adam --root " + dir + " --out " + dir + "/w.bin";
  const std::string reference = reference_weights(30, " --optimizer adam");
  if (installed("torchrun")) {
    const auto run = run_command(torchrun(kProbe) + args);
    ASSERT_EQ(run.status, 0) << run.output;
    EXPECT_NE(run.output.find("fsdp: sharding_strategy SHARD_GRAD_OP"), std::string::npos) << run.output;
    EXPECT_EQ(read_file(dir + "/w.bin"), reference);
    same_bits_on_every_rank_twice(dir, "torchelastic", [&](const std::string& out) {
      return run_command(
          two_nodes(dir, "", "--strategy fsdp --sharding FULL_SHARD --steps 30 --out-every-rank 1 --out " + out));
    });
  }
  if (installed("mpirun")) {
    const auto run = run_command(arc::testing::mpirun(kProbe) + args + " --sharding FULL_SHARD");
    ASSERT_EQ(run.status, 0) << run.output;
    EXPECT_EQ(read_file(dir + "/w.bin"), reference);
  }
  std::filesystem::remove_all(dir);
}

// HYBRID_SHARD on two torchrun nodes of two ranks: FULL_SHARD among the ranks of each node, every
// node a replica. With the layers made in configure_model, each rank holds what a rank of FULL_SHARD
// over two ranks holds (rank 0 fc1's weight, 512 bytes; rank 1 the rest, 268), on both nodes. With
// Adam, accumulation and clipping, every rank ends with the weights of DDP on the same nodes; the
// sharded checkpoint holds the first node's shares only and DDP's tensors, and resumes as DDP's file.
TEST(Launchers, HybridShardShardsWithinEachNodeAndTrainsToDdpsBits) {
  if (!installed("torchrun")) GTEST_SKIP() << "torchrun is not installed (Debian package python3-torch)";
  const std::string dir = fresh_folder("hybrid_shard");
  const std::string hybrid_fsdp = "--strategy fsdp --sharding HYBRID_SHARD --state-dict-type sharded";
  const auto train = [&](const std::string& args, const std::string& name) {
    const auto run = run_command(two_nodes(dir, "",
                                           args +
                                               " --build-late 1 --optimizer adam --accumulate 2 --clip 0.05 "
                                               "--out-every-rank 1 --root " +
                                               dir + "/" + name + " --out " + dir + "/" + name + ".bin"));
    EXPECT_EQ(run.status, 0) << run.output << read_file(dir + "/node1.log");
    return run.output + read_file(dir + "/node1.log");
  };
  const auto checkpoint_of = [&](const std::string& name) {
    for (const auto& entry : std::filesystem::directory_iterator(dir + "/" + name + "/checkpoints"))
      return entry.path().string();
    return std::string();
  };
  train("--strategy ddp --steps 12 --checkpoints.every 12", "ddp");
  const auto output = train(hybrid_fsdp + " --steps 12 --checkpoints.every 12", "hybrid");
  EXPECT_NE(output.find("fsdp: HYBRID_SHARD shards over the 2 ranks of each node and replicates across 2 nodes"),
            std::string::npos)
      << output;
  const auto bytes = [&](const std::string& tag) {
    std::map<int, int64_t> by_rank;
    const std::regex line(tag + " (\\d+) (\\d+)");
    for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it)
      by_rank[std::stoi((*it)[1])] = std::stoll((*it)[2]);
    return by_rank;
  };
  const std::map<int, int64_t> own = {{0, 512}, {1, 268}, {2, 512}, {3, 268}};
  EXPECT_EQ(bytes("BUILT"), own) << output;
  EXPECT_EQ(bytes("RESIDENT"), own);
  const auto reference = read_file(dir + "/ddp.bin.0");
  EXPECT_FALSE(reference.empty());
  for (const auto& weights : weights_of_ranks(dir + "/hybrid.bin")) EXPECT_EQ(weights, reference);
  const auto folder = checkpoint_of("hybrid");
  const auto index = arc::read_sharded_index(folder);
  ASSERT_EQ(index.shards.size(), 4u);
  EXPECT_TRUE(arc::CheckpointReader(index.shards[0]).contains("model/fc1.weight"));
  EXPECT_TRUE(arc::CheckpointReader(index.shards[1]).contains("model/fc2.weight"));
  for (const size_t replica : {2, 3})
    EXPECT_TRUE(arc::CheckpointReader(index.shards[replica]).tensor_names().empty()) << replica;
  const arc::CheckpointReader whole(folder), ddp_file(checkpoint_of("ddp"));
  ASSERT_EQ(whole.tensor_names(), ddp_file.tensor_names());
  for (const auto& name : whole.tensor_names()) EXPECT_TRUE(torch::equal(whole.tensor(name), ddp_file.tensor(name)));
  EXPECT_EQ(whole.json("optimizer_0"), ddp_file.json("optimizer_0"));
  // Every rank of the second node reads the states its rank of the node owns.
  train("--strategy ddp --steps 16 --ckpt-path " + checkpoint_of("ddp"), "ddp_resumed");
  train(hybrid_fsdp + " --steps 16 --ckpt-path " + folder, "hybrid_resumed");
  const auto resumed = read_file(dir + "/ddp_resumed.bin.0");
  EXPECT_NE(resumed, reference);
  for (const auto& weights : weights_of_ranks(dir + "/hybrid_resumed.bin")) EXPECT_EQ(weights, resumed);
  std::filesystem::remove_all(dir);
}

// The same two nodes as two slurmd daemons on this host (Slurm's multiple-slurmd, which Debian's
// Slurm runs): `srun -N 2 --ntasks-per-node 2` starts the ranks, MASTER_ADDR names the loopback
// address (the node names n1 and n2 resolve nowhere). Every rank of two runs ends with the same bits,
// those of the two torchrun nodes.
TEST(Launchers, TwoSlurmNodesOfTwoRanksTrainToTheBitsOfTwoTorchrunNodes) {
  if (!SlurmCluster::available()) GTEST_SKIP() << "SLURM is not installed (Debian package slurm-wlm)";
  const std::string dir = fresh_folder("two_slurm_nodes");
  SlurmCluster cluster(2);
  const auto weights = same_bits_on_every_rank_twice(dir, "slurm", [&](const std::string& out) {
    return run_command(cluster.env() + "MASTER_ADDR=127.0.0.1 timeout 120 srun -N 2 --ntasks-per-node 2 " + kProbe +
                       " --strategy ddp --num-nodes 2 --steps 30 --root " + dir + " --out-every-rank 1 --out " + out);
  });
  if (installed("torchrun")) {
    const auto torchrun = run_command(two_nodes(dir, "", "--strategy ddp --steps 30 --out " + dir + "/t.bin"));
    ASSERT_EQ(torchrun.status, 0) << torchrun.output << read_file(dir + "/node1.log");
    EXPECT_EQ(read_file(dir + "/t.bin"), weights);
  }
  std::filesystem::remove_all(dir);
}

// Elastic across nodes: every worker of node 1 (ranks 2 and 3), or one of them (rank 2), is killed
// at step 13; both agents restart their workers, the group resumes from the step-10 checkpoint, and
// every rank ends with the bits of an uninterrupted two-node run. So does a run whose node 1's agent is
// killed, its workers follow it, and a new agent starts there.
TEST(Launchers, ElasticAcrossTwoNodesSurvivesKilledWorkersOrAgentOfNodeOneBitIdentical) {
  if (!installed("torchrun")) GTEST_SKIP() << "torchrun is not installed (Debian package python3-torch)";
  const std::string dir = fresh_folder("two_nodes_elastic");
  const std::string agents = "--max_restarts 2 --monitor_interval 0.1";
  const std::string common = "--strategy elastic --steps 40 --elastic-every 5 --out-every-rank 1 --out ";
  std::filesystem::create_directories(dir + "/plain");
  const auto plain = run_command(two_nodes(dir + "/plain", agents, common + dir + "/plain.bin"));
  ASSERT_EQ(plain.status, 0) << plain.output;
  const auto expected = read_file(dir + "/plain.bin.0");
  ASSERT_FALSE(expected.empty());
  for (const std::string victims : {"--fail.node 1", "--fail.rank 2"}) {
    SCOPED_TRACE(victims);
    // A folder of its own: an elastic run resumes from the checkpoints it finds in its root.
    const std::string root = dir + "/" + (victims == "--fail.node 1" ? "node" : "rank");
    std::filesystem::create_directories(root);
    const auto killed = run_command(two_nodes(
        root, agents, common + root + "/killed.bin --fail.kind sigkill --fail.attempt 0 --fail.step 13 " + victims));
    const auto node1 = read_file(root + "/node1.log");
    ASSERT_EQ(killed.status, 0) << killed.output << node1;
    EXPECT_NE(killed.output.find("elastic: start 2 of this job"), std::string::npos) << killed.output;
    EXPECT_EQ(timings(node1, "kill").size(), victims == "--fail.node 1" ? 2u : 1u) << node1;
    for (const auto& rank : weights_of_ranks(root + "/killed.bin")) EXPECT_EQ(rank, expected);
  }
  // Node 1's agent is SIGKILLed once the first checkpoint is written, and a new agent starts there,
  // as a scheduler would. Its workers (which PyTorch 2.x's torchrun starts in sessions of their own,
  // out of reach of a kill of the agent's group) see their agent gone and exit, so node 0's workers
  // fail and its agent restarts them; the new agent's workers (restart count 0) meet them in the
  // generation of the store that every rank's second start shares, and the group resumes.
  const std::string root = dir + "/agent";
  std::filesystem::create_directories(root);
  const std::string port = std::to_string(arc::testing::free_port());
  const std::string args = common + root + "/killed.bin --step-ms 30";
  const std::string tag = arc::testing::process_tag("first_agent_of_node_1");
  const std::string first_agent = without_timeout(agent(1, port, root, agents, args + " --tag " + tag));
  const auto killed =
      run_command(first_agent + " > " + root + "/node1.log 2>&1 & node1=$!; " + agent(0, port, root, agents, args) +
                  " > " + root + "/node0.log 2>&1 & node0=$!; " + "for i in $(seq 1200); do [ -f " + root +
                  "/elastic_last.ckpt ] && break; sleep 0.1; done; " + "kill -9 $node1; wait $node1; " +
                  agent(1, port, root, agents, args) + " > " + root +
                  "/node1b.log 2>&1 & node1=$!; wait $node0; status=$?; wait $node1 || exit 1; exit $status");
  const auto node0 = read_file(root + "/node0.log"), node1 = read_file(root + "/node1.log"),
             new_node1 = read_file(root + "/node1b.log");
  EXPECT_EQ(arc::testing::count_tagged_after(tag, 30), 0) << "a worker outlived its agent: " << node1;
  arc::testing::kill_tagged(tag);
  ASSERT_EQ(killed.status, 0) << node0 << node1 << new_node1;
  EXPECT_GE(arc::testing::occurrences(node1, "torchrun's agent (pid"), 1) << node1;
  EXPECT_NE(node1.find("as it would with its node; start torchrun again on this node: it rejoins the running job"),
            std::string::npos)
      << node1;
  EXPECT_NE(node0.find("resumed from '" + root + "/elastic_last.ckpt'"), std::string::npos) << node0;
  // The new agent's workers join at their first start, not after failing on the first generation's
  // keys (torchrun reports a failed worker as "failed (exitcode: 1) local_rank: ...").
  EXPECT_EQ(new_node1.find("failed (exitcode"), std::string::npos) << new_node1;
  for (const auto& rank : weights_of_ranks(root + "/killed.bin")) EXPECT_EQ(rank, expected);
  std::filesystem::remove_all(dir);
}

// Ctrl-C in the terminal of a launcher: every rank stops gracefully, at one batch boundary. torchrun
// passes the terminal's SIGINT on to its ranks, which under torch 1.13 got it from the terminal
// already (one Ctrl-C, not two: they say they were interrupted) and under 2.x, in sessions of their
// own, get it from torchrun alone; mpirun sends SIGTERM, whose save the next fit resumes from.
// Under mpirun each rank writes its output to a file of its own: OpenMPI 5's mpirun (Debian 13's)
// exits on Ctrl-C without passing on what its ranks print as they stop (OpenMPI 4's passes it on).
TEST(Launchers, CtrlCStopsEveryRankUnderTorchrunAndMpirun) {
  for (const std::string launcher : {"torchrun", "mpirun"}) {
    if (!installed(launcher)) continue;
    SCOPED_TRACE(launcher);
    const std::string dir = fresh_folder("ctrl_c_" + launcher);
    const std::string tag = arc::testing::process_tag("ctrl_c_" + launcher);
    const std::string probe = kProbe + " --strategy ddp --steps 100000 --step-ms 5 --root " + dir + " --tag " + tag;
    // The launcher alone in the terminal, as typed by hand (no `timeout` in between, which would pass
    // the SIGINT on once more); wait_exit bounds the wait, and the ranks are found by their tag.
    std::string command =
        launcher == "torchrun"
            ? torchrun(probe)
            : arc::testing::mpirun("sh -c 'exec " + probe + " > " + dir + "/rank$OMPI_COMM_WORLD_RANK.log 2>&1'");
    command.replace(0, std::string("timeout 120").size(), "exec");
    arc::testing::Terminal terminal({"/bin/sh", "-c", command});
    const auto ranks_output = [&] { return read_file(dir + "/rank0.log") + read_file(dir + "/rank1.log"); };
    if (launcher == "torchrun") {
      ASSERT_TRUE(terminal.wait_for("TIMING start", 120)) << terminal.output();
    } else {
      ASSERT_TRUE(wait_for_text(dir + "/rank0.log", "TIMING start", 120)) << terminal.output() << ranks_output();
    }
    terminal.type("\x03");
    EXPECT_NE(terminal.wait_exit(120), -1) << terminal.output();
    const std::string output = terminal.output() + (launcher == "mpirun" ? ranks_output() : "");
    if (launcher == "torchrun") {
      EXPECT_NE(output.find("fit interrupted by SIGINT (Ctrl-C) at global step"), std::string::npos) << output;
    } else {
      EXPECT_EQ(arc::testing::occurrences(output, "fit stopped by SIGTERM at global step"), 2) << output;
      EXPECT_TRUE(std::filesystem::exists(dir + "/hpc_ckpt_1.ckpt")) << output;
    }
    EXPECT_EQ(arc::testing::count_tagged_after(tag, 30), 0) << "a rank outlived the run: " << output;
    arc::testing::kill_tagged(tag);
    std::filesystem::remove_all(dir);
  }
}

class Slurm : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!SlurmCluster::available()) GTEST_SKIP() << "SLURM is not installed (Debian package slurm-wlm)";
    cluster_ = std::make_unique<SlurmCluster>();
    dir_ = fresh_folder(::testing::UnitTest::GetInstance()->current_test_info()->name());
  }
  void TearDown() override {
    cluster_.reset();
    if (!dir_.empty()) std::filesystem::remove_all(dir_);
  }

  // The probe under strategy ddp with `args`, its files in this test's folder.
  std::string probe(const std::string& args) const {
    return kProbe + " --strategy ddp --root " + dir_ + " --out " + dir_ + "/w.bin " + args;
  }

  CommandRun srun(const std::string& args) const {
    return run_command(cluster_->env() + " timeout 120 srun -n 2 " + probe(args));
  }

  // Submits a long job, waits for its first step, then sends it `scancel` with `flags`.
  std::string submit_and_signal(const std::string& flags) {
    const auto id = cluster_->submit(probe("--steps 60 --step-ms 40"), dir_ + "/job.out");
    EXPECT_TRUE(wait_for_text(dir_ + "/job.out", "TIMING start", 60)) << job_output();
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    EXPECT_EQ(run_command(cluster_->env() + " timeout 10 scancel " + flags + " " + id).status, 0);
    return id;
  }

  std::string job_output() const { return read_file(dir_ + "/job.out"); }

  std::unique_ptr<SlurmCluster> cluster_;
  std::string dir_;
};

TEST_F(Slurm, SrunRunsDdpAndFsdpAsDdpSpawnDoes) {
  const auto run = srun("--steps 30");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("rank 0 of 2 on cpu (slurm environment, shared memory at localhost:"), std::string::npos)
      << run.output;
  EXPECT_EQ(read_file(dir_ + "/w.bin"), reference_weights(30));
  const auto sharded = srun("--steps 30 --strategy fsdp --sharding FULL_SHARD");
  ASSERT_EQ(sharded.status, 0) << sharded.output;
  EXPECT_NE(sharded.output.find("fsdp: FULL_SHARD over 2 units"), std::string::npos) << sharded.output;
  EXPECT_EQ(read_file(dir_ + "/w.bin"), reference_weights(30));
}

TEST_F(Slurm, SbatchRunsDdpAsDdpSpawnDoes) {
  const auto id = cluster_->submit(probe("--steps 30"), dir_ + "/job.out");
  ASSERT_TRUE(cluster_->wait_for_end(id, 120)) << job_output();
  EXPECT_NE(job_output().find("PROBE "), std::string::npos) << job_output();
  EXPECT_EQ(read_file(dir_ + "/w.bin"), reference_weights(30));
}

TEST_F(Slurm, RequeueSignalSavesRequeuesAndTheJobResumesExactly) {
  const auto id = submit_and_signal("--signal=USR1");
  ASSERT_TRUE(wait_for_text(dir_ + "/job.out", "PROBE ", 120)) << job_output();
  ASSERT_TRUE(cluster_->wait_for_end(id, 60)) << job_output();
  const auto output = job_output();
  EXPECT_NE(output.find("requeuing SLURM job " + id), std::string::npos) << output;
  EXPECT_NE(output.find("attempt 1"), std::string::npos) << output;
  EXPECT_NE(output.find("resuming from '" + dir_ + "/hpc_ckpt_1.ckpt'"), std::string::npos) << output;
  const auto starts = timings(output, "start");
  ASSERT_EQ(starts.size(), 2u) << output;
  EXPECT_GT(starts[1][0], 0) << "the requeued job started from step 0";
  EXPECT_EQ(read_file(dir_ + "/w.bin"), reference_weights(60));
}

TEST_F(Slurm, SigtermSavesAndExitsNonZeroAndTheNextRunResumesExactly) {
  const auto id = submit_and_signal("");
  ASSERT_TRUE(cluster_->wait_for_end(id, 60)) << job_output();
  const auto output = job_output();
  EXPECT_NE(output.find("fit stopped by SIGTERM at global step"), std::string::npos) << output;
  EXPECT_EQ(output.find("PROBE "), std::string::npos) << output;
  ASSERT_TRUE(std::filesystem::exists(dir_ + "/hpc_ckpt_1.ckpt")) << output;
  const auto rerun = srun("--steps 60");
  ASSERT_EQ(rerun.status, 0) << rerun.output;
  EXPECT_NE(rerun.output.find("resuming from '" + dir_ + "/hpc_ckpt_1.ckpt'"), std::string::npos) << rerun.output;
  EXPECT_EQ(read_file(dir_ + "/w.bin"), reference_weights(60));
}

// SIGKILL to srun: its ranks are children of Slurm's step daemon, not of srun, and Slurm ends them
// itself (they are gone about 1.5 s later), as the ranks of a killed torchrun or mpirun end
// themselves (RanksExitWithTheirKilledTorchrunAgentOrMpirun).
TEST_F(Slurm, RanksEndWithTheirKilledSrun) {
  const std::string tag = arc::testing::process_tag("killed_srun");
  const auto [output, left] = kill_launcher_once_training(
      cluster_->env() + " srun -n 2 " + probe("--steps 100000 --step-ms 5 --tag " + tag), dir_ + "/srun.log", tag);
  EXPECT_EQ(left, 0) << "a rank outlived srun: " << output;
}

// What a cancel cannot reach (here: nothing can, the controller is gone) the test cluster still ends
// by PID: slurmd's step daemons outlive slurmd by design, and under Slurm 24.11 a requeued job's did.
TEST(SlurmTestCluster, EndsEveryProcessOfItsJobsEvenWithItsControllerGone) {
  if (!SlurmCluster::available()) GTEST_SKIP() << "SLURM is not installed (Debian package slurm-wlm)";
  const auto dir = fresh_folder("SlurmTestCluster");
  std::string cluster_dir;
  {
    SlurmCluster cluster;
    cluster_dir = cluster.dir();
    cluster.submit("sleep 600", dir + "/job.out");
    // The processes of the cluster's jobs whose program name (less its folder) starts with `name`.
    const auto found = [&](const std::string& name) {
      int count = 0;
      for (const int pid : SlurmCluster::processes_of(cluster_dir)) {
        const auto cmdline = read_file("/proc/" + std::to_string(pid) + "/cmdline");
        const auto program = cmdline.substr(0, cmdline.find('\0'));
        count += program.substr(program.rfind('/') + 1).rfind(name, 0) == 0;
      }
      return count;
    };
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (found("sleep") < 2 && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    ASSERT_EQ(found("sleep"), 2) << read_file(dir + "/job.out");
    EXPECT_GE(found("slurmstepd"), 1) << "no step daemon found";
    ASSERT_EQ(kill(std::stoi(read_file(cluster_dir + "/slurmctld.pid")), SIGKILL), 0);
  }
  EXPECT_EQ(SlurmCluster::processes_of(cluster_dir), std::vector<int>{});
  std::filesystem::remove_all(dir);
}

TEST(Signals, SigtermToDdpSpawnSavesEveryRankStopsAndTheNextFitResumesExactly) {
  const std::string dir = fresh_folder("sigterm_spawn");
  const std::string args = "--strategy ddp_spawn --steps 60 --root " + dir + " --out " + dir + "/w.bin";
  Background run(args + " --step-ms 40", dir + "/out.txt");
  ASSERT_TRUE(wait_for_text(dir + "/out.txt", "TIMING start", 60)) << read_file(dir + "/out.txt");
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  run.signal(SIGTERM);
  EXPECT_EQ(run.wait(60), 1) << read_file(dir + "/out.txt");
  const auto output = read_file(dir + "/out.txt");
  EXPECT_NE(output.find("fit stopped by SIGTERM at global step"), std::string::npos) << output;
  ASSERT_TRUE(std::filesystem::exists(dir + "/hpc_ckpt_1.ckpt")) << output;
  const auto rerun = run_command("timeout 120 " + kProbe + " " + args);
  ASSERT_EQ(rerun.status, 0) << rerun.output;
  EXPECT_NE(rerun.output.find("resuming from '" + dir + "/hpc_ckpt_1.ckpt'"), std::string::npos) << rerun.output;
  EXPECT_EQ(read_file(dir + "/w.bin"), reference_weights(60));
  std::filesystem::remove_all(dir);
}

TEST(Elastic, WithoutTorchrunIsAnErrorThatSaysHowToStartIt) {
  const auto run = run_command("timeout 60 " + kProbe + " --strategy elastic --steps 5");
  EXPECT_EQ(run.status, 1) << run.output;
  EXPECT_NE(run.output.find("torchrun --max_restarts"), std::string::npos) << run.output;
}

struct KillPoint {
  int64_t rank;
  int64_t step;
};

void PrintTo(const KillPoint& point, std::ostream* out) { *out << "rank " << point.rank << " step " << point.step; }

class ElasticKill : public ::testing::TestWithParam<KillPoint> {};

TEST_P(ElasticKill, TorchrunRestartsTheGroupAndTheRunEndsBitIdentical) {
  if (!installed("torchrun")) GTEST_SKIP() << "torchrun is not installed (Debian package python3-torch)";
  const auto [rank, step] = GetParam();
  const std::string dir = fresh_folder("elastic_" + std::to_string(rank) + "_" + std::to_string(step));
  const auto run = run_command(torchrun(kProbe, "--max_restarts 2 --monitor_interval 0.1") +
                               " --strategy elastic --steps 40 --elastic-every 5 --fail.kind sigkill --fail.attempt 0" +
                               " --fail.rank " + std::to_string(rank) + " --fail.step " + std::to_string(step) +
                               " --root " + dir + " --out " + dir + "/w.bin");
  ASSERT_EQ(run.status, 0) << run.output;
  EXPECT_NE(run.output.find("elastic: start 2 of this job"), std::string::npos) << run.output;
  const auto starts = timings(run.output, "start");
  const auto kills = timings(run.output, "kill");
  ASSERT_EQ(starts.size(), 2u) << run.output;
  ASSERT_EQ(kills.size(), 1u) << run.output;
  EXPECT_EQ(kills[0][0], step);
  // The second start resumes from the last periodic checkpoint before the kill.
  EXPECT_EQ(starts[1][0], step / 5 * 5) << run.output;
  EXPECT_EQ(read_file(dir + "/w.bin"), reference_weights(40));
  std::filesystem::remove_all(dir);
}

INSTANTIATE_TEST_SUITE_P(KillPoints, ElasticKill,
                         ::testing::Values(KillPoint{1, 13}, KillPoint{0, 7}, KillPoint{1, 26}, KillPoint{0, 34}),
                         [](const auto& info) {
                           return "Rank" + std::to_string(info.param.rank) + "Step" + std::to_string(info.param.step);
                         });

TEST(Elastic, MoreFailuresThanRestartsEndTorchrunNonZeroNamingTheRankAndCause) {
  if (!installed("torchrun")) GTEST_SKIP() << "torchrun is not installed (Debian package python3-torch)";
  const std::string dir = fresh_folder("elastic_exhausted");
  const auto run = run_command(torchrun(kProbe, "--max_restarts 1 --monitor_interval 0.1") +
                               " --strategy elastic --steps 40 --elastic-every 5 --fail.kind sigkill --fail.rank 1" +
                               " --fail.step 3 --root " + dir);
  EXPECT_NE(run.status, 0) << run.output;
  EXPECT_EQ(timings(run.output, "kill").size(), 2u) << run.output;
  EXPECT_NE(run.output.find("local_rank: 1"), std::string::npos) << run.output;
  EXPECT_NE(run.output.find("exitcode: -9"), std::string::npos) << run.output;
  EXPECT_EQ(run.output.find("PROBE "), std::string::npos) << run.output;
  std::filesystem::remove_all(dir);
}

}  // namespace
