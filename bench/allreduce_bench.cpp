// All-reduce latency and bandwidth between two local processes: shared memory (an ordinary tensor,
// copied through the slots; a buffer from reduce_buffer, reduced where it lies, as DDP's buckets
// are; and such a buffer that each rank writes whole before every all-reduce, as backward writes
// DDP's buckets, so that each rank reads the other's share from the other core's cache, not from
// its own as in back-to-back all-reduces) against Gloo, in the same invocation; and, as the limit of
// an ordinary tensor's all-reduce, a plain memcpy of it on both ranks at once (copy: each rank reads
// its tensor and writes as many bytes, which the all-reduce must do at least) and an exchange of it
// through shared memory (exchange: each rank copies its tensor into a shared file, then, after a
// barrier, the other rank's copy out of it: the bytes that cross between the cores in a two-rank
// all-reduce, whose reduce-scatter and all-gather each hand half of them over). The program starts
// its second rank itself (the same binary, with the same arguments, so that both ranks run the same
// number of all-reduces).
//   arc_bench_allreduce [iterations=200] [backends=shm,buffer,written,copy,exchange,gloo: any of them]
#include "bench_util.h"

#include <arc/strategies/detail/process_group.h>
#include <arc/strategies/detail/shm_segment.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <map>

extern char** environ;

namespace arc::bench {
namespace {

const std::vector<int64_t> kBytes = {4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20};

// As DDP chooses for two ranks of one thread.
RendezvousOptions fitted() {
  RendezvousOptions options;
  fit_shm_to_cores(options, 2, 1);
  return options;
}

std::unique_ptr<Collectives> join(int64_t rank, int64_t port, bool shared_memory,
                                  c10::intrusive_ptr<c10d::TCPStore> hosted) {
  RendezvousOptions options = fitted();
  options.rank = rank;
  options.world_size = 2;
  options.port = port;
  options.timeout = std::chrono::seconds(60);
  options.shared_memory = shared_memory;
  return make_collectives(options, std::move(hosted));
}

const std::vector<std::string> kBackends = {"shm", "buffer", "written", "copy", "exchange", "gloo"};
// The backends whose ratio to the buffer the table gives.
const std::vector<std::string> kAgainstBuffer = {"shm", "written", "gloo"};

// A /dev/shm file of one region of the largest size per rank, made by rank 0 and mapped by both
// (its name goes to rank 1 in a broadcast), unlinked once both have it.
std::unique_ptr<ShmFile> shared_file(Collectives& group) {
  const size_t bytes = 2 * static_cast<size_t>(kBytes.back());
  auto file = group.rank() == 0 ? ShmFile::create(bytes) : nullptr;
  const auto name = broadcast_text(group, file ? file->name() : "", 0);
  if (!file) file = ShmFile::open(name, bytes);
  group.barrier();
  if (group.rank() == 0) file->unlink();
  return file;
}

// Median microseconds of one all-reduce of `bytes` of float32, for every size: of an ordinary
// tensor (shm, gloo), or of a buffer from reduce_buffer (buffer; written: filled before each); or
// of a memcpy of an ordinary tensor into another (copy), both ranks at once; or of an exchange of
// an ordinary tensor through a shared file (exchange).
std::vector<double> measure(Collectives& group, int iterations, const std::string& backend) {
  const bool write_first = backend == "written", shared_buffer = write_first || backend == "buffer";
  const auto exchange = backend == "exchange" ? shared_file(group) : nullptr;
  std::vector<double> micros;
  // A rank just started may share its parent's core until the scheduler moves it (~10 ms here),
  // and while it does every all-reduce costs both a preemption (~50 us): warming up with small
  // all-reduces lets that pass before anything is timed (once it set the 4 KB row's median).
  auto small = torch::ones({1024});
  for (int i = 0; i < 1000; ++i) group.all_reduce(small, Reduce::sum).wait();
  for (const int64_t bytes : kBytes) {
    auto tensor = shared_buffer ? group.reduce_buffer(bytes / 4, torch::kFloat).fill_(1) : torch::ones({bytes / 4});
    const auto copy = backend == "copy" || exchange ? torch::empty_like(tensor) : torch::Tensor();
    const int runs = bytes >= (16 << 20) ? std::max(iterations / 10, 5) : iterations;
    const auto step = [&] {
      if (exchange) {
        std::byte* const regions = exchange->data();  // one of the largest size per rank
        std::memcpy(regions + group.rank() * kBytes.back(), tensor.data_ptr(), tensor.nbytes());
        group.barrier();
        std::memcpy(copy.data_ptr(), regions + (1 - group.rank()) * kBytes.back(), tensor.nbytes());
      } else if (copy.defined()) {
        std::memcpy(copy.data_ptr(), tensor.data_ptr(), tensor.nbytes());
      } else {
        group.all_reduce(tensor, Reduce::sum).wait();
      }
    };
    std::vector<double> times;
    for (int i = 0; i < runs + 5; ++i) {
      if (write_first) tensor.fill_(i);
      group.barrier();
      const double t = seconds(step);
      if (i >= 5) times.push_back(t * 1e6);
    }
    micros.push_back(median(times));
  }
  return micros;
}

pid_t spawn_rank1(char** argv, const std::string& ports) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  env.push_back("ARC_BENCH_PORTS=" + ports);
  std::vector<char*> envp;
  for (auto& e : env) envp.push_back(e.data());
  envp.push_back(nullptr);
  char exe[] = "/proc/self/exe";
  pid_t pid = 0;
  if (posix_spawn(&pid, exe, nullptr, nullptr, argv, envp.data()) != 0) throw std::runtime_error("spawn failed");
  return pid;
}

}  // namespace
}  // namespace arc::bench

int main(int argc, char** argv) try {
  using namespace arc::bench;
  torch::set_num_threads(1);
  const int iterations = static_cast<int>(whole_arg(argc, argv, 1, "iterations", 200));
  // Which backends to time, in the table's order.
  const auto chosen = names_arg(argc, argv, 2, "backend", kBackends, "shm,buffer,written,copy,exchange,gloo");
  const auto run = [&](const std::string& backend, int64_t rank, int64_t port,
                       c10::intrusive_ptr<c10d::TCPStore> store) {
    auto group = join(rank, port, backend != "gloo", std::move(store));
    return measure(*group, iterations, backend);
  };
  if (const char* ports = std::getenv("ARC_BENCH_PORTS")) {
    std::stringstream list(ports);
    for (const auto& backend : chosen) {
      std::string port;
      std::getline(list, port, ',');
      run(backend, 1, std::stoll(port), {});
    }
    return 0;
  }
  print_header("all-reduce of float32 between 2 local processes, median of " + std::to_string(iterations) +
               " (16 MB and up: of " + std::to_string(std::max(iterations / 10, 5)) + "), shared memory on " +
               (fitted().shm_helper_thread ? "a helper thread" : "the calling thread") + " as DDP would run it here");
  std::vector<std::unique_ptr<arc::StoreServer>> stores;
  std::string ports;
  for (size_t b = 0; b < chosen.size(); ++b) {
    stores.push_back(std::make_unique<arc::StoreServer>("127.0.0.1", 0, std::chrono::seconds(60)));
    ports += (b > 0 ? "," : "") + std::to_string(stores.back()->port());
  }
  const pid_t child = spawn_rank1(argv, ports);
  std::map<std::string, std::vector<double>> micros;
  try {
    for (size_t b = 0; b < chosen.size(); ++b)
      micros[chosen[b]] = run(chosen[b], 0, stores[b]->port(), stores[b]->store());
  } catch (...) {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    throw;
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("rank 1 (pid " + std::to_string(child) + ") failed; its error is above");
  // Each backend's microseconds, then its GB/s, then the ratios to the buffer; a blank where a
  // backend was not timed.
  std::cout << std::right << std::setw(10) << "size";
  for (const auto& backend : kBackends) std::cout << std::setw(12) << backend + " us";
  for (const auto& backend : kBackends) std::cout << std::setw(14) << backend + " GB/s";
  for (const auto& backend : kAgainstBuffer) std::cout << std::setw(16) << backend + "/buffer";
  std::cout << std::setw(10) << "shm/copy" << std::setw(14) << "shm/exchange"
            << "\n";
  const auto cell = [](double value) {
    std::ostringstream text;
    if (value > 0) text << std::fixed << std::setprecision(value < 10 ? 2 : 1) << value;
    return text.str();
  };
  for (size_t i = 0; i < kBytes.size(); ++i) {
    const double mb = static_cast<double>(kBytes[i]) / (1 << 20);
    std::ostringstream size;
    size << (mb < 1 ? kBytes[i] / 1024 : static_cast<int64_t>(mb)) << (mb < 1 ? " KB" : " MB");
    const auto us = [&](const std::string& backend) { return micros.count(backend) ? micros[backend][i] : 0.0; };
    const double bytes = static_cast<double>(kBytes[i]), buffer = us("buffer");
    std::cout << std::setw(10) << size.str();
    for (const auto& backend : kBackends) std::cout << std::setw(12) << cell(us(backend));
    for (const auto& backend : kBackends)
      std::cout << std::setw(14) << cell(us(backend) > 0 ? bytes / us(backend) / 1e3 : 0.0);
    for (const auto& backend : kAgainstBuffer)
      std::cout << std::setw(16) << cell(buffer > 0 ? us(backend) / buffer : 0.0);
    std::cout << std::setw(10) << cell(us("copy") > 0 ? us("shm") / us("copy") : 0.0) << std::setw(14)
              << cell(us("exchange") > 0 ? us("shm") / us("exchange") : 0.0) << "\n";
  }
  Summary summary("arc_bench_allreduce");
  for (const int64_t bytes : {int64_t{1} << 20, kBytes.back()}) {
    const auto i = static_cast<size_t>(std::find(kBytes.begin(), kBytes.end(), bytes) - kBytes.begin());
    for (const std::string backend : {"shm", "buffer", "gloo"})
      summary.add(std::to_string(bytes >> 20) + " MB " + backend + " us",
                  micros.count(backend) ? micros[backend][i] : Summary::kNotMeasured, 0);
  }
  summary.print();
  return 0;
} catch (const std::exception& error) {
  return arc::bench::failed("arc_bench_allreduce", error);
}
