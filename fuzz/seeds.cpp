#include "seeds.h"

#include "fuzz_module.h"
#include "fuzz_target.h"
#include "run_cli.h"

#include <arc/fabric/weights.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <tuple>

namespace arc::fuzz {
namespace {

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  ARC_CHECK(in, "cannot read '", path, "' for a fuzz seed");
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// One seed: `mode` (the target's first byte) and then `body`.
void write(const std::filesystem::path& folder, const std::string& name, char mode, const std::string& body) {
  std::filesystem::create_directories(folder);
  std::ofstream out(folder / name, std::ios::binary | std::ios::trunc);
  out.put(mode);
  out << body;
  ARC_CHECK(out, "cannot write fuzz seed '", (folder / name).string(), "'");
}

uint64_t u64_at(const std::string& bytes, size_t at) {
  uint64_t value;
  std::memcpy(&value, bytes.data() + at, 8);
  return value;
}

// A Trainer's checkpoint after two epochs, as it is and as the target's framed mode takes it.
void checkpoint_seeds(const std::filesystem::path& folder) {
  FuzzModule module;
  Trainer trainer(fuzz_options(scratch_path("seed_root")));
  trainer.fit(module, fuzz_data());
  const auto path = scratch_path("seed.ckpt");
  trainer.save_checkpoint(path);
  const auto file = read_text(path);
  write(folder, "trainer", '\0', file);
  const auto index_offset = u64_at(file, file.size() - 32), index_bytes = u64_at(file, file.size() - 24);
  write(folder, "trainer_framed", '\1',
        "\3" + file.substr(index_offset, index_bytes) + "\n" + file.substr(16, index_offset - 16));
}

void weights_seeds(const std::filesystem::path& folder) {
  FuzzModule module;
  const auto state = arc::state_dict(module);
  const auto saved = [&](const std::string& name) {
    save_weights(state, scratch_path(name), SaveWeightsOptions().metadata({{"note", "seed"}}));
    return read_text(scratch_path(name));
  };
  write(folder, "safetensors", '\0', saved("seed.safetensors"));
  write(folder, "pt", '\1', saved("seed.pt"));
  write(folder, "lightning_ckpt", '\2', saved("seed.ckpt"));
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  for (const auto& [name, tensor] : state) index["weight_map"][name] = "shard.safetensors";
  write(folder, "index", '\3', index.dump() + "\n" + saved("seed.safetensors"));
}

// The example configs, and each as --print_config resolves it (every key written out).
void config_seeds(const std::filesystem::path& folder, const std::string& source_dir) {
  for (const auto& entry : std::filesystem::directory_iterator(std::filesystem::path(source_dir) / "apps/configs")) {
    const auto text = read_text(entry.path().string());
    const bool json = entry.path().extension() == ".json";
    write(folder, entry.path().filename().string(), json ? '\1' : '\0', text);
    const auto resolved = run_cli({"fit", "--print_config", "--config", entry.path().string()});
    write(folder, entry.path().stem().string() + "_resolved.yaml", '\0', resolved);
  }
}

void command_line_seeds(const std::filesystem::path& folder) {
  const std::tuple<const char*, char, const char*> lines[] = {
      {"overrides", '\0', "--set\ntrainer.max_epochs=3\n-s\nmodule.lr=0.05"},
      {"dotted", '\0', "--trainer.max_epochs=3\n--model=cnn_classifier\n--seed_everything\n42"},
      {"callbacks", '\0',
       "--trainer.callbacks+=ModelCheckpoint\n--trainer.callbacks.monitor=val_loss\n"
       "--trainer.callbacks+=EarlyStopping\n--trainer.callbacks.patience=2"},
      {"optimizer", '\0',
       "--optimizer\nAdam\n--optimizer.lr\n0.01\n--lr_scheduler\nStepLR\n"
       "--lr_scheduler.step_size=2"},
      {"strategy", '\0',
       "--trainer.strategy=ddp_spawn\n--trainer.devices=2\n"
       "--trainer.precision=bf16-mixed\n--trainer.accumulate_grad_batches=2"},
      {"class_help", '\3', "--trainer.callbacks.help\nModelCheckpoint"},
      {"lr_find", '\4', "--min_lr\n1e-6\n--num_training\n20\n--mode\nlinear"},
      {"scale_batch_size", '\5', "--mode\nbinsearch\n--max_trials\n3"},
      {"help", '\1', "--help"},
  };
  for (const auto& [name, command, args] : lines) write(folder, name, command, args);
}

void cluster_seeds(const std::filesystem::path& folder) {
  const std::pair<const char*, const char*> environments[] = {
      {"slurm",
       "SLURM_JOB_ID=42\nSLURM_NTASKS=4\nSLURM_PROCID=1\nSLURM_LOCALID=1\nSLURM_NODEID=0\nSLURM_NNODES=2\n"
       "SLURM_NTASKS_PER_NODE=2\nSLURM_NODELIST=node[01-02,7]\nSLURM_JOB_NODELIST=node[01-02]\nMASTER_PORT=29500\n"
       "SLURM_RESTART_COUNT=1"},
      {"torchelastic",
       "TORCHELASTIC_RUN_ID=run\nRANK=1\nWORLD_SIZE=2\nLOCAL_RANK=1\nLOCAL_WORLD_SIZE=2\nGROUP_RANK=0\n"
       "MASTER_ADDR=127.0.0.1\nMASTER_PORT=29500\nTORCHELASTIC_RESTART_COUNT=0\nTORCHELASTIC_MAX_RESTARTS=3\n"
       "TORCHELASTIC_USE_AGENT_STORE=True"},
      {"mpi",
       "OMPI_COMM_WORLD_RANK=1\nOMPI_COMM_WORLD_SIZE=2\nOMPI_COMM_WORLD_LOCAL_RANK=1\n"
       "OMPI_COMM_WORLD_LOCAL_SIZE=2\nMASTER_ADDR=127.0.0.1\nMASTER_PORT=29500"},
      {"lsf",
       "LSB_JOBID=7\nJSM_NAMESPACE_RANK=1\nJSM_NAMESPACE_SIZE=2\nJSM_NAMESPACE_LOCAL_RANK=1\n"
       "LSB_DJOB_RANKFILE=batch;hosta;hosta;hostb\nMASTER_PORT=29500"},
      {"kubeflow", "KUBERNETES_PORT=tcp://10.0.0.1:443\nMASTER_ADDR=10.0.0.2\nMASTER_PORT=23456\nWORLD_SIZE=2\nRANK=1"},
      {"local", "MASTER_ADDR=127.0.0.1\nMASTER_PORT=29500\nNODE_RANK=0\nLOCAL_RANK=0\nWORLD_SIZE=2"},
  };
  // The target has no mode byte: a line break in its place starts an empty line, which it ignores.
  for (const auto& [name, text] : environments) write(folder, name, '\n', text);
}

}  // namespace

void write_seeds(const std::string& folder, const std::string& source_dir) {
  const std::filesystem::path root(folder);
  checkpoint_seeds(root / "checkpoint");
  weights_seeds(root / "weights");
  config_seeds(root / "config", source_dir);
  command_line_seeds(root / "command_line");
  cluster_seeds(root / "cluster");
}

}  // namespace arc::fuzz
