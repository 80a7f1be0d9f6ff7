// Checkpoint save and load of a ~100M-parameter model, in MB/s, against writing and reading the
// same bytes with plain buffered file I/O in the same run.
//   arc_bench_checkpoint [folder=/tmp] [repeats=3]
#include "bench_util.h"

#include <arc/core/checkpoint.h>

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

double mb(const torch::nn::Module& model) {
  double bytes = 0;
  for (const auto& p : model.parameters()) bytes += static_cast<double>(p.numel()) * 4;
  return bytes / 1e6;
}

void plain_write(const torch::nn::Module& model, const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "wb");
  for (const auto& p : model.parameters()) std::fwrite(p.data_ptr<float>(), 4, static_cast<size_t>(p.numel()), file);
  std::fflush(file);
  fsync(fileno(file));
  std::fclose(file);
}

void plain_read(torch::nn::Module& model, const std::string& path) {
  FILE* file = std::fopen(path.c_str(), "rb");
  torch::NoGradGuard no_grad;
  for (auto& p : model.parameters()) {
    if (std::fread(p.data_ptr<float>(), 4, static_cast<size_t>(p.numel()), file) != static_cast<size_t>(p.numel()))
      throw std::runtime_error("short read");
  }
  std::fclose(file);
}

void checkpoint_write(torch::nn::Module& model, const std::string& path) {
  torch::serialize::OutputArchive archive;
  archive.write(
      "arc_meta",
      c10::IValue(
          nlohmann::json{{"format_version", kCheckpointFormatVersion}, {"state", describe_state(model)}}.dump()));
  torch::serialize::OutputArchive weights;
  model.save(weights);
  archive.write("model", weights);
  write_atomically(archive, path);
}

void checkpoint_read(torch::nn::Module& model, const std::string& path) {
  nlohmann::json meta;
  auto archive = open_checkpoint(path, meta);
  check_compatible(meta, model, path);
  torch::serialize::InputArchive weights;
  archive.read("model", weights);
  model.load(weights);
}

}  // namespace
}  // namespace arc::bench

int main(int argc, char** argv) {
  using namespace arc::bench;
  const std::string folder = argc > 1 ? argv[1] : "/tmp";
  const int repeats = argc > 2 ? std::atoi(argv[2]) : 3;
  print_header("Checkpoint I/O, ~100M parameters, " + std::to_string(repeats) + " runs, median");
  auto model = big_model();
  const double size = mb(*model);
  const std::string plain = folder + "/arc_bench_plain.bin", ckpt = folder + "/arc_bench.ckpt";
  std::vector<double> pw, pr, cw, cr;
  for (int r = 0; r < repeats; ++r) {
    pw.push_back(seconds([&] { plain_write(*model, plain); }));
    cw.push_back(seconds([&] { checkpoint_write(*model, ckpt); }));
    pr.push_back(seconds([&] { plain_read(*model, plain); }));
    cr.push_back(seconds([&] { checkpoint_read(*model, ckpt); }));
  }
  std::cout << std::fixed << std::setprecision(1) << "model: " << size << " MB of parameters\n\n"
            << std::left << std::setw(40) << "case" << std::right << std::setw(10) << "MB/s" << std::setw(9)
            << "ratio\n";
  const auto row = [&](const std::string& name, double s, double base) {
    std::cout << std::left << std::setw(40) << name << std::right << std::setw(10) << std::setprecision(0) << size / s
              << std::setw(9) << std::setprecision(3) << base / s << "\n";
  };
  row("write: plain fwrite + fsync", median(pw), median(pw));
  row("write: checkpoint (atomic, fsync)", median(cw), median(pw));
  row("read: plain fread", median(pr), median(pr));
  row("read: checkpoint (checked load)", median(cr), median(pr));
  std::filesystem::remove(plain);
  std::filesystem::remove(ckpt);
  return 0;
}
