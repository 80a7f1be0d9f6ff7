// Launch and recovery times of the distributed probe program (tests/strategies/ddp_probe.cpp,
// 2 processes, 1 thread each) under every launcher on this machine: from the command's start to
// rank 0's first training step (ddp_spawn is the baseline of the ratio column), and the cost of a
// failure: a worker SIGKILLed under torchrun --max_restarts (strategy elastic), and SLURM's
// requeue signal (save, requeue, start again, resume).
//   arc_bench_launchers [runs=5]
#include "bench_util.h"
#include "support/command.h"
#include "support/launchers.h"
#include "support/slurm_cluster.h"

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

namespace {

using arc::bench::median;
using arc::testing::read_file;
using arc::testing::run_command;
using arc::testing::timings;
using arc::testing::torchrun;
using arc::testing::unix_ms;
using arc::testing::wait_for_text;

const std::string kProbe = ARC_PROBE;

// Median milliseconds from starting `command` to rank 0's first step.
double first_step_ms(const std::string& command, int runs) {
  std::vector<double> samples;
  for (int i = 0; i < runs; ++i) {
    const int64_t start = unix_ms();
    const auto run = run_command(command + " --steps 5");
    const auto starts = timings(run.output, "start");
    if (run.status != 0 || starts.empty()) throw std::runtime_error("the probe failed:\n" + run.output);
    samples.push_back(static_cast<double>(starts[0][1] - start));
  }
  return median(samples);
}

struct Recovery {
  double ms = 0;
  int64_t steps_lost = 0;
};

// A worker killed at step 13 with a checkpoint every 5 steps: kill to the restarted group's
// first step, and the steps done again.
Recovery elastic_recovery(double monitor_interval, int runs) {
  std::vector<double> samples;
  Recovery out;
  const std::string dir = "/tmp/arc_bench_elastic_" + std::to_string(getpid());
  for (int i = 0; i < runs; ++i) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir);
    const auto run = run_command(
        torchrun(kProbe, "--max_restarts 1 --monitor_interval " + std::to_string(monitor_interval)) +
        " --strategy elastic --steps 30 --elastic-every 5 --fail.kind sigkill --fail.rank 1 --fail.step 13" +
        " --fail.attempt 0 --root " + dir);
    const auto starts = timings(run.output, "start");
    const auto kills = timings(run.output, "kill");
    if (run.status != 0 || starts.size() != 2 || kills.size() != 1)
      throw std::runtime_error("the elastic run failed:\n" + run.output);
    samples.push_back(static_cast<double>(starts[1][1] - kills[0][1]));
    out.steps_lost = kills[0][0] - starts[1][0];
  }
  std::filesystem::remove_all(dir);
  out.ms = median(samples);
  return out;
}

// A batch job signalled with SIGUSR1 after its first step: signal to the requeued job's first step.
Recovery requeue_recovery(arc::testing::SlurmCluster& cluster) {
  const std::string dir = cluster.dir() + "/requeue", out = dir + "/job.out";
  std::filesystem::create_directories(dir);
  const auto id = cluster.submit(kProbe + " --strategy ddp --steps 40 --step-ms 40 --root " + dir, out);
  if (!wait_for_text(out, "TIMING start", 60))
    throw std::runtime_error("the batch job did not start:\n" + read_file(out));
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const int64_t signalled = unix_ms();
  run_command(cluster.env() + " timeout 10 scancel --signal=USR1 " + id);
  if (!wait_for_text(out, "PROBE ", 120))
    throw std::runtime_error("the requeued job did not finish:\n" + read_file(out));
  const std::string output = read_file(out);
  const auto starts = timings(output, "start");
  const std::string marker = "at global step ";
  const auto saved = output.find(marker);
  if (starts.size() != 2 || saved == std::string::npos) throw std::runtime_error("no requeue seen:\n" + output);
  Recovery recovery;
  recovery.ms = static_cast<double>(starts.back()[1] - signalled);
  recovery.steps_lost = std::stoll(output.substr(saved + marker.size())) - starts.back()[0];
  return recovery;
}

void print_row(const std::string& name, double ms, double baseline) {
  std::printf("| %-44s | %8.0f | %5.2f |\n", name.c_str(), ms, ms / baseline);
}

}  // namespace

int main(int argc, char** argv) try {
  const int runs = static_cast<int>(arc::bench::whole_arg(argc, argv, 1, "runs", 5));
  const std::string root = "/tmp/arc_bench_launch_" + std::to_string(getpid());
  std::filesystem::create_directories(root);
  const std::string common = " --strategy ddp --root " + root;
  std::cout << "== launch to first training step, 2 processes (median of " << runs << ") ==\n\n"
            << "| launcher | ms | ratio |\n|---|---|---|\n";
  arc::bench::Summary summary("arc_bench_launchers");
  const auto launch = [&](const std::string& name, const std::string& column, double ms, double baseline) {
    print_row(name, ms, baseline);
    summary.add(column + " to 1st step, ms", ms, 0);
  };
  const double spawn = first_step_ms("timeout 120 " + kProbe + " --strategy ddp_spawn --root " + root, runs);
  launch("ddp_spawn (baseline)", "ddp_spawn", spawn, spawn);
  launch("torchrun --no_python, strategy ddp", "torchrun", first_step_ms(torchrun(kProbe) + common, runs), spawn);
  launch("mpirun -np 2, strategy ddp", "mpirun", first_step_ms(arc::testing::mpirun(kProbe) + common, runs), spawn);
  arc::testing::SlurmCluster cluster;
  launch("srun -n 2 (local SLURM), strategy ddp", "srun",
         first_step_ms(cluster.env() + " timeout 120 srun -n 2 " + kProbe + common, runs), spawn);

  std::cout << "\n== recovery (median of " << runs << " for torchrun) ==\n\n"
            << "| failure | ms to training again | steps redone |\n|---|---|---|\n";
  for (const double interval : {0.1, 1.0}) {
    const auto recovery = elastic_recovery(interval, runs);
    std::printf(
        "| SIGKILL rank 1 at step 13, torchrun --monitor_interval %.1f, checkpoint every 5 steps | %.0f | %lld |\n",
        interval, recovery.ms, static_cast<long long>(recovery.steps_lost));
    if (interval == 0.1) summary.add("torchrun worker killed: back in, ms", recovery.ms, 0);
  }
  const auto requeue = requeue_recovery(cluster);
  std::printf("| SLURM SIGUSR1: save, scontrol requeue, start again (cred_expire=5 s) | %.0f | %lld |\n", requeue.ms,
              static_cast<long long>(requeue.steps_lost));
  summary.add("SLURM requeue: back in, ms", requeue.ms, 0).print();
  std::filesystem::remove_all(root);
  return 0;
} catch (const std::exception& error) {
  return arc::bench::failed("arc_bench_launchers", error);
}
