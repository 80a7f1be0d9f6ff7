// TracedCollectives and CollectiveName.
#include <arc/strategies/detail/collective_trace.h>

#include <arc/base/error.h>

#include <fmt/format.h>
#include <nlohmann/json.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <algorithm>
#include <utility>

namespace arc {
namespace {

thread_local const char* name_what = nullptr;
thread_local int64_t name_index = -1;

int64_t unix_ms() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::string size_text(int64_t bytes) {
  if (bytes >= 1'000'000) return fmt::format("{:.2f} MB", static_cast<double>(bytes) / 1e6);
  if (bytes >= 1'000) return fmt::format("{:.1f} KB", static_cast<double>(bytes) / 1e3);
  return fmt::format("{} B", bytes);
}

// "all_reduce #4711 (gradient bucket 0, 1.08 MB)".
std::string op_text(const std::string& kind, int64_t seq, const std::string& name, int64_t bytes) {
  std::string details = name;
  if (bytes > 0) details += (details.empty() ? "" : ", ") + size_text(bytes);
  return fmt::format("{} #{}{}", kind, seq, details.empty() ? "" : " (" + details + ")");
}

std::string seconds_since(int64_t since_ms) {
  return fmt::format("{:.1f} s", static_cast<double>(std::max<int64_t>(0, unix_ms() - since_ms)) / 1000.0);
}

}  // namespace

CollectiveName::CollectiveName(const char* what, int64_t index)
    : previous_what_(name_what), previous_index_(name_index) {
  name_what = what;
  name_index = index;
}

CollectiveName::~CollectiveName() {
  name_what = previous_what_;
  name_index = previous_index_;
}

std::string CollectiveName::current() {
  if (name_what == nullptr) return "";
  return name_index >= 0 ? fmt::format("{} {}", name_what, name_index) : std::string(name_what);
}

TracedCollectives::TracedCollectives(std::unique_ptr<Collectives> inner, c10::intrusive_ptr<c10d::Store> store,
                                     std::string prefix, std::chrono::milliseconds collective_timeout,
                                     PeerFailure peer_failure)
    : inner_(std::move(inner)),
      store_(std::move(store)),
      prefix_(std::move(prefix)),
      stale_after_(std::clamp(collective_timeout / 4, std::chrono::milliseconds(100), std::chrono::milliseconds(5000))),
      peer_failure_(std::move(peer_failure)),
      idle_since_ms_(unix_ms()) {
  watchdog_ = std::thread([this] { watch(); });
}

TracedCollectives::~TracedCollectives() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  stop_cv_.notify_all();
  watchdog_.join();
}

int64_t TracedCollectives::begin(const char* kind, int64_t bytes) {
  std::string name = CollectiveName::current();
  std::lock_guard<std::mutex> lock(mutex_);
  const int64_t seq = ++next_seq_;
  in_flight_.emplace(seq, Op{kind, std::move(name), bytes, unix_ms(), true});
  count_waiting(true);
  ++version_;
  return seq;
}

void TracedCollectives::count_waiting(bool more) {
  const auto now = std::chrono::steady_clock::now();
  if (more) {
    if (waiting_++ == 0) blocked_since_ = now;
    return;
  }
  if (--waiting_ > 0) return;
  blocked_ += now - blocked_since_;
  idle_since_ms_ = unix_ms();
}

double TracedCollectives::blocked_seconds() const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto blocked = blocked_;
  if (waiting_ > 0) blocked += std::chrono::steady_clock::now() - blocked_since_;
  return std::chrono::duration<double>(blocked).count();
}

void TracedCollectives::set_waiting(int64_t seq, bool waiting) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = in_flight_.find(seq);
  if (found == in_flight_.end() || found->second.waiting == waiting) return;
  found->second.waiting = waiting;
  count_waiting(waiting);
  ++version_;
}

void TracedCollectives::end(int64_t seq) {
  std::lock_guard<std::mutex> lock(mutex_);
  const auto found = in_flight_.find(seq);
  if (found == in_flight_.end()) return;  // waited for before
  if (seq > last_seq_) {
    last_seq_ = seq;
    last_what_ = op_text(found->second.kind, seq, found->second.name, found->second.bytes);
  }
  if (found->second.waiting) count_waiting(false);
  in_flight_.erase(found);
  ++version_;
}

template <typename Fn>
auto TracedCollectives::traced(int64_t seq, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::exception& error) {
    fail(seq, error.what());
  }
}

template <typename Start>
PendingWork TracedCollectives::started(const char* kind, const torch::Tensor& tensor, Start&& start) {
  const int64_t seq = begin(kind, tensor.numel() * static_cast<int64_t>(tensor.element_size()));
  auto work = traced(seq, std::forward<Start>(start));
  set_waiting(seq, false);
  return PendingWork([this, seq, work]() mutable {
    set_waiting(seq, true);
    traced(seq, [&] { work.wait(); });
    end(seq);
  });
}

PendingWork TracedCollectives::all_reduce(torch::Tensor tensor, Reduce op) {
  check_reduction(tensor, op);
  return started("all_reduce", tensor, [&] { return inner_->all_reduce(tensor, op); });
}

PendingWork TracedCollectives::start_broadcast(torch::Tensor tensor, int64_t src) {
  return started("broadcast", tensor, [&] { return inner_->start_broadcast(tensor, src); });
}

std::vector<torch::Tensor> TracedCollectives::all_gather(const torch::Tensor& tensor) {
  const int64_t seq = begin("all_gather", tensor.numel() * static_cast<int64_t>(tensor.element_size()));
  auto gathered = traced(seq, [&] { return inner_->all_gather(tensor); });
  end(seq);
  return gathered;
}

void TracedCollectives::reduce_scatter(torch::Tensor output, const torch::Tensor& input, Reduce op) {
  const int64_t seq = begin("reduce_scatter", input.numel() * static_cast<int64_t>(input.element_size()));
  traced(seq, [&] { inner_->reduce_scatter(output, input, op); });
  end(seq);
}

PendingWork TracedCollectives::start_all_gather_into(torch::Tensor output, torch::Tensor input) {
  return started("all_gather", input, [&] { return inner_->start_all_gather_into(output, input); });
}

void TracedCollectives::barrier() {
  const int64_t seq = begin("barrier", 0);
  traced(seq, [&] { inner_->barrier(); });
  end(seq);
}

std::string TracedCollectives::state_locked() const {
  nlohmann::json waits = nlohmann::json::array();
  for (const auto& [seq, op] : in_flight_)
    if (op.waiting) waits.push_back({{"what", op_text(op.kind, seq, op.name, op.bytes)}, {"since_ms", op.start_ms}});
  return nlohmann::json{{"waits", waits}, {"last", last_what_}, {"idle_since_ms", idle_since_ms_}}.dump();
}

void TracedCollectives::publish() {
  std::string text;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    text = state_locked();
    published_version_ = version_;
  }
  store_->set(prefix_ + "/trace/" + std::to_string(rank()), std::vector<uint8_t>(text.begin(), text.end()));
}

// Writes this rank's state once it has stayed the same for stale_after_: nothing while collectives
// come and go, one write when the rank stops (stuck, or between stages).
void TracedCollectives::watch() {
  std::unique_lock<std::mutex> lock(mutex_);
  int64_t seen = -1;
  auto seen_at = std::chrono::steady_clock::now();
  while (!stopping_) {
    stop_cv_.wait_for(lock, std::chrono::milliseconds(100));
    if (stopping_) break;
    const auto now = std::chrono::steady_clock::now();
    if (version_ != seen) {
      seen = version_;
      seen_at = now;
      continue;
    }
    if (published_version_ == version_ || now - seen_at < stale_after_) continue;
    lock.unlock();
    try {
      publish();
    } catch (const std::exception&) {
      // The store went away (the run is ending, or rank 0 exited): nothing to tell anyone.
    }
    lock.lock();
  }
}

std::string TracedCollectives::report(std::chrono::milliseconds wait_for_others) {
  const auto deadline = std::chrono::steady_clock::now() + wait_for_others;
  std::string out;
  for (int64_t r = 0; r < world_size(); ++r) {
    const std::string key = prefix_ + "/trace/" + std::to_string(r);
    while (!store_->check({key}) && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (!store_->check({key})) {
      out += fmt::format("\n  rank {}: no state in the store (it may have exited, see its log)", r);
      continue;
    }
    const auto bytes = store_->get(key);
    const auto state = nlohmann::json::parse(std::string(bytes.begin(), bytes.end()));
    const auto& waits = state.at("waits");
    const std::string last = state.at("last").get<std::string>();
    const std::string completed = last.empty() ? "; no collective completed yet" : "; last completed " + last;
    if (!waits.empty()) {
      out += fmt::format("\n  rank {}: waits in {} for {}{}", r, waits[0].at("what").get<std::string>(),
                         seconds_since(waits[0].at("since_ms").get<int64_t>()), completed);
    } else {
      out += fmt::format("\n  rank {}: in no collective for {} (in its own work: a step, data, a save){}", r,
                         seconds_since(state.at("idle_since_ms").get<int64_t>()), completed);
    }
  }
  return out;
}

void TracedCollectives::fail(int64_t seq, const std::string& cause) {
  // A rank that died is the usual cause; its launcher may take a moment to see it.
  throw_peer_failure(peer_failure_, std::chrono::milliseconds(500));
  std::string where;
  try {
    publish();
    // A rank that has been where it is for stale_after_ has written its state already; when this
    // failure is a timeout (collective_timeout >= 4 stale_after_) that is every rank still alive.
    where = report(std::chrono::milliseconds(200));
  } catch (const std::exception& error) {
    where = fmt::format("\n  (the store is unreachable: {}; rank 0, which hosts it, may have exited)", error.what());
  }
  ARC_FAIL(cause, "\nWhere the ranks were when collective #", seq, " of rank ", rank(), " failed:", where);
}

}  // namespace arc
