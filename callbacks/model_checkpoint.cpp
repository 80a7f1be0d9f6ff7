// ModelCheckpoint.
#include <arc/callbacks/model_checkpoint.h>

#include <arc/base/console.h>
#include <arc/base/error.h>
#include <arc/core/metric_store.h>
#include <arc/core/trainer.h>
#include <arc/fabric/checkpoint.h>
#include <arc/fabric/sharded_checkpoint.h>
#include <arc/strategies/strategy.h>

#include <fmt/format.h>

#include <cmath>
#include <filesystem>
#include <limits>

namespace arc {

SaveLast::SaveLast(const std::string& mode) : on_(true), link_(true) {
  ARC_CHECK(mode == "link", "ModelCheckpoint save_last must be true, false or \"link\", got \"", mode, "\"");
}

void to_json(nlohmann::json& json, const SaveLast& save_last) {
  json = save_last.link() ? nlohmann::json("link") : nlohmann::json(static_cast<bool>(save_last));
}

void from_json(const nlohmann::json& json, SaveLast& save_last) {
  ARC_CHECK(json.is_boolean() || json.is_string() || json.is_null(),
            "ModelCheckpoint save_last must be true, false or \"link\", got ", json.dump());
  save_last = json.is_string() ? SaveLast(json.get<std::string>()) : SaveLast(json.is_boolean() && json.get<bool>());
}

ModelCheckpoint::ModelCheckpoint(ModelCheckpointOptions options) : options_(std::move(options)) {
  ARC_CHECK(options_.mode() == "min" || options_.mode() == "max",
            "ModelCheckpoint mode must be \"min\" or \"max\", got \"", options_.mode(), "\"");
  ARC_CHECK(options_.save_top_k() >= -1, "ModelCheckpoint save_top_k must be >= -1, got ", options_.save_top_k());
  ARC_CHECK(options_.every_n_train_steps() >= 0 && options_.every_n_epochs() >= 0,
            "ModelCheckpoint every_n_train_steps and every_n_epochs must be >= 0");
  ARC_CHECK(options_.train_time_interval() >= 0,
            "ModelCheckpoint train_time_interval must be >= 0 seconds (0: off), got ", options_.train_time_interval());
  // As Lightning's: an empty name is the default one.
  if (options_.filename().empty()) options_.filename(ModelCheckpointOptions().filename());
}

std::string ModelCheckpoint::state_key() const {
  return "ModelCheckpoint{monitor=" + options_.monitor() + ",mode=" + options_.mode() +
         ",every_n_train_steps=" + std::to_string(options_.every_n_train_steps()) +
         ",every_n_epochs=" + std::to_string(options_.every_n_epochs()) + "}";
}

std::string ModelCheckpoint::folder(const Trainer& trainer) const {
  if (!dirpath_.empty()) return dirpath_;
  return options_.dirpath().empty() ? trainer.log_dir() + "/checkpoints" : options_.dirpath();
}

namespace {

// The .ckpt files (and sharded checkpoints' folders) in `folder`.
std::vector<std::string> checkpoints_in(const std::filesystem::path& folder) {
  std::vector<std::string> out;
  std::error_code missing;
  for (const auto& entry : std::filesystem::directory_iterator(folder, missing))
    if ((entry.is_regular_file() || entry.is_directory()) && entry.path().extension() == ".ckpt")
      out.push_back(entry.path().string());
  return out;
}

}  // namespace

std::vector<std::string> ModelCheckpoint::checkpoint_files(const std::string& kind, const Trainer& trainer) const {
  // In the default folder a new run has a new version: "last" and an earlier run's "best" are among
  // every version's.
  const auto& loggers = trainer.loggers();
  const std::string versions = options_.dirpath().empty() && !loggers.empty() ? loggers[0]->versions_folder() : "";
  if (kind == "last") return last_checkpoints(folder(trainer), versions);
  if (kind != "best") return checkpoints_in(folder(trainer));
  if (!best_path_.empty()) return {best_path_};
  // No fit of this Trainer saved one (`arc test --ckpt best` after `arc fit`): the best that the
  // newest checkpoint holding this callback's state names.
  // (In the default folder, this run's version is among the versions.)
  auto files = versions.empty() ? checkpoints_in(folder(trainer)) : std::vector<std::string>{};
  std::error_code missing;
  for (const auto& entry : std::filesystem::directory_iterator(versions, missing))
    for (auto& file : checkpoints_in(entry.path() / "checkpoints")) files.push_back(std::move(file));
  for (const auto& file : newest_first(std::move(files))) {
    nlohmann::json meta;
    try {
      meta = CheckpointReader::read_meta(file);
    } catch (const Error&) {
      continue;  // not a complete checkpoint of ours
    }
    const auto state = meta.value("callbacks", nlohmann::json::object()).value(state_key(), nlohmann::json());
    if (!state.is_object()) continue;
    const auto best = state.value("best_model_path", std::string());
    if (best.empty() || !std::filesystem::exists(best)) return {};
    return {best};
  }
  return {};
}

void ModelCheckpoint::on_fit_start(Trainer& trainer, TrainModule&) {
  dirpath_ = folder(trainer);
  last_save_seconds_ = trainer.agreed_elapsed_seconds();
  step_at_train_start_.reset();
  exception_path_.clear();
}

// After the checkpoint fit resumes from (if any) is restored, and after the sanity check.
void ModelCheckpoint::on_train_start(Trainer& trainer, TrainModule&) { step_at_train_start_ = trainer.global_step(); }

// As Lightning's save_on_exception: a file named as the saves are, which the top k leave alone, and
// last.ckpt; nothing when this step was saved already, or no step was taken since training started
// (a fit that failed to resume, or at its first step, has nothing new to keep).
void ModelCheckpoint::on_exception(Trainer& trainer, TrainModule&, const std::exception& error) {
  if (!options_.save_on_exception() || !step_at_train_start_ || trainer.global_step() == *step_at_train_start_ ||
      trainer.stage() != Stage::fit || trainer.options().fast_dev_run() > 0 ||
      trainer.global_step() == last_saved_step_)
    return;
  try {
    // Ranks that stopped together (Ctrl-C, SIGTERM) agree on the name; an error may be one rank's
    // alone, whose peers take part in no collective now: its own values name the file, which rank 0
    // writes (a sharded save is collective, and needs every rank there).
    const bool together = dynamic_cast<const Interrupted*>(&error) != nullptr;
    auto metrics = together ? trainer.agreed_metrics() : trainer.callback_metrics();
    metrics["epoch"] = static_cast<double>(trainer.current_epoch());
    metrics["step"] = static_cast<double>(trainer.global_step());
    const auto path = free_name(trainer, dirpath_ + "/" + format_name(metrics), "", together);
    trainer.save_checkpoint(path, options_.save_weights_only(), false);
    last_saved_step_ = trainer.global_step();
    exception_path_ = path;
    save_last(trainer, path, false);
    // An interrupted fit names the file in its own last line.
    if (trainer.is_global_zero() && dynamic_cast<const Interrupted*>(&error) == nullptr)
      console().warn("fit failed ({}); ModelCheckpoint saved '{}' to resume from", error.what(), path);
  } catch (const std::exception& failure) {
    console().error("fit failed ({}) and ModelCheckpoint's save_on_exception could not save: {}", error.what(),
                    failure.what());
  }
}

// An epoch resumed mid-way keeps the count of its start from the checkpoint: a validation before the
// checkpoint was this epoch's.
void ModelCheckpoint::on_train_epoch_start(Trainer& trainer, TrainModule&) {
  if (trainer.progress().epoch_batches == 0) validations_at_epoch_start_ = trainer.progress().validation_runs;
}

void ModelCheckpoint::on_train_batch_end(Trainer& trainer, TrainModule&, const torch::Tensor&, Batch&, int64_t) {
  const int64_t step = trainer.global_step();
  const int64_t every = options_.every_n_train_steps();
  const bool by_steps = every > 0 && step > 0 && step % every == 0;
  // By the ranks' agreed clock, which their own clocks would pass at different batches.
  const bool by_time = options_.train_time_interval() > 0 &&
                       trainer.agreed_elapsed_seconds() - last_save_seconds_ >= options_.train_time_interval();
  if ((by_steps || by_time) && step != last_saved_step_) save(trainer);
}

void ModelCheckpoint::on_validation_end(Trainer& trainer, TrainModule&) {
  const int64_t every = options_.every_n_epochs();
  if (trainer.sanity_checking() || trainer.stage() != Stage::fit || every == 0 || saves_by_step_or_time() ||
      options_.save_on_train_epoch_end().value_or(false))
    return;
  if ((trainer.current_epoch() + 1) % every == 0) save(trainer);
}

void ModelCheckpoint::on_train_epoch_end(Trainer& trainer, TrainModule&) {
  const int64_t every = options_.every_n_epochs();
  const bool validated = trainer.progress().validation_runs > validations_at_epoch_start_;
  if (!options_.save_on_train_epoch_end().value_or(!validated) || every == 0 || saves_by_step_or_time()) return;
  if ((trainer.current_epoch() + 1) % every == 0) save(trainer);
}

std::string ModelCheckpoint::format_name(const std::map<std::string, double>& metrics) const {
  const std::string& pattern = options_.filename();
  std::string out;
  size_t at = 0;
  while (at < pattern.size()) {
    const size_t open = pattern.find('{', at);
    if (open == std::string::npos) {
      out += pattern.substr(at);
      break;
    }
    const size_t close = pattern.find('}', open);
    ARC_CHECK(close != std::string::npos, "ModelCheckpoint filename '", pattern, "' has an unclosed '{'");
    out += pattern.substr(at, open - at);
    const std::string token = pattern.substr(open + 1, close - open - 1);
    const std::string name = token.substr(0, token.find(':'));
    const std::string spec = token.find(':') == std::string::npos ? "" : token.substr(token.find(':'));
    const auto found = metrics.find(name);
    ARC_CHECK(found != metrics.end(), "ModelCheckpoint filename uses '{", name,
              "}', which was not logged (available metrics: ", metric_names(metrics, name),
              "); log it or change the filename");
    const bool integral = name == "epoch" || name == "step";
    const std::string value = integral && spec.empty() ? std::to_string(static_cast<int64_t>(found->second))
                                                       : fmt::format(fmt::runtime("{" + spec + "}"), found->second);
    out += options_.auto_insert_metric_name() ? name + "=" + value : value;
    at = close + 1;
  }
  return out + ".ckpt";
}

bool ModelCheckpoint::better(double candidate, double reference) const {
  return options_.mode() == "min" ? candidate < reference : candidate > reference;
}

std::optional<double> ModelCheckpoint::best_model_score() const {
  const auto found = kept_.find(best_path_);
  if (options_.monitor().empty() || found == kept_.end()) return std::nullopt;
  return found->second;
}

void ModelCheckpoint::save(Trainer& trainer) {
  // fast_dev_run checks that the code runs; like Lightning, it leaves no checkpoint behind.
  if (trainer.options().fast_dev_run() > 0) return;
  // Rank 0's values, with which every rank decides alike: values logged without sync_dist differ by
  // rank, and a rank that saved alone would leave the others in the next collective.
  auto metrics = trainer.agreed_metrics();
  metrics["epoch"] = static_cast<double>(trainer.current_epoch());
  metrics["step"] = static_cast<double>(trainer.global_step());
  last_saved_step_ = trainer.global_step();
  last_save_seconds_ = trainer.agreed_elapsed_seconds();
  std::string path = dirpath_ + "/" + format_name(metrics);
  const bool monitored = !options_.monitor().empty();
  double score = static_cast<double>(saves_++);
  if (monitored) {
    const auto found = metrics.find(options_.monitor());
    ARC_CHECK(found != metrics.end(), "ModelCheckpoint monitors '", options_.monitor(),
              "', which was not logged (available metrics: ", metric_names(metrics, options_.monitor()),
              "); log it (e.g. log(\"", options_.monitor(), "\", value)) or change monitor");
    score = found->second;
    // A NaN ranks last, as in Lightning.
    if (std::isnan(score)) score = (options_.mode() == "min" ? 1 : -1) * std::numeric_limits<double>::infinity();
  }
  const int64_t k = options_.save_top_k();
  bool keep = k == -1 || (k > 0 && static_cast<int64_t>(kept_.size()) < k);
  std::string worst;
  if (!keep && k > 0) {
    for (const auto& [kept_path, kept_score] : kept_)
      if (worst.empty() || (monitored ? better(kept_.at(worst), kept_score) : kept_score < kept_.at(worst)))
        worst = kept_path;
    keep = !monitored || better(score, kept_.at(worst));
  }
  const auto epoch_and_step = fmt::format("Epoch {}, global step {}: ", trainer.current_epoch(), trainer.global_step());
  if (keep) {
    path = free_name(trainer, path, worst);
    if (options_.verbose())
      console().info(monitored ? fmt::format("{}'{}' reached {:.5f}, saving model to '{}' as top {}", epoch_and_step,
                                             options_.monitor(), score, path, k)
                               : fmt::format("{}saving model to '{}'", epoch_and_step, path));
    // The file holds this callback's state with itself among the kept and, if so, as the best, as
    // Lightning's does: a fit resumed from it counts it, and ckpt_path="best" of a later run finds it.
    kept_[path] = score;
    if (!worst.empty() && worst != path) kept_.erase(worst);
    if (best_path_.empty() || !kept_.count(best_path_) || !monitored || better(score, kept_.at(best_path_)))
      best_path_ = path;
    trainer.save_checkpoint(path, options_.save_weights_only(), options_.async_checkpointing());
    save_last(trainer, path, options_.async_checkpointing());
    // Once the file that takes its place is written (and last.ckpt no longer links to it).
    if (!worst.empty() && worst != path && trainer.is_global_zero())
      trainer.after_checkpoint_writes([worst] { remove_checkpoint(worst); });
    return;
  }
  if (options_.verbose() && monitored)
    console().info("{}'{}' was not in top {}", epoch_and_step, options_.monitor(), k);
  save_last(trainer, "", options_.async_checkpointing());
}

void ModelCheckpoint::save_last(Trainer& trainer, const std::string& saved, std::optional<bool> in_background) {
  if (!options_.save_last()) return;
  last_path_ = dirpath_ + "/last.ckpt";
  if (!options_.save_last().link() || saved.empty()) {
    trainer.save_checkpoint(last_path_, options_.save_weights_only(), in_background);
    return;
  }
  // Once `saved` is written: a link never points at a file that is not there yet.
  if (trainer.is_global_zero())
    trainer.after_checkpoint_writes([saved, last = last_path_] { link_checkpoint(saved, last); });
}

std::string ModelCheckpoint::free_name(Trainer& trainer, const std::string& path, const std::string& replaced,
                                       bool agree) const {
  if (!options_.enable_version_counter()) return path;
  // Rank 0 decides, from the files it sees, and every rank takes its name.
  std::string name = path;
  if (trainer.is_global_zero()) {
    const std::string stem = path.substr(0, path.size() - std::string(".ckpt").size());
    for (int64_t version = 1; name != replaced && std::filesystem::exists(name); ++version)
      name = stem + "-v" + std::to_string(version) + ".ckpt";
  }
  return agree ? trainer.strategy().broadcast(name, 0) : name;
}

nlohmann::json ModelCheckpoint::state_dict() const {
  return {{"dirpath", dirpath_},
          {"kept", metrics_to_json(kept_)},
          {"best_model_path", best_path_},
          {"last_model_path", last_path_},
          {"saves", saves_},
          {"validations_at_epoch_start", validations_at_epoch_start_}};
}

void ModelCheckpoint::load_state_dict(const nlohmann::json& state) {
  kept_ = metrics_from_json(state.at("kept"));
  best_path_ = state.at("best_model_path").get<std::string>();
  last_path_ = state.at("last_model_path").get<std::string>();
  saves_ = state.at("saves").get<int64_t>();
  validations_at_epoch_start_ = state.value("validations_at_epoch_start", validations_at_epoch_start_);
}

}  // namespace arc
