// SignalConnector: SIGTERM, and SLURM's requeue signal, during fit. The handlers only set a flag;
// the fit loop acts at the next batch boundary once every rank has agreed: it saves an HPC
// checkpoint (hpc_ckpt_<n>.ckpt, which the next fit in that folder resumes from), requeues the
// SLURM job when asked, and ends fit with an error that says so.
#pragma once

#include <arc/strategies/collectives.h>

#include <torch/types.h>

#include <csignal>

namespace arc {

class Trainer;

/// Installed for the length of one fit; the previous handlers come back on destruction.
class SignalConnector {
 public:
  explicit SignalConnector(Trainer& trainer);
  ~SignalConnector();
  SignalConnector(const SignalConnector&) = delete;
  SignalConnector& operator=(const SignalConnector&) = delete;

  /// Called after every training batch. When a signal arrived (on any rank), saves and throws.
  void check();

 private:
  struct Received {
    bool terminate = false;
    bool requeue = false;
  };
  /// What the ranks agreed on. Each call starts a max-reduction of this rank's flags and returns
  /// the previous call's result, so the vote overlaps a batch and every rank acts at the same one.
  Received agreed();
  [[noreturn]] void save_and_stop(const Received& received);

  Trainer& trainer_;
  int requeue_signal_ = 0;
  struct sigaction previous_terminate_ {};
  struct sigaction previous_requeue_ {};
  torch::Tensor ballot_;
  PendingWork vote_;
};

}  // namespace arc
