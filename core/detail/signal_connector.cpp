// SignalConnector.
#include <arc/core/detail/signal_connector.h>

#include <arc/base/console.h>
#include <arc/base/error.h>
#include <arc/core/detail/checkpoint_connector.h>
#include <arc/core/detail/run_state.h>
#include <arc/core/trainer.h>
#include <arc/fabric/async_checkpoint_writer.h>
#include <arc/strategies/cluster/cluster_environment.h>
#include <arc/strategies/strategy.h>

#include <torch/torch.h>

#include <cstring>

namespace arc {
namespace {

volatile std::sig_atomic_t terminate_received = 0;
volatile std::sig_atomic_t requeue_received = 0;
volatile std::sig_atomic_t interrupt_from_terminal = 0;
volatile std::sig_atomic_t interrupt_sent = 0;

// A second SIGTERM or SIGINT ends the process at once, as it would without Arclight: a launcher
// or a user that asks twice does not wait for a batch that may never end.
void second_ends_at_once(volatile std::sig_atomic_t& received, int signal) {
  if (received != 0) {
    std::signal(signal, SIG_DFL);
    std::raise(signal);
  }
  received = 1;
}

extern "C" void on_terminate(int) { second_ends_at_once(terminate_received, SIGTERM); }
extern "C" void on_requeue(int) { requeue_received = 1; }

// One Ctrl-C can reach a launcher's rank twice: from the terminal driver (SI_KERNEL) and again from
// a launcher that passes it on (torchrun's agent, with kill). One of each kind is one Ctrl-C; a second
// of the same kind is a second Ctrl-C.
extern "C" void on_interrupt(int, siginfo_t* info, void*) {
  second_ends_at_once(info->si_code == SI_KERNEL ? interrupt_from_terminal : interrupt_sent, SIGINT);
}

void install(int signal, void (*handler)(int), struct sigaction* previous) {
  struct sigaction action {};
  action.sa_handler = handler;
  sigemptyset(&action.sa_mask);
  // Restart interrupted system calls: file and socket I/O of the step carries on unharmed.
  action.sa_flags = SA_RESTART;
  sigaction(signal, &action, previous);
}

void install_interrupt(struct sigaction* previous) {
  struct sigaction action {};
  action.sa_sigaction = on_interrupt;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART | SA_SIGINFO;
  sigaction(SIGINT, &action, previous);
}

// The group when there is more than one rank to agree with.
Collectives* group_of(Trainer& trainer) {
  auto* group = trainer.strategy().collectives();
  return group != nullptr && group->world_size() > 1 ? group : nullptr;
}

}  // namespace

SignalConnector::SignalConnector(Trainer& trainer, detail::RunState& state)
    : trainer_(trainer), state_(state), ballot_(torch::zeros({kFields}, torch::kLong)) {
  terminate_received = 0;
  requeue_received = 0;
  interrupt_from_terminal = 0;
  interrupt_sent = 0;
  install(SIGTERM, on_terminate, &previous_terminate_);
  install_interrupt(&previous_interrupt_);
  if (const auto requeue = state_.cluster_environment->requeue_signal()) {
    requeue_name_ = *requeue;
    requeue_signal_ = cluster::requeue_signal_number(requeue_name_);
    install(requeue_signal_, on_requeue, &previous_requeue_);
  }
}

SignalConnector::~SignalConnector() {
  sigaction(SIGTERM, &previous_terminate_, nullptr);
  sigaction(SIGINT, &previous_interrupt_, nullptr);
  if (requeue_signal_ != 0) sigaction(requeue_signal_, &previous_requeue_, nullptr);
  try {
    vote_.wait();
  } catch (const std::exception& error) {
    console().warn("the last signal vote failed: {}", error.what());
  }
}

SignalConnector::Ballot SignalConnector::local(bool wants_validation, int64_t batches_end, int64_t batches_most) const {
  Ballot ballot;
  ballot.terminate = terminate_received != 0;
  ballot.requeue = requeue_received != 0;
  ballot.interrupt = interrupt_from_terminal != 0 || interrupt_sent != 0;
  ballot.checkpoint_failed = state_.checkpoint_writes.failed();
  const int64_t next_validation = trainer_.progress().validation_runs + 1;
  ballot.decision.stop = state_.stop_after_validation;
  const auto& max_time = trainer_.options().max_time();
  ballot.decision.time_up = max_time && trainer_.elapsed_seconds() >= *max_time ? next_validation : 0;
  ballot.decision.validation = wants_validation ? next_validation : 0;
  ballot.decision.batches_end = batches_end;
  ballot.decision.batches_most = batches_most;
  ballot.decision.elapsed_us = static_cast<int64_t>(trainer_.elapsed_seconds() * 1e6);
  return ballot;
}

void SignalConnector::fill(const Ballot& ballot) {
  int64_t* out = ballot_.data_ptr<int64_t>();
  out[0] = ballot.terminate;
  out[1] = ballot.requeue;
  out[2] = ballot.interrupt;
  out[3] = ballot.decision.stop;
  out[4] = ballot.decision.time_up;
  out[5] = ballot.decision.validation;
  out[6] = -ballot.decision.batches_end;  // the maximum of the negatives: the earliest end
  out[7] = ballot.decision.batches_most;
  out[8] = ballot.checkpoint_failed;
  out[9] = ballot.decision.elapsed_us;
}

SignalConnector::Ballot SignalConnector::read() const {
  const int64_t* in = ballot_.data_ptr<int64_t>();
  return {in[0] > 0, in[1] > 0, in[2] > 0, in[8] > 0, {in[3], in[4], in[5], -in[6], in[7], in[9]}};
}

SignalConnector::Decision SignalConnector::check(bool wants_validation, int64_t batches_end, int64_t batches_most) {
  auto* group = group_of(trainer_);
  if (group == nullptr) return act(local(wants_validation, batches_end, batches_most));
  // The ballot is reused: the previous vote has completed before it is read and refilled.
  Ballot agreed;
  if (vote_.started()) {
    vote_.wait();
    vote_ = PendingWork();
    agreed = read();
  }
  fill(local(wants_validation, batches_end, batches_most));
  const CollectiveName name("signal vote");
  vote_ = group->all_reduce(ballot_, Reduce::max);
  return act(agreed);
}

SignalConnector::Decision SignalConnector::settle(bool wants_validation, int64_t batches_end, int64_t batches_most) {
  auto* group = group_of(trainer_);
  if (group == nullptr) return act(local(wants_validation, batches_end, batches_most));
  vote_.wait();
  vote_ = PendingWork();
  // Every flag only ever turns on (the validation asked for only grows, the end only comes
  // nearer), so this vote includes everything the one in flight carried.
  fill(local(wants_validation, batches_end, batches_most));
  const CollectiveName name("signal vote");
  group->all_reduce(ballot_, Reduce::max).wait();
  return act(read());
}

SignalConnector::Decision SignalConnector::act(const Ballot& agreed) {
  if (agreed.checkpoint_failed) fail_with_checkpoint_write();
  if (agreed.terminate || agreed.requeue) save_and_stop(agreed);
  if (agreed.interrupt)
    throw Interrupted(detail::str("fit interrupted by SIGINT (Ctrl-C) at global step ", trainer_.global_step()));
  return agreed.decision;
}

// Rank 0 writes checkpoints, so its error is the one every rank reports.
void SignalConnector::fail_with_checkpoint_write() {
  const auto failure = CheckpointConnector::rank_zero_write_failure(trainer_, state_.checkpoint_writes);
  ARC_FAIL("fit stopped at global step ", trainer_.global_step(), ": a checkpoint written in the background ",
           "(async_checkpointing) failed on rank 0: ", failure);
}

void SignalConnector::save_and_stop(const Ballot& received) {
  const std::string name = received.terminate ? "SIGTERM" : requeue_name_;
  const std::string path = CheckpointConnector::hpc_save_path(trainer_.options().default_root_dir());
  const int64_t step = trainer_.global_step();
  console().warn("{} received: saving '{}' at global step {}", name, path, step);
  trainer_.save_checkpoint(path, false, false);
  // No rank leaves (and no launcher reacts to its exit) before the file is complete.
  const CollectiveName barrier_name("checkpoint save");
  trainer_.strategy().barrier();
  if (received.terminate)
    ARC_FAIL("fit stopped by SIGTERM at global step ", step, "; saved '", path,
             "', and the next fit with the same default_root_dir resumes from it");
  // Rank 0 asks; the others say what it does.
  std::string requeued = "the job";
  if (trainer_.is_global_zero()) {
    try {
      requeued = state_.cluster_environment->requeue_job();
      // Said first: a launcher may end this process as it requeues the job (Slurm 24.11 does).
      console().info("requeuing {}", requeued);
      state_.cluster_environment->requeue();
    } catch (const Error& error) {
      ARC_FAIL("fit stopped by ", name, " at global step ", step, " and saved '", path, "', but ", error.what(),
               "; submit the job again to resume from it");
    }
    console().info("requeued {}", requeued);
  }
  ARC_FAIL("fit stopped by ", name, " at global step ", step, "; saved '", path, "' and requeued ", requeued,
           ", which resumes from it");
}

}  // namespace arc
