// SignalConnector.
#include <arc/core/signal_connector.h>

#include <arc/core/checkpoint_connector.h>
#include <arc/core/console.h>
#include <arc/core/subprocess.h>
#include <arc/core/trainer.h>
#include <arc/strategies/cluster/cluster_environment.h>
#include <arc/strategies/strategy.h>

#include <torch/torch.h>

#include <cstring>

namespace arc {
namespace {

volatile std::sig_atomic_t terminate_received = 0;
volatile std::sig_atomic_t requeue_received = 0;

// A second SIGTERM ends the process at once, as it would without Arclight: a launcher that
// asks twice does not wait for a batch that may never end.
extern "C" void on_terminate(int) {
  if (terminate_received != 0) {
    std::signal(SIGTERM, SIG_DFL);
    std::raise(SIGTERM);
  }
  terminate_received = 1;
}

extern "C" void on_requeue(int) { requeue_received = 1; }

void install(int signal, void (*handler)(int), struct sigaction* previous) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  // Restart interrupted system calls: file and socket I/O of the step carries on unharmed.
  action.sa_flags = SA_RESTART;
  sigaction(signal, &action, previous);
}

}  // namespace

SignalConnector::SignalConnector(Trainer& trainer) : trainer_(trainer), ballot_(torch::zeros({2}, torch::kLong)) {
  terminate_received = 0;
  requeue_received = 0;
  install(SIGTERM, on_terminate, &previous_terminate_);
  const auto& options = trainer.options();
  if (options.auto_requeue() && cluster::env("SLURM_JOB_ID")) {
    requeue_signal_ = options.requeue_signal_number();
    install(requeue_signal_, on_requeue, &previous_requeue_);
  }
}

SignalConnector::~SignalConnector() {
  sigaction(SIGTERM, &previous_terminate_, nullptr);
  if (requeue_signal_ != 0) sigaction(requeue_signal_, &previous_requeue_, nullptr);
  try {
    vote_.wait();
  } catch (const std::exception& error) {
    console().warn("the last signal vote failed: {}", error.what());
  }
}

SignalConnector::Received SignalConnector::agreed() {
  const Received local{terminate_received != 0, requeue_received != 0};
  auto* group = trainer_.strategy().collectives();
  if (group == nullptr || group->world_size() == 1) return local;
  // The ballot is reused: the previous vote has completed before it is read and refilled.
  int64_t* ballot = ballot_.data_ptr<int64_t>();
  Received result;
  if (vote_.started()) {
    vote_.wait();
    result = {ballot[0] > 0, ballot[1] > 0};
  }
  ballot[0] = local.terminate ? 1 : 0;
  ballot[1] = local.requeue ? 1 : 0;
  vote_ = group->all_reduce(ballot_, Reduce::max);
  return result;
}

void SignalConnector::check() {
  const auto received = agreed();
  if (received.terminate || received.requeue) save_and_stop(received);
}

void SignalConnector::save_and_stop(const Received& received) {
  const std::string name = received.terminate ? "SIGTERM" : trainer_.options().requeue_signal();
  const std::string path = CheckpointConnector(trainer_).hpc_save_path();
  const int64_t step = trainer_.global_step();
  console().warn("{} received: saving '{}' at global step {}", name, path, step);
  trainer_.save_checkpoint(path);
  // No rank leaves (and no launcher reacts to its exit) before the file is complete.
  trainer_.strategy().barrier();
  if (received.terminate)
    ARC_FAIL("fit stopped by SIGTERM at global step ", step, "; saved '", path,
             "', and the next fit with the same default_root_dir resumes from it");
  const std::string job = cluster::env("SLURM_JOB_ID").value_or("");
  if (trainer_.is_global_zero()) {
    std::string failure;
    try {
      const int code = run_program({"scontrol", "requeue", job}, std::chrono::seconds(60));
      if (code != 0) failure = "exit code " + std::to_string(code);
    } catch (const Error& error) {
      failure = error.what();
    }
    ARC_CHECK(failure.empty(), "fit stopped by ", name, " at global step ", step, " and saved '", path,
              "', but 'scontrol requeue ", job, "' failed (", failure, "); submit the job again to resume from it");
    console().info("requeued SLURM job {}", job);
  }
  ARC_FAIL("fit stopped by ", name, " at global step ", step, "; saved '", path, "' and requeued SLURM job ", job,
           ", which resumes from it");
}

}  // namespace arc
