// SignalConnector: the per-batch vote of a fit. It carries SIGTERM, SLURM's requeue signal and
// SIGINT (Ctrl-C), whose handlers only set a flag, and every reason to stop (request_stop, which
// EarlyStopping and Timer use, and max_time), and the validations a time-based val_check_interval
// asks for, so that every rank acts at the same batch: a rank that left the loop (or validated)
// alone would leave the others waiting in the gradient all-reduce.
// A checkpoint write that failed in the background (on rank 0) rides in the vote too, so that every
// rank fails with its error at the same batch. Each rank's clock rides in it as well: the latest is
// the time that decisions by the clock go by (Trainer::agreed_elapsed_seconds).
// On a signal it saves an HPC checkpoint (hpc_ckpt_<n>.ckpt, which the next fit in that folder
// resumes from), requeues the job when its launcher can (SLURM's auto_requeue), and ends fit with an
// error that says so; on
// SIGINT it ends fit with arc::Interrupted.
#pragma once

#include <arc/data/dataset.h>
#include <arc/strategies/collectives.h>

#include <torch/types.h>

#include <csignal>

namespace arc {

class Trainer;

namespace detail {
struct RunState;
}

/// Installed for the length of one fit; the previous handlers come back on destruction.
class SignalConnector {
 public:
  /// What every rank agreed to do at this batch boundary.
  struct Decision {
    /// Some rank asked to stop (Trainer::request_stop): the number of the fit's validation that the
    /// stop comes after (see RunState::stop_after_validation). 0: none asked.
    int64_t stop = 0;
    /// Some rank's clock passed max_time: the number of the validation that the stop comes after
    /// (the next at the boundary where it did). 0: not yet.
    int64_t time_up = 0;
    /// The number of the validation run that some rank asked for (a time-based val_check_interval
    /// ran out): due while it is past the runs done. 0: none asked.
    int64_t validation = 0;
    /// The earliest end of the epoch's training batches that a rank knows (its stream ends there);
    /// kUnknownLength: none knows one yet.
    int64_t batches_end = kUnknownLength;
    /// The largest batch count of the epoch that a rank reported (0: none).
    int64_t batches_most = 0;
    /// The latest of the ranks' clocks when they voted, in microseconds since the stage started: the
    /// same on every rank, for decisions by time that every rank must take together.
    int64_t elapsed_us = 0;
  };

  /// Catches the requeue signal of the run's cluster environment too, where it has one; reports the
  /// failures of its checkpoints written in the background.
  SignalConnector(Trainer& trainer, detail::RunState& state);
  ~SignalConnector();
  SignalConnector(const SignalConnector&) = delete;
  SignalConnector& operator=(const SignalConnector&) = delete;

  /// Called after every training batch: this rank's flags join a vote that overlaps the next batch,
  /// and what the ranks agreed in the previous vote takes effect. A signal saves and throws.
  /// `wants_validation`: this rank's time-based val_check_interval ran out. `batches_end`: where
  /// this rank's training batches end, if it knows; `batches_most`: the same, for the largest.
  Decision check(bool wants_validation = false, int64_t batches_end = kUnknownLength, int64_t batches_most = 0);
  /// Called where the batches of every rank end together (before the first epoch, after each, and
  /// where an epoch starts with counts to compare): waits for the vote in flight and votes once more
  /// with this rank's latest flags.
  Decision settle(bool wants_validation = false, int64_t batches_end = kUnknownLength, int64_t batches_most = 0);

 private:
  struct Ballot {
    bool terminate = false;
    bool requeue = false;
    bool interrupt = false;
    bool checkpoint_failed = false;
    Decision decision;
  };
  static constexpr int64_t kFields = 10;

  Ballot local(bool wants_validation, int64_t batches_end, int64_t batches_most) const;
  void fill(const Ballot& ballot);
  Ballot read() const;
  Decision act(const Ballot& agreed);
  [[noreturn]] void save_and_stop(const Ballot& received);
  [[noreturn]] void fail_with_checkpoint_write();

  Trainer& trainer_;
  detail::RunState& state_;
  /// The requeue signal's name and number; 0: none caught.
  std::string requeue_name_;
  int requeue_signal_ = 0;
  struct sigaction previous_terminate_ {};
  struct sigaction previous_interrupt_ {};
  struct sigaction previous_requeue_ {};
  torch::Tensor ballot_;
  PendingWork vote_;
};

}  // namespace arc
