// Checkpoint save and load of a ~100M-parameter model (alone, with SGD momentum state, as one
// tensor, and its weights as safetensors and as torch.save's .pt), in MB/s, against writing and reading the same bytes
// with plain buffered file I/O in the same run (each write against the plain write in the same position of a round:
// first or second), with as many intra-op threads as the cores it may use (a checkpoint is read on that many); then
// saves in the background (AsyncCheckpointWriter): the time training is blocked per save against a memcpy of the same
// bytes, and step times while a write is in flight against steps without one (training on one thread, so that the
// writer has the other core).
//   arc_bench_checkpoint [folder=/tmp] [repeats=3, at least 2]
#include "bench_util.h"

#include <arc/base/detail/host.h>
#include <arc/base/detail/torch_compat.h>
#include <arc/fabric/async_checkpoint_writer.h>
#include <arc/fabric/checkpoint.h>
#include <arc/fabric/detail/optimizer_state.h>
#include <arc/fabric/weights.h>

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iomanip>

namespace arc::bench {
namespace {

// 25 layers of 2048 x 2048: 104.9 M parameters, 419 MB of float32 (the embedding below has as many).
torch::nn::Sequential big_model() {
  torch::nn::Sequential model;
  for (int i = 0; i < 25; ++i) model->push_back(torch::nn::Linear(2048, 2048));
  return model;
}

// The tensors a checkpoint of `model` (and of `sgd`'s momentum buffers, when given) holds.
std::vector<torch::Tensor> payload(torch::nn::Module& model, torch::optim::SGD* sgd) {
  auto tensors = model.parameters();
  if (sgd == nullptr) return tensors;
  for (const auto& p : model.parameters())
    tensors.push_back(static_cast<torch::optim::SGDParamState*>(compat::param_state(*sgd, p))->momentum_buffer());
  return tensors;
}

double mb(const std::vector<torch::Tensor>& tensors) {
  double bytes = 0;
  for (const auto& t : tensors) bytes += static_cast<double>(t.nbytes());
  return bytes / 1e6;
}

// The plain-I/O baseline's file errors: the path, the system's reason, and what to give the bench.
[[noreturn]] void file_error(const char* what, const std::string& path, int error) {
  throw std::runtime_error(std::string("cannot ") + what + " " + path + ": " + std::strerror(error) +
                           "; give the bench a folder it can write as its first argument");
}

FILE* open_file(const std::string& path, const char* mode) {
  FILE* file = std::fopen(path.c_str(), mode);
  if (file == nullptr) file_error("open", path, errno);
  return file;
}

void plain_write(const std::vector<torch::Tensor>& tensors, const std::string& path) {
  FILE* file = open_file(path, "wb");
  bool written = true;
  for (const auto& t : tensors) written = written && std::fwrite(t.data_ptr(), 1, t.nbytes(), file) == t.nbytes();
  written = written && std::fflush(file) == 0 && fsync(fileno(file)) == 0;
  const int error = errno;  // before fclose can change it
  std::fclose(file);
  if (!written) file_error("write", path, error);
}

void plain_read(const std::vector<torch::Tensor>& tensors, const std::string& path) {
  FILE* file = open_file(path, "rb");
  for (const auto& t : tensors)
    if (std::fread(t.data_ptr(), 1, t.nbytes(), file) != t.nbytes()) {
      std::fclose(file);
      throw std::runtime_error("short read of " + path);
    }
  std::fclose(file);
}

CheckpointWriter checkpoint_of(torch::nn::Module& model, torch::optim::SGD* sgd) {
  CheckpointWriter writer(nlohmann::json{{"bench", true}});
  writer.add_module(model);
  if (sgd != nullptr) save_optimizer(writer, "optimizer_0", *sgd);
  return writer;
}

// The files compared with plain I/O: Arclight's checkpoints, or the module's weights as a weights
// file (save_weights and load_weights, the format by the path's suffix).
void checkpoint_write(bool weights, torch::nn::Module& model, torch::optim::SGD* sgd, const std::string& path) {
  if (weights) {
    save_weights(model, path);
    return;
  }
  checkpoint_of(model, sgd).write(path);
}

void checkpoint_read(bool weights, torch::nn::Module& model, torch::optim::SGD* sgd, const std::string& path) {
  if (weights) {
    load_weights(model, path);
    return;
  }
  const CheckpointReader checkpoint(path);
  checkpoint.load_module(model);
  if (sgd != nullptr) load_optimizer(checkpoint, "optimizer_0", *sgd);
}

// One SGD step of `model` on a fixed batch, timed in ms.
double timed_step(torch::nn::Sequential& model, torch::optim::SGD& sgd, const torch::Tensor& x,
                  const torch::Tensor& y) {
  return 1e3 * seconds([&] {
           sgd.zero_grad();
           torch::mse_loss(model->forward(x), y).backward();
           sgd.step();
         });
}

void row(const std::string& name, double ms, double base_ms) {
  std::cout << std::left << std::setw(72) << name << std::right << std::fixed << std::setprecision(2) << std::setw(10)
            << ms << std::setw(9) << std::setprecision(3) << ms / base_ms << "\n";
}

// Median times of `step`: with no write, then while `background` writes `save`s.
std::pair<double, double> step_times(const std::function<double()>& step, AsyncCheckpointWriter& background,
                                     const std::function<void()>& save, int saves) {
  std::vector<double> idle, writing;
  for (int i = 0; i < saves; ++i) {
    background.wait();
    const auto start = std::chrono::steady_clock::now();
    // As many idle steps as the write takes, at least 3.
    while (idle.size() < 3 || std::chrono::steady_clock::now() - start < std::chrono::seconds(2))
      idle.push_back(step());
    save();
    while (background.writing()) writing.push_back(step());
  }
  background.wait();
  return {median(idle), writing.empty() ? 0.0 : median(writing)};
}

void background_saves(torch::nn::Sequential& model, torch::optim::SGD& sgd, const std::string& folder, int repeats,
                      Summary& summary) {
  torch::set_num_threads(1);
  const auto tensors = payload(*model, &sgd);
  size_t bytes = 0;
  for (const auto& t : tensors) bytes += t.nbytes();
  std::vector<uint8_t> target(bytes, 1);
  std::vector<double> copies, blocked;
  AsyncCheckpointWriter background;
  const std::string path = folder + "/arc_bench_async.ckpt";
  const auto save = [&] { background.save(checkpoint_of(*model, &sgd), path); };
  save();
  const double first = background.last_blocked_seconds();
  for (int r = 0; r < repeats; ++r) {
    background.wait();
    copies.push_back(seconds([&] {
      size_t at = 0;
      for (const auto& t : tensors) {
        std::memcpy(target.data() + at, t.data_ptr(), t.nbytes());
        at += t.nbytes();
      }
    }));
    save();
    blocked.push_back(background.last_blocked_seconds());
  }
  std::cout << "\nSaves in the background, model + SGD momentum (" << bytes / 1000000 << " MB), training on 1 thread, "
            << repeats << " runs, median\n"
            << std::left << std::setw(72) << "case" << std::right << std::setw(10) << "ms" << std::setw(9) << "ratio\n";
  const double copy_ms = median(copies) * 1e3;
  row("memcpy of the same bytes", copy_ms, copy_ms);
  row("save in the background: training blocked (goal <= 1.5)", median(blocked) * 1e3, copy_ms);
  row("  its first save (the host buffer allocated)", first * 1e3, copy_ms);
  const auto x = torch::randn({8, 2048}), y = torch::randn({8, 2048});
  const auto [big_idle, big_writing] =
      step_times([&] { return timed_step(model, sgd, x, y); }, background, save, repeats);
  row("step of this model, batch 8, no write", big_idle, big_idle);
  row("step of this model, batch 8, a write in flight (goal <= 1.05)", big_writing, big_idle);
  // The canonical MLP (784-256-256-10) on a batch of 64.
  torch::nn::Sequential mlp(torch::nn::Linear(784, 256), torch::nn::ReLU(), torch::nn::Linear(256, 256),
                            torch::nn::ReLU(), torch::nn::Linear(256, 10));
  torch::optim::SGD mlp_sgd(mlp->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  const auto mlp_x = torch::randn({64, 784}), mlp_y = torch::randn({64, 10});
  const auto [mlp_idle, mlp_writing] =
      step_times([&] { return timed_step(mlp, mlp_sgd, mlp_x, mlp_y); }, background, save, repeats);
  row("step of the canonical MLP, batch 64, no write", mlp_idle, mlp_idle);
  row("step of the canonical MLP, batch 64, a write in flight (goal <= 1.05)", mlp_writing, mlp_idle);
  summary.add("background save blocks, ms", median(blocked) * 1e3, 0)
      .add("blocked vs memcpy", median(blocked) * 1e3 / copy_ms, 2)
      .add("MLP step, write in flight vs none", mlp_writing / mlp_idle, 2);
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace arc::bench

int main(int argc, char** argv) try {
  using namespace arc::bench;
  const std::string folder = argc > 1 ? argv[1] : "/tmp";
  if (!std::filesystem::is_directory(folder))
    throw UsageError("folder '" + folder +
                     "' is not a directory; give one it can write its test files in (default /tmp)");
  // Writes take turns going first, so at least one round of each order.
  const int repeats = static_cast<int>(whole_arg(argc, argv, 2, "repeats", 3, 2));
  // As a Trainer of one process has.
  torch::set_num_threads(static_cast<int>(arc::usable_cores()));
  print_header("Checkpoint I/O, ~100M parameters, " + std::to_string(repeats) + " runs, median");
  auto model = big_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  for (auto& p : model->parameters()) p.mutable_grad() = torch::ones_like(p);
  sgd.step();
  const std::string plain = folder + "/arc_bench_plain.bin", ckpt = folder + "/arc_bench.ckpt";
  std::cout << std::left << std::setw(74) << "case" << std::right << std::setw(8) << "MB" << std::setw(10) << "MB/s"
            << std::setw(9) << "ratio\n";
  // A model whose bytes lie in one tensor, as a large embedding's do: its checksums and its loading
  // are shared among threads by pieces, not by tensors.
  torch::nn::Embedding embedding(51200, 2048);
  Summary summary("arc_bench_checkpoint");
  struct Case {
    std::string what;
    torch::nn::Module* model;
    torch::optim::SGD* optimizer;  // whose momentum the checkpoint holds too, or null
    std::string weights = "";      // a weights format ("safetensors", "pt"), or "": Arclight's checkpoint
  };
  for (const Case& c :
       {Case{"model", model.ptr().get(), nullptr}, Case{"model + SGD momentum", model.ptr().get(), &sgd},
        Case{"one tensor", embedding.ptr().get(), nullptr}, Case{"model", model.ptr().get(), nullptr, "safetensors"},
        Case{"model", model.ptr().get(), nullptr, "pt"}}) {
    const bool weights = !c.weights.empty();
    const std::string file = weights ? c.weights + " (save_weights, atomic, fsync)" : "checkpoint (atomic, fsync)";
    const std::string path = weights ? folder + "/arc_bench." + c.weights : ckpt;
    const auto tensors = payload(*c.model, c.optimizer);
    const double size = mb(tensors);
    // Write times by position in the round ([0]: written first, [1]: second). On some machines the
    // second of two large writes is much slower whichever it is (a VM whose fresh page-cache memory
    // is slow to come by), so writes are compared only with writes in the same position.
    std::vector<double> pw[2], cw[2], pr, cr;
    for (int r = 0; r < repeats; ++r) {
      const bool checkpoint_first = r % 2 == 1;
      const auto plain_pass = [&] {
        pw[checkpoint_first ? 1 : 0].push_back(seconds([&] { plain_write(tensors, plain); }));
        pr.push_back(seconds([&] { plain_read(tensors, plain); }));
        std::filesystem::remove(plain);
      };
      const auto checkpoint_pass = [&] {
        cw[checkpoint_first ? 0 : 1].push_back(
            seconds([&] { checkpoint_write(weights, *c.model, c.optimizer, path); }));
        cr.push_back(seconds([&] { checkpoint_read(weights, *c.model, c.optimizer, path); }));
        std::filesystem::remove(path);
      };
      if (checkpoint_first) {
        checkpoint_pass();
        plain_pass();
      } else {
        plain_pass();
        checkpoint_pass();
      }
    }
    const auto row = [&](const std::string& name, double s, double base) {
      std::cout << std::left << std::setw(74) << name << std::right << std::fixed << std::setprecision(0)
                << std::setw(8) << size << std::setw(10) << size / s << std::setw(9) << std::setprecision(3) << base / s
                << "\n";
    };
    double write_ratios = 1;
    for (const int position : {0, 1}) {
      const std::string when = position == 0 ? ", written first" : ", written second";
      row("write " + c.what + ": plain fwrite + fsync" + when, median(pw[position]), median(pw[position]));
      row("write " + c.what + ": " + file + when, median(cw[position]), median(pw[position]));
      write_ratios *= median(pw[position]) / median(cw[position]);
    }
    // Where writing into the page cache itself varies (a VM whose host hands memory back slowly),
    // each kind's fastest round shows what it costs when nothing else interferes.
    const auto fastest = [](const std::vector<double>(&times)[2]) {
      return std::min(*std::min_element(times[0].begin(), times[0].end()),
                      *std::min_element(times[1].begin(), times[1].end()));
    };
    const double best_plain = fastest(pw), best_checkpoint = fastest(cw);
    std::cout << "  write " << c.what << (weights ? " as " + c.weights : "") << ": the two ratios' geometric mean "
              << std::setprecision(3) << std::sqrt(write_ratios) << "; fastest rounds " << std::setprecision(0)
              << size / best_plain << " MB/s plain, " << size / best_checkpoint << " MB/s "
              << (weights ? c.weights : "checkpoint") << ", ratio " << std::setprecision(3)
              << best_plain / best_checkpoint << "\n";
    row("read " + c.what + ": plain fread", median(pr), median(pr));
    row("read " + c.what +
            (weights ? ": " + c.weights + " (load_weights, every entry checked)" : ": checkpoint (all checksums)"),
        median(cr), median(pr));
    if (weights)
      summary.add(c.weights + " save vs fwrite + fsync", std::sqrt(write_ratios), 2)
          .add(c.weights + " load vs fread", median(pr) / median(cr), 2);
    else if (c.optimizer != nullptr)
      summary.add("save vs fwrite + fsync", std::sqrt(write_ratios), 2)
          .add("load vs fread", median(pr) / median(cr), 2);
    if (c.what == "one tensor") summary.add("one-tensor load vs fread", median(pr) / median(cr), 2);
  }
  background_saves(model, sgd, folder, repeats, summary);
  summary.print();
  return 0;
} catch (const std::exception& error) {
  return arc::bench::failed("arc_bench_checkpoint", error);
}
