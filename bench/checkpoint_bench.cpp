// Checkpoint save and load of a ~100M-parameter model (alone, and with SGD momentum state), in
// MB/s, against writing and reading the same bytes with plain buffered file I/O in the same run.
//   arc_bench_checkpoint [folder=/tmp] [repeats=3]
#include "bench_util.h"

#include <arc/base/torch_compat.h>
#include <arc/core/checkpoint.h>
#include <arc/core/optimizer_state.h>

#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <iomanip>

namespace arc::bench {
namespace {

// 25 layers of 2048 x 2048: 104.9 M parameters, 419 MB of float32.
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

void plain_write(const std::vector<torch::Tensor>& tensors, const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "wb");
  for (const auto& t : tensors) std::fwrite(t.data_ptr(), 1, t.nbytes(), file);
  std::fflush(file);
  fsync(fileno(file));
  std::fclose(file);
}

void plain_read(const std::vector<torch::Tensor>& tensors, const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "rb");
  for (const auto& t : tensors)
    if (std::fread(t.data_ptr(), 1, t.nbytes(), file) != t.nbytes()) throw std::runtime_error("short read");
  std::fclose(file);
}

void checkpoint_write(torch::nn::Module& model, torch::optim::SGD* sgd, const std::string& path) {
  CheckpointWriter writer(nlohmann::json{{"bench", true}});
  writer.add_module(model);
  if (sgd != nullptr) save_optimizer(writer, "optimizer_0", *sgd);
  writer.write(path);
}

void checkpoint_read(torch::nn::Module& model, torch::optim::SGD* sgd, const std::string& path) {
  const CheckpointReader checkpoint(path);
  checkpoint.load_module(model);
  if (sgd != nullptr) load_optimizer(checkpoint, "optimizer_0", *sgd);
}

}  // namespace
}  // namespace arc::bench

int main(int argc, char** argv) try {
  using namespace arc::bench;
  const std::string folder = argc > 1 ? argv[1] : "/tmp";
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 3;
  print_header("Checkpoint I/O, ~100M parameters, " + std::to_string(repeats) + " runs, median");
  auto model = big_model();
  torch::optim::SGD sgd(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  for (auto& p : model->parameters()) p.mutable_grad() = torch::ones_like(p);
  sgd.step();
  const std::string plain = folder + "/arc_bench_plain.bin", ckpt = folder + "/arc_bench.ckpt";
  std::cout << std::left << std::setw(52) << "case" << std::right << std::setw(10) << "MB" << std::setw(10) << "MB/s"
            << std::setw(9) << "ratio\n";
  for (auto* optimizer : {static_cast<torch::optim::SGD*>(nullptr), &sgd}) {
    const auto tensors = payload(*model, optimizer);
    const double size = mb(tensors);
    std::vector<double> pw, pr, cw, cr;
    for (int r = 0; r < repeats; ++r) {
      // Plain and checkpoint take turns going first, so that neither always meets the disk still
      // busy with the other's writes.
      const auto plain_pass = [&] {
        pw.push_back(seconds([&] { plain_write(tensors, plain); }));
        pr.push_back(seconds([&] { plain_read(tensors, plain); }));
      };
      const auto checkpoint_pass = [&] {
        cw.push_back(seconds([&] { checkpoint_write(*model, optimizer, ckpt); }));
        cr.push_back(seconds([&] { checkpoint_read(*model, optimizer, ckpt); }));
      };
      if (r % 2 == 0) {
        plain_pass();
        checkpoint_pass();
      } else {
        checkpoint_pass();
        plain_pass();
      }
      std::filesystem::remove(plain);
      std::filesystem::remove(ckpt);
    }
    const std::string what = optimizer == nullptr ? "model" : "model + SGD momentum";
    const auto row = [&](const std::string& name, double s, double base) {
      std::cout << std::left << std::setw(52) << name << std::right << std::fixed << std::setprecision(0)
                << std::setw(10) << size << std::setw(10) << size / s << std::setw(9) << std::setprecision(3)
                << base / s << "\n";
    };
    row("write " + what + ": plain fwrite + fsync", median(pw), median(pw));
    row("write " + what + ": checkpoint (atomic, fsync)", median(cw), median(pw));
    row("read " + what + ": plain fread", median(pr), median(pr));
    row("read " + what + ": checkpoint (all checksums)", median(cr), median(pr));
  }
  return 0;
} catch (const std::exception& error) {
  return arc::bench::failed("arc_bench_checkpoint", error);
}
