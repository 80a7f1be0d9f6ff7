// A SLURM cluster on 127.0.0.1 for the launcher tests and benchmarks: slurmctld and one slurmd per
// node started by PID with a private slurm.conf (no munge, no cgroups, state in a temp dir), and
// stopped, with every job cancelled, when the object goes. One node is "localhost"; several are
// n1, n2, ... (Slurm's multiple-slurmd: each daemon has its port, spool and log), all on this host.
// What a cancel leaves running is found, by PID, and ended too: the step daemons, which outlive
// slurmd by design (under Slurm 24.11 a requeued job's did), hold a socket in its spool folder, and
// the tasks name the cluster's slurm.conf in their environment (SLURM_CONF, from env()).
#pragma once

#include "support/command.h"
#include "support/ports.h"

#include <fcntl.h>
#include <pwd.h>
#include <signal.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/wait.h>
#include <unistd.h>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace arc::testing {

class SlurmCluster {
 public:
  /// Whether slurm-wlm's daemons and clients are installed.
  static bool available() {
    return run_command("command -v slurmctld && command -v slurmd && command -v srun").status == 0;
  }

  explicit SlurmCluster(int nodes = 1) : nodes_(nodes) {
    dir_ = "/tmp/arc_slurm_" + std::to_string(getpid());
    std::filesystem::remove_all(dir_);
    std::filesystem::create_directories(dir_ + "/state");
    for (const auto& node : node_names()) std::filesystem::create_directories(spool_of(dir_) + node);
    write_config();
    controller_ = start({"slurmctld", "-D", "-f", conf()}, dir_ + "/slurmctld.out");
    for (const auto& node : node_names())
      node_daemons_.push_back(start({"slurmd", "-D", "-N", node, "-f", conf()}, dir_ + "/slurmd-" + node + ".out"));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (idle_nodes() < nodes_) {
      if (std::chrono::steady_clock::now() > deadline) {
        const std::string log = run_command("tail -n 20 " + dir_ + "/*.log " + dir_ + "/*.out").output;
        stop();
        throw std::runtime_error("the test SLURM cluster did not come up within 30 s:\n" + log);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
  }

  ~SlurmCluster() { stop(); }
  SlurmCluster(const SlurmCluster&) = delete;
  SlurmCluster& operator=(const SlurmCluster&) = delete;

  /// What a command needs in front of it to talk to this cluster.
  std::string env() const { return conf_entry(dir_) + " "; }
  const std::string& dir() const { return dir_; }

  /// The processes of the jobs of the cluster in `dir` (its dir()): step daemons, which hold a socket
  /// bound in its spool folder (Slurm 24.11's overwrite their environment with their title), and
  /// processes with its slurm.conf as SLURM_CONF.
  static std::vector<int> processes_of(const std::string& dir) {
    std::set<std::string> sockets;
    std::ifstream unix_sockets("/proc/net/unix");
    for (std::string line; std::getline(unix_sockets, line);) {
      std::istringstream fields(line);
      std::string skip, inode, path;
      for (int i = 0; i < 6; ++i) fields >> skip;
      if (fields >> inode >> path && path.rfind(spool_of(dir), 0) == 0) sockets.insert("socket:[" + inode + "]");
    }
    const std::string entry = std::string(1, '\0') + conf_entry(dir) + '\0';
    return pids_where("environ", [&](const std::string& environment, const std::string& pid) {
      if (('\0' + environment).find(entry) != std::string::npos) return true;
      std::error_code error;
      for (const auto& fd : std::filesystem::directory_iterator("/proc/" + pid + "/fd", error)) {
        const auto target = std::filesystem::read_symlink(fd.path(), error);
        if (!error && sockets.count(target.string()) > 0) return true;
      }
      return false;
    });
  }

  /// Submits a 2-task batch job that prints its attempt, then runs `command` under srun, all of it
  /// appended to `output` (a requeued job adds to it); returns the job id.
  std::string submit(const std::string& command, const std::string& output) const {
    const std::string script = output + ".sh";
    std::ofstream(script) << "#!/bin/bash\n#SBATCH -n 2\n#SBATCH -o " << output << "\n#SBATCH --open-mode=append\n"
                          << "echo \"attempt ${SLURM_RESTART_COUNT:-0}\"\nsrun " << command << "\n";
    const auto run = run_command(env() + " timeout 30 sbatch --parsable " + script);
    if (run.status != 0) throw std::runtime_error("sbatch failed:\n" + run.output);
    return run.output.substr(0, run.output.find_first_of(";\n"));
  }

  /// Waits for job `id` to leave the queue; false after `seconds`.
  bool wait_for_end(const std::string& id, double seconds) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (run_command(env() + " timeout 5 squeue -h -j " + id).output.find(id) != std::string::npos) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    return true;
  }

 private:
  static std::string conf_of(const std::string& dir) { return dir + "/slurm.conf"; }
  /// The environment entry that points Slurm's commands, and the cluster's tasks, at its slurm.conf.
  static std::string conf_entry(const std::string& dir) { return "SLURM_CONF=" + conf_of(dir); }
  /// The folder of the node daemons' spool folders (SlurmdSpoolDir less its %n).
  static std::string spool_of(const std::string& dir) { return dir + "/spool/"; }
  std::string conf() const { return conf_of(dir_); }

  std::vector<std::string> node_names() const {
    if (nodes_ == 1) return {"localhost"};
    std::vector<std::string> names;
    for (int i = 1; i <= nodes_; ++i) names.push_back("n" + std::to_string(i));
    return names;
  }

  int idle_nodes() const { return occurrences(run_command(env() + " sinfo -h -N -o %T").output, "idle"); }

  // Arclight derives a job's MASTER_PORT from its id (15000 + id % 10000, as Lightning does), so
  // clusters running at once must not number their jobs alike: each takes the next block of ten
  // ids from a counter that a file lock guards.
  static int64_t first_job_id() {
    const int fd = open("/tmp/arc_slurm_job_ids", O_RDWR | O_CREAT, 0644);
    if (fd < 0) throw std::runtime_error("cannot open the job id counter /tmp/arc_slurm_job_ids");
    flock(fd, LOCK_EX);
    char text[32] = {};
    const ssize_t got = pread(fd, text, sizeof(text) - 1, 0);
    const int64_t block = got > 0 ? std::atoll(text) : 0;
    const std::string next = std::to_string((block + 1) % 900);
    const bool written =
        ftruncate(fd, 0) == 0 && pwrite(fd, next.data(), next.size(), 0) == static_cast<ssize_t>(next.size());
    flock(fd, LOCK_UN);
    close(fd);
    if (!written) throw std::runtime_error("cannot update the job id counter /tmp/arc_slurm_job_ids");
    return 1000 + block * 10;
  }

  void write_config() const {
    const passwd* user = getpwuid(getuid());
    const std::string name = user != nullptr ? user->pw_name : "root";
    std::ofstream out(conf());
    out << "ClusterName=arctest\nSlurmctldHost=localhost(127.0.0.1)\n"
        << "SlurmctldPort=" << free_port() << "\n"
        << "AuthType=auth/none\nCredType=cred/none\nProctrackType=proctrack/linuxproc\nTaskPlugin=task/none\n"
        << "SwitchType=switch/none\nMpiDefault=none\nSlurmUser=" << name << "\nSlurmdUser=" << name << "\n"
        << "StateSaveLocation=" << dir_ << "/state\nSlurmdSpoolDir=" << spool_of(dir_) << "%n\n"
        << "SlurmctldPidFile=" << dir_ << "/slurmctld.pid\nSlurmdPidFile=" << dir_ << "/slurmd-%n.pid\n"
        << "SlurmctldLogFile=" << dir_ << "/slurmctld.log\nSlurmdLogFile=" << dir_
        << "/slurmd-%n.log\n"
        // A requeued job waits for its credential to expire before it may start again (120 s by default).
        << "AuthInfo=cred_expire=5\nFirstJobId=" << first_job_id() << "\n"
        << "SchedulerType=sched/builtin\nSchedulerParameters=sched_interval=1\nSelectType=select/"
           "cons_tres\nSelectTypeParameters=CR_CPU\n"
        << "ReturnToService=2\nSlurmdParameters=config_overrides\nJobCompType=jobcomp/none\n"
        << "AccountingStorageType=accounting_storage/none\nKillWait=5\n";
    std::string names;
    for (const auto& node : node_names()) {
      out << "NodeName=" << node << " NodeHostname=localhost NodeAddr=127.0.0.1 Port=" << free_port()
          << " CPUs=" << (nodes_ == 1 ? 4 : 2) << " State=UNKNOWN\n";
      names += (names.empty() ? "" : ",") + node;
    }
    out << "PartitionName=debug Nodes=" << names << " Default=YES MaxTime=INFINITE State=UP\n";
  }

  pid_t start(const std::vector<std::string>& argv, const std::string& log) const {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_addopen(&actions, 1, log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    posix_spawn_file_actions_adddup2(&actions, 1, 2);
    std::vector<char*> args;
    for (const auto& arg : argv) args.push_back(const_cast<char*>(arg.c_str()));
    args.push_back(nullptr);
    pid_t pid = 0;
    const int failed = posix_spawnp(&pid, args[0], &actions, nullptr, args.data(), environ);
    posix_spawn_file_actions_destroy(&actions);
    if (failed != 0) throw std::runtime_error("cannot start " + argv[0]);
    return pid;
  }

  // Cancels every job and waits for the queue to drain (while the controller lives), ends the
  // daemons by PID, then every process of the jobs still there: step daemons that did not end with
  // their job, and the tasks under them.
  void stop() {
    if (controller_ == 0) return;
    const bool controller_alive = waitpid(controller_, nullptr, WNOHANG) == 0;
    if (controller_alive) {
      run_command(env() + " timeout 10 scancel --full --user=$(id -un)");
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
      while (!run_command(env() + " timeout 5 squeue -h").output.empty() && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    for (const pid_t pid : node_daemons_) end(pid);
    if (controller_alive) end(controller_);
    controller_ = 0;
    node_daemons_.clear();
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    for (auto left = processes_of(dir_); !left.empty() && std::chrono::steady_clock::now() < deadline;
         left = processes_of(dir_)) {
      for (const pid_t pid : left) kill(pid, SIGKILL);
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    std::filesystem::remove_all(dir_);
  }

  // SIGTERM, then SIGKILL after 5 s, to a daemon this object started (and reaps).
  static void end(pid_t pid) {
    kill(pid, SIGTERM);
    for (int i = 0; i < 100; ++i) {
      if (waitpid(pid, nullptr, WNOHANG) == pid) return;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    kill(pid, SIGKILL);
    waitpid(pid, nullptr, 0);
  }

  std::string dir_;
  pid_t controller_ = 0;
  int nodes_ = 1;
  std::vector<pid_t> node_daemons_;
};

}  // namespace arc::testing
