// CheckpointConnector.
#include <arc/core/detail/checkpoint_connector.h>

#include <arc/base/console.h>
#include <arc/base/detail/json_integer.h>
#include <arc/base/error.h>
#include <arc/core/detail/run_state.h>
#include <arc/core/load_from_checkpoint.h>
#include <arc/data/data_loader.h>
#include <arc/fabric/checkpoint.h>
#include <arc/fabric/detail/optimizer_state.h>
#include <arc/fabric/sharded_checkpoint.h>
#include <arc/strategies/strategy.h>

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <mutex>
#include <set>

namespace arc {

torch::Tensor cpu_rng_state() {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  return generator.get_state();
}

void set_cpu_rng_state(const torch::Tensor& state) {
  auto generator = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(generator.mutex());
  generator.set_state(state);
}

namespace {

std::vector<torch::Tensor> trainable(TrainModule& module) {
  std::vector<torch::Tensor> out;
  for (const auto& p : module.parameters())
    if (p.requires_grad()) out.push_back(p);
  return out;
}

// What the callbacks answer for `kind` (Callback::checkpoint_files).
std::vector<std::string> callback_files(const Trainer& trainer, const std::string& kind) {
  std::vector<std::string> out;
  for (const auto& callback : trainer.callbacks()) {
    auto files = callback->checkpoint_files(kind, trainer);
    out.insert(out.end(), files.begin(), files.end());
  }
  return out;
}

// n of "hpc_ckpt_<n>.ckpt", or -1 for any other name.
int64_t hpc_index(const std::string& file_name) {
  const std::string prefix = "hpc_ckpt_", suffix = ".ckpt";
  if (file_name.size() <= prefix.size() + suffix.size() || file_name.rfind(prefix, 0) != 0 ||
      file_name.compare(file_name.size() - suffix.size(), suffix.size(), suffix) != 0)
    return -1;
  const std::string digits = file_name.substr(prefix.size(), file_name.size() - prefix.size() - suffix.size());
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 18) return -1;
  return std::stoll(digits);
}

// Files and sharded checkpoints' folders in `folder` (none when it does not exist) that `keep`
// accepts by name.
std::vector<std::filesystem::path> files_in(const std::string& folder,
                                            const std::function<bool(const std::string&)>& keep) {
  std::vector<std::filesystem::path> out;
  std::error_code missing;
  for (const auto& entry : std::filesystem::directory_iterator(folder, missing))
    if ((entry.is_regular_file() || entry.is_directory()) && keep(entry.path().filename().string()))
      out.push_back(entry.path());
  return out;
}

// The highest n of the hpc_ckpt_<n>.ckpt files in `folder`, or -1 when there is none.
int64_t highest_hpc_index(const std::string& folder) {
  int64_t highest = -1;
  for (const auto& path : files_in(folder, [](const std::string& name) { return hpc_index(name) >= 0; }))
    highest = std::max(highest, hpc_index(path.filename().string()));
  return highest;
}

std::string hpc_path(const std::string& folder, int64_t index) {
  return folder + "/hpc_ckpt_" + std::to_string(index) + ".ckpt";
}

}  // namespace

void CheckpointConnector::save(TrainModule& module, const std::string& path, bool weights_only, bool in_background) {
  if (trainer_.strategy().sharded_checkpoints()) {
    if (in_background && !warned_synchronous_ && trainer_.is_global_zero())
      console().warn(
          "async checkpointing: sharded checkpoints are written while training waits (every rank writes "
          "its own file at once)");
    warned_synchronous_ = warned_synchronous_ || in_background;
    save_sharded(module, path, weights_only);
    return;
  }
  trainer_.strategy().with_whole_parameters([&] { save_whole(module, path, weights_only, in_background); });
}

bool CheckpointConnector::mid_accumulation() const {
  const auto& progress = trainer_.progress();
  return progress.epoch_batches % trainer_.accumulate_grad_batches() != 0 &&
         progress.epoch_batches != trainer_.num_training_batches();
}

nlohmann::json CheckpointConnector::checkpoint_meta(TrainModule& module, bool weights_only) const {
  const auto& progress = trainer_.progress();
  nlohmann::json meta = {{"module", module.name()},
                         {"weights_only", weights_only},
                         {"epoch", progress.current_epoch},
                         {"global_step", progress.global_step},
                         {"epoch_batches", progress.epoch_batches},
                         {"total_batches", progress.total_batches},
                         {"stepped_batches", progress.stepped_batches},
                         {"validation_runs", progress.validation_runs},
                         {"mid_accumulation", mid_accumulation()},
                         {"hparams", module.hparams()}};
  if (state_.train_batch_size) meta["train_batch_size"] = *state_.train_batch_size;
  nlohmann::json callbacks = nlohmann::json::object();
  for (const auto& callback : trainer_.callbacks()) {
    auto state = callback->state_dict();
    if (!state.is_null()) callbacks[callback->state_key()] = std::move(state);
  }
  meta["callbacks"] = callbacks;
  nlohmann::json loggers = nlohmann::json::array();
  for (const auto& logger : trainer_.loggers())
    loggers.push_back({{"name", logger->name()}, {"version", logger->version()}});
  meta["loggers"] = loggers;
  nlohmann::json schedulers = nlohmann::json::array();
  for (const auto& config : trainer_.optimizer_configs())
    schedulers.push_back(config.lr_scheduler ? config.lr_scheduler->scheduler->state_dict() : nlohmann::json(nullptr));
  meta["schedulers"] = schedulers;
  // A training stream's position (a dataset's is the batch index); none between epochs, where the
  // next epoch opens its stream afresh.
  if (const auto* loader = trainer_.train_dataloader();
      loader != nullptr && progress.epoch_batches > 0 && !loader->state_dict().is_null())
    meta["train_data"] = loader->state_dict();
  meta["train_metrics"] = state_.logging.train_metrics.state_dict();
  meta["callback_metrics"] = metrics_to_json(state_.logging.callback_metrics());
  meta["precision"] = trainer_.precision().state_dict();
  if (state_.data_module != nullptr)
    if (auto state = state_.data_module->state_dict(); !state.is_null()) meta["data_module"] = std::move(state);
  module.on_save_checkpoint(meta);
  return meta;
}

// What rank 0 writes last for a resumable checkpoint: the gradients mid-accumulation, the generator.
void CheckpointConnector::add_resume_state(CheckpointWriter& writer, TrainModule& module) {
  if (mid_accumulation()) {
    const auto parameters = trainable(module);
    for (size_t i = 0; i < parameters.size(); ++i)
      if (parameters[i].grad().defined()) writer.add("grad/" + std::to_string(i), parameters[i].grad());
  }
  writer.add("rng_cpu", cpu_rng_state());
}

void CheckpointConnector::save_whole(TrainModule& module, const std::string& path, bool weights_only,
                                     bool in_background) {
  // Sharded optimizer state comes to rank 0 for the file, which holds it whole.
  std::vector<std::vector<int64_t>> owners;
  for (const auto& config : trainer_.optimizer_configs()) {
    owners.push_back(weights_only ? std::vector<int64_t>() : trainer_.strategy().state_owners(*config.optimizer));
    if (!owners.back().empty())
      gather_optimizer_state(*config.optimizer, owners.back(), *trainer_.strategy().collectives());
  }
  if (!trainer_.is_global_zero()) return;
  CheckpointWriter writer(checkpoint_meta(module, weights_only));
  writer.add_module(module);
  for (const auto& callback : trainer_.callbacks()) callback->on_save_checkpoint(trainer_, module, writer);
  if (!weights_only) {
    for (size_t i = 0; i < trainer_.optimizer_configs().size(); ++i)
      save_optimizer(writer, "optimizer_" + std::to_string(i), *trainer_.optimizer_configs()[i].optimizer);
    add_resume_state(writer, module);
  }
  for (size_t i = 0; i < owners.size(); ++i)
    if (!owners[i].empty()) keep_own_optimizer_state(*trainer_.optimizer_configs()[i].optimizer, owners[i], 0);
  if (in_background) {
    state_.checkpoint_writes.save(std::move(writer), path);
    return;
  }
  state_.checkpoint_writes.wait();
  writer.write(path);
}

// Each rank writes the parameters it owns and their optimizer state; rank 0 also the metadata, the
// buffers, what no rank owns and the optimizers' layouts, which it makes whole from every rank's.
void CheckpointConnector::save_sharded(TrainModule& module, const std::string& path, bool weights_only) {
  auto& strategy = trainer_.strategy();
  auto* group = strategy.collectives();
  ARC_CHECK(group != nullptr, "state_dict_type \"sharded\" needs the ranks' collectives, which this strategy has ",
            "none of; use state_dict_type \"full\"");
  const int64_t rank = trainer_.global_rank();
  CheckpointWriter writer(rank == 0 ? checkpoint_meta(module, weights_only) : nlohmann::json{{"shard", rank}});
  add_owned_state(writer, module, "model", strategy);
  if (rank == 0)
    for (const auto& callback : trainer_.callbacks()) callback->on_save_checkpoint(trainer_, module, writer);
  for (size_t i = 0; i < trainer_.optimizer_configs().size() && !weights_only; ++i)
    add_owned_optimizer(writer, "optimizer_" + std::to_string(i), *trainer_.optimizer_configs()[i].optimizer, strategy);
  if (rank == 0 && !weights_only) add_resume_state(writer, module);
  state_.checkpoint_writes.wait();
  write_sharded_checkpoint(writer, path, *group);
}

std::optional<int64_t> CheckpointConnector::train_batch_size(const std::string& path) {
  const auto meta = CheckpointReader::read_meta(path);
  if (!meta.contains("train_batch_size")) return std::nullopt;
  return reading_checkpoint(path,
                            [&] { return detail::json_integer(meta.at("train_batch_size"), "train_batch_size", 1); });
}

void CheckpointConnector::restore_data_module(DataModule* data, const std::string& path) {
  if (data == nullptr) return;
  const auto meta = CheckpointReader::read_meta(path);
  if (const auto state = meta.find("data_module"); state != meta.end())
    reading_checkpoint(path, [&] { data->load_state_dict(*state); });
}

void CheckpointConnector::restore_weights(TrainModule& module, const std::string& path) {
  trainer_.strategy().with_whole_parameters([&] { load_checkpoint_weights(module, path); });
}

void CheckpointConnector::restore_training(TrainModule& module, const std::string& path) {
  const CheckpointReader checkpoint(path);
  reading_checkpoint(path, [&] { restore_training(module, checkpoint); });
}

void CheckpointConnector::restore_training(TrainModule& module, const CheckpointReader& checkpoint) {
  const auto& path = checkpoint.path();
  const auto& meta = checkpoint.meta();
  ARC_CHECK(!meta.value("weights_only", false), "checkpoint '", path, "' holds weights only and cannot resume ",
            "training; pass it to validate/test/predict, or resume from a full checkpoint");
  ARC_CHECK(!meta.contains("accelerator_state"), "checkpoint '", path, "' was written by Fabric::save (a loop ",
            "of your own) and holds no Trainer state to resume; load it with Fabric::load, or pass it to ",
            "validate/test/predict, which load the module saved as \"model\"");
  auto& configs = state_.optimizers;
  for (size_t i = 0; i < configs.size(); ++i)
    ARC_CHECK(checkpoint.contains("optimizer_" + std::to_string(i)), "checkpoint '", path,
              "' has no state for optimizer ", i, "; configure_optimizers() returns ", configs.size(),
              " optimizers, but it was saved with fewer");
  trainer_.strategy().with_whole_parameters([&] { checkpoint.load_module(module); });
  module.on_load_checkpoint(meta);
  // The callbacks first, as Lightning's: one that added parameter groups during fit adds them back.
  const auto& callbacks = meta.at("callbacks");
  for (const auto& callback : trainer_.callbacks())
    if (callbacks.contains(callback->state_key())) callback->load_state_dict(callbacks.at(callback->state_key()));
  for (const auto& callback : trainer_.callbacks()) callback->on_load_checkpoint(trainer_, module, checkpoint);
  for (size_t i = 0; i < configs.size(); ++i) {
    // The file holds every rank's state; a sharded rank reads its own.
    load_optimizer(checkpoint, "optimizer_" + std::to_string(i), *configs[i].optimizer,
                   trainer_.strategy().state_owners(*configs[i].optimizer), trainer_.strategy().owner_rank());
    const auto& schedulers = meta.at("schedulers");
    if (configs[i].lr_scheduler && i < schedulers.size() && !schedulers[i].is_null())
      configs[i].lr_scheduler->scheduler->load_state_dict(schedulers[i]);
  }
  auto& progress = state_.progress;
  const auto counter = [&](const char* key) { return detail::json_integer(meta.at(key), key); };
  progress.current_epoch = counter("epoch");
  progress.global_step = counter("global_step");
  progress.epoch_batches = counter("epoch_batches");
  progress.total_batches = counter("total_batches");
  // Files from before stepped_batches was kept: every batch steps under manual optimization; the
  // automatic loop counts one step per stepped batch.
  progress.stepped_batches = meta.contains("stepped_batches")  ? counter("stepped_batches")
                             : module.automatic_optimization() ? progress.global_step
                                                               : progress.total_batches;
  progress.validation_runs = counter("validation_runs");
  state_.resumed_train_data = meta.value("train_data", nlohmann::json(nullptr));
  if (meta.at("mid_accumulation").get<bool>()) {
    const auto parameters = trainable(module);
    for (size_t i = 0; i < parameters.size(); ++i) {
      const std::string name = "grad/" + std::to_string(i);
      if (!checkpoint.contains(name)) continue;
      const auto [dtype, shape] = checkpoint.tensor_layout(name);
      ARC_CHECK(shape == parameters[i].sizes().vec() && dtype == parameters[i].scalar_type(), "checkpoint '", path,
                "' is corrupt: the gradient '", name, "' is ", c10::toString(dtype), " of shape ",
                c10::IntArrayRef(shape), ", its parameter ", parameters[i].scalar_type(), " ", parameters[i].sizes(),
                "; use an earlier one");
      parameters[i].mutable_grad() = checkpoint.tensor(name).to(parameters[i].device());
    }
  }
  if (checkpoint.contains("rng_cpu")) set_cpu_rng_state(checkpoint.tensor("rng_cpu"));
  state_.logging.train_metrics.load_state_dict(meta.at("train_metrics"));
  state_.logging.restore_callback_metrics(metrics_from_json(meta.value("callback_metrics", nlohmann::json::object())));
  trainer_.precision().load_state_dict(meta.at("precision"));
  restore_logger_versions(meta.value("loggers", nlohmann::json::array()));
}

// The resumed run writes on in the version folders of the run it continues (loggers matched by
// position and name; a version the user gave stays). Rank 0 gives back the folders it claimed for
// a new version when they are still empty.
void CheckpointConnector::restore_logger_versions(const nlohmann::json& saved) {
  auto& loggers = trainer_.loggers();
  std::set<std::string> abandoned;
  for (size_t i = 0; i < loggers.size() && i < saved.size(); ++i) {
    auto& logger = *loggers[i];
    const std::string version = saved[i].value("version", "");
    if (logger.version_fixed() || logger.versions_folder().empty() || saved[i].value("name", "") != logger.name() ||
        version.rfind("version_", 0) != 0 || version.size() == 8 || version.size() > 17 ||
        version.find_first_not_of("0123456789", 8) != std::string::npos)
      continue;
    const std::string claimed = logger.log_dir();
    logger.set_version_number(std::stoll(version.substr(8)));
    if (logger.log_dir() != claimed) abandoned.insert(claimed);
  }
  for (const auto& logger : loggers) abandoned.erase(logger->log_dir());
  std::error_code not_empty;
  if (trainer_.is_global_zero())
    for (const auto& folder : abandoned) std::filesystem::remove(folder, not_empty);
}

std::string CheckpointConnector::resolve(const std::string& ckpt_path) const {
  if (ckpt_path == "hpc") return newest_hpc_checkpoint();
  if (ckpt_path == "best") {
    const auto found = callback_files(trainer_, ckpt_path);
    ARC_CHECK(!found.empty(), "ckpt_path=\"best\": no ModelCheckpoint of this Trainer saved a best checkpoint in its ",
              "fit, and no checkpoint in ", searched_folders(), " holds the state of the same ModelCheckpoint ",
              "(monitor, mode) naming one; give the ModelCheckpoint of the run that trained, or pass a file path");
    return found.front();
  }
  if (ckpt_path != "last") return ckpt_path;
  const auto last = newest_last();
  ARC_CHECK(last.has_value(), "ckpt_path=\"last\": no last.ckpt was found in ", searched_folders(),
            "; train with ModelCheckpoint save_last (the default checkpointing does) or pass a file path");
  return *last;
}

std::string CheckpointConnector::resolve_resume(const std::string& ckpt_path) const {
  if (ckpt_path != "last") return resolve(ckpt_path);
  if (auto last = newest_last()) return *last;
  if (trainer_.is_global_zero())
    console().warn(
        "ckpt_path=\"last\": no last.ckpt was found in {}, so fit starts afresh (as Lightning's: "
        "\"last\" may be given to every run of a job, the first included)",
        searched_folders());
  return "";
}

// Without a ModelCheckpoint dirpath, "last" and "best" look in this run's checkpoints folder and,
// with a logger, in every version's.
std::string CheckpointConnector::searched_folders() const {
  const auto& loggers = trainer_.loggers();
  const std::string versions = loggers.empty() ? "" : loggers[0]->versions_folder();
  return "'" + (versions.empty() ? trainer_.log_dir() + "/checkpoints" : versions + "/version_*/checkpoints") +
         "' (or a ModelCheckpoint's dirpath)";
}

// The callbacks' last.ckpt files, else the default folder's and its versions'; the newest of them.
std::optional<std::string> CheckpointConnector::newest_last() const {
  auto found = callback_files(trainer_, "last");
  if (found.empty()) {
    const auto& loggers = trainer_.loggers();
    found = last_checkpoints(trainer_.log_dir() + "/checkpoints", loggers.empty() ? "" : loggers[0]->versions_folder());
  }
  if (found.empty()) return std::nullopt;
  return newest_first(std::move(found)).front();
}

// Lightning's ckpt_path="hpc": the highest-numbered hpc_ckpt_<n>.ckpt in default_root_dir.
std::string CheckpointConnector::newest_hpc_checkpoint() const {
  const std::string root = trainer_.options().default_root_dir();
  const int64_t highest = highest_hpc_index(root);
  ARC_CHECK(highest >= 0, "ckpt_path=\"hpc\": no hpc_ckpt_<n>.ckpt in '", root, "' (default_root_dir), where ",
            "a SLURM requeue saves them; set default_root_dir to that job's folder or pass a file path");
  return hpc_path(root, highest);
}

std::string CheckpointConnector::rank_zero_write_failure(Trainer& trainer, AsyncCheckpointWriter& writes) {
  const std::string failure = writes.take_failure().value_or("");
  if (trainer.world_size() == 1) return failure;
  const CollectiveName name("checkpoint failure");
  return trainer.strategy().broadcast(failure);
}

std::string CheckpointConnector::hpc_save_path(const std::string& folder) {
  return hpc_path(folder, std::max<int64_t>(highest_hpc_index(folder), 0) + 1);
}

std::string CheckpointConnector::automatic_resume_path() const {
  const std::string root = trainer_.options().default_root_dir();
  std::vector<std::string> candidates;
  for (const auto& path : files_in(root, [](const std::string& name) { return hpc_index(name) >= 0; }))
    candidates.push_back(path.string());
  // Resume policy: a launcher that restarts the job (strategy elastic) resumes from the callbacks' files too.
  if (trainer_.strategy().elastic())
    for (auto& path : callback_files(trainer_, "resume")) candidates.push_back(std::move(path));
  for (const auto& path : newest_first(std::move(candidates))) {
    try {
      if (!CheckpointReader::read_meta(path).value("weights_only", false)) return path;
    } catch (const Error& error) {
      console().warn("not resuming from '{}': {}", path, error.what());
    }
  }
  return "";
}

}  // namespace arc
