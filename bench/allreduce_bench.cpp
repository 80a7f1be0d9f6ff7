// All-reduce latency and bandwidth between two local processes: shared memory against Gloo, in
// the same invocation. The program starts its second rank itself (the same binary, with the same
// arguments, so that both ranks run the same number of all-reduces).
//   arc_bench_allreduce [iterations=200] [backends=shm,gloo: either or both]
#include "bench_util.h"

#include <arc/strategies/process_group.h>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdlib>
#include <iomanip>
#include <map>

extern char** environ;

namespace arc::bench {
namespace {

const std::vector<int64_t> kBytes = {4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20, 64 << 20};

std::unique_ptr<Collectives> join(int64_t rank, int64_t port, bool shared_memory,
                                  c10::intrusive_ptr<c10d::TCPStore> hosted) {
  RendezvousOptions options;
  options.rank = rank;
  options.world_size = 2;
  options.port = port;
  options.timeout = std::chrono::seconds(60);
  options.shared_memory = shared_memory;
  return make_collectives(options, std::move(hosted));
}

// Median microseconds of one all-reduce of `bytes` of float32, for every size.
std::vector<double> measure(Collectives& group, int iterations) {
  std::vector<double> micros;
  for (const int64_t bytes : kBytes) {
    auto tensor = torch::ones({bytes / 4});
    const int runs = bytes >= (16 << 20) ? std::max(iterations / 10, 5) : iterations;
    std::vector<double> times;
    for (int i = 0; i < runs + 5; ++i) {
      group.barrier();
      const double t = seconds([&] { group.all_reduce(tensor, Reduce::sum).wait(); });
      if (i >= 5) times.push_back(t * 1e6);
    }
    micros.push_back(median(times));
  }
  return micros;
}

pid_t spawn_rank1(char** argv, int64_t shm_port, int64_t gloo_port) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  env.push_back("ARC_BENCH_PORTS=" + std::to_string(shm_port) + "," + std::to_string(gloo_port));
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
  const std::string count = argc > 1 ? argv[1] : "200";
  const int iterations = std::atoi(count.c_str());
  if (iterations < 1) {
    std::cerr << "arc_bench_allreduce: iterations must be a whole number of at least 1, got '" << count << "'\n";
    return 2;
  }
  // Which backends to time, in the table's order: shared memory, Gloo.
  std::vector<bool> shared_memory;
  std::stringstream backends(argc > 2 ? argv[2] : "shm,gloo");
  for (std::string backend; std::getline(backends, backend, ',');) {
    if (backend != "shm" && backend != "gloo") {
      std::cerr << "arc_bench_allreduce: unknown backend '" << backend << "'; name shm, gloo or shm,gloo\n";
      return 2;
    }
    shared_memory.push_back(backend == "shm");
  }
  if (const char* ports = std::getenv("ARC_BENCH_PORTS")) {
    const std::string text = ports;
    const auto comma = text.find(',');
    for (const bool shm : shared_memory) {
      auto group = join(1, std::stoll(shm ? text.substr(0, comma) : text.substr(comma + 1)), shm, {});
      measure(*group, iterations);
    }
    return 0;
  }
  print_header("all-reduce of float32 between 2 local processes, median of " + std::to_string(iterations) +
               " (16 MB and up: of " + std::to_string(std::max(iterations / 10, 5)) + ")");
  arc::StoreServer shm_store("127.0.0.1", 0, std::chrono::seconds(60));
  arc::StoreServer gloo_store("127.0.0.1", 0, std::chrono::seconds(60));
  const pid_t child = spawn_rank1(argv, shm_store.port(), gloo_store.port());
  std::map<bool, std::vector<double>> micros;
  try {
    for (const bool shm : shared_memory) {
      auto group = join(0, (shm ? shm_store : gloo_store).port(), shm, (shm ? shm_store : gloo_store).store());
      micros[shm] = measure(*group, iterations);
    }
  } catch (...) {
    kill(child, SIGKILL);
    waitpid(child, nullptr, 0);
    throw;
  }
  int status = 0;
  waitpid(child, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
    throw std::runtime_error("rank 1 (pid " + std::to_string(child) + ") failed; its error is above");
  std::cout << std::right << std::setw(10) << "size" << std::setw(12) << "shm us" << std::setw(12) << "gloo us"
            << std::setw(10) << "speedup" << std::setw(12) << "shm GB/s" << std::setw(12) << "gloo GB/s"
            << "\n";
  // A figure, or blank where its backend was not timed (0).
  const auto cell = [](double value) {
    std::ostringstream text;
    if (value > 0) text << std::fixed << std::setprecision(value < 10 ? 2 : 1) << value;
    return text.str();
  };
  for (size_t i = 0; i < kBytes.size(); ++i) {
    const double mb = static_cast<double>(kBytes[i]) / (1 << 20);
    std::ostringstream size;
    size << (mb < 1 ? kBytes[i] / 1024 : static_cast<int64_t>(mb)) << (mb < 1 ? " KB" : " MB");
    const double s = micros.count(true) ? micros[true][i] : 0, g = micros.count(false) ? micros[false][i] : 0;
    const double bytes = static_cast<double>(kBytes[i]);
    std::cout << std::setw(10) << size.str() << std::setw(12) << cell(s) << std::setw(12) << cell(g) << std::setw(10)
              << cell(s > 0 ? g / s : 0) << std::setw(12) << cell(s > 0 ? bytes / s / 1e3 : 0) << std::setw(12)
              << cell(g > 0 ? bytes / g / 1e3 : 0) << "\n";
  }
  return 0;
} catch (const std::exception& error) {
  return arc::bench::failed("arc_bench_allreduce", error);
}
