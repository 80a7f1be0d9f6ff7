// TracedCollectives: numbers and names every collective of a group, so that one that fails (a
// timeout, most often) says where every rank was: "rank 1 waits in all_reduce #4711 (gradient
// bucket 0, 1.08 MB) for 31 s", "rank 0 is not in a collective for 31 s; last completed ...". Each
// rank's watchdog thread writes its state to the store once it has not changed for a while (the
// store stays reachable when a collective is stuck); the failing rank reads every rank's.
#pragma once

#include <arc/strategies/collectives.h>

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace c10d {
class Store;
}

namespace arc {

class TracedCollectives : public Collectives {
 public:
  /// `prefix`: this group's keys in `store`. States are written once unchanged for a quarter of
  /// `collective_timeout` (between 0.1 and 5 s). A failure that `peer_failure` names (when set)
  /// is the error of a failed collective instead.
  TracedCollectives(std::unique_ptr<Collectives> inner, c10::intrusive_ptr<c10d::Store> store, std::string prefix,
                    std::chrono::milliseconds collective_timeout, PeerFailure peer_failure);
  ~TracedCollectives() override;
  TracedCollectives(const TracedCollectives&) = delete;
  TracedCollectives& operator=(const TracedCollectives&) = delete;

  int64_t rank() const override { return inner_->rank(); }
  int64_t world_size() const override { return inner_->world_size(); }
  std::string backend() const override { return inner_->backend(); }
  PendingWork all_reduce(torch::Tensor tensor, Reduce op) override;
  torch::Tensor reduce_buffer(int64_t numel, const torch::TensorOptions& options) override {
    return inner_->reduce_buffer(numel, options);
  }
  bool all_reduce_overlaps(const torch::TensorOptions& options) const override {
    return inner_->all_reduce_overlaps(options);
  }
  PendingWork start_broadcast(torch::Tensor tensor, int64_t src) override;
  std::vector<torch::Tensor> all_gather(const torch::Tensor& tensor) override;
  void reduce_scatter(torch::Tensor output, const torch::Tensor& input, Reduce op) override;
  PendingWork start_all_gather_into(torch::Tensor output, torch::Tensor input) override;
  void barrier() override;
  double blocked_seconds() const override;

 private:
  struct Op {
    const char* kind;
    std::string name;
    int64_t bytes;
    /// Unix time at which this rank started it.
    int64_t start_ms;
    /// Whether this rank's thread is blocked in it (an all-reduce in flight may be waited for later).
    bool waiting;
  };

  /// A new collective, being waited in.
  int64_t begin(const char* kind, int64_t bytes);
  /// Counts `waiting_` up or down, and the time blocked with it (under the lock).
  void count_waiting(bool more);
  /// Collective `seq` is (waiting) or is no longer (!waiting) being waited in.
  void set_waiting(int64_t seq, bool waiting);
  void end(int64_t seq);
  /// Runs `fn` as collective `seq`; a failure becomes an error with every rank's whereabouts.
  template <typename Fn>
  auto traced(int64_t seq, Fn&& fn) -> decltype(fn());
  /// Starts collective `kind` of `tensor`'s bytes with `start` (which returns its work): the work
  /// returned waits for it as that collective.
  template <typename Start>
  PendingWork started(const char* kind, const torch::Tensor& tensor, Start&& start);
  [[noreturn]] void fail(int64_t seq, const std::string& cause);
  /// This rank's state as the store keeps it (JSON text).
  std::string state_locked() const;
  void publish();
  void watch();
  /// One line per rank from the states in the store.
  std::string report(std::chrono::milliseconds wait_for_others);

  std::unique_ptr<Collectives> inner_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::string prefix_;
  std::chrono::milliseconds stale_after_;
  PeerFailure peer_failure_;

  mutable std::mutex mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;
  int64_t next_seq_ = 0;
  std::map<int64_t, Op> in_flight_;
  int64_t waiting_ = 0;
  /// Time blocked in collectives: the finished stretches, and when the current one began.
  std::chrono::steady_clock::duration blocked_{};
  std::chrono::steady_clock::time_point blocked_since_;
  int64_t last_seq_ = 0;
  std::string last_what_;
  int64_t idle_since_ms_ = 0;
  /// Changes with every begin and end; the watchdog writes a state once it stays put.
  int64_t version_ = 0;
  int64_t published_version_ = -1;
  std::thread watchdog_;
};

}  // namespace arc
