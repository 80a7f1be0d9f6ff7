// arc::Fabric.
#include <arc/fabric/fabric.h>

#include <arc/accelerators/accelerator_backend.h>
#include <arc/base/console.h>
#include <arc/fabric/detail/connector.h>
#include <arc/fabric/detail/optimizer_state.h>
#include <arc/fabric/detail/run_loggers.h>
#include <arc/fabric/sharded_checkpoint.h>
#include <arc/strategies/strategy.h>
#include <arc/strategies/sync_batch_norm.h>

#include <torch/torch.h>

#include <algorithm>

namespace arc {

void FabricState::check_name(const std::string& name) const {
  ARC_CHECK(!name.empty() && name.find('/') == std::string::npos, "FabricState names its parts without '/' ",
            "(it separates a module's name from its parameters'), got '", name, "'; choose another name");
  const auto taken = [&](const auto& parts) {
    return std::any_of(parts.begin(), parts.end(), [&](const auto& part) { return part.first == name; });
  };
  ARC_CHECK(!taken(modules_) && !taken(optimizers_), "FabricState already holds '", name,
            "'; give each module and optimizer its own name");
}

FabricState& FabricState::add(const std::string& name, torch::nn::Module& module) {
  check_name(name);
  modules_.emplace_back(name, &module);
  return *this;
}

FabricState& FabricState::add(const std::string& name, torch::optim::Optimizer& optimizer) {
  check_name(name);
  optimizers_.emplace_back(name, &optimizer);
  return *this;
}

Fabric::Fabric(FabricOptions options) : options_(std::move(options)) {
  options_.validate();
  auto run = detail::resolve_run(options_);
  backend_ = std::move(run.accelerator);
  strategy_ = std::move(run.strategy);
  precision_ = std::move(run.precision);
  torch::set_num_threads(static_cast<int>(run.threads_per_process));
  if (options_.seed()) torch::manual_seed(*options_.seed());
  detail::RunLoggers(options_.loggers(), *strategy_).agree_on_versions();
}

// The other ranks may still be running; ddp_spawn waits for them when the program exits. An
// exception that leaves the loop is the rank's failure, as in a Trainer: ddp_spawn's rank 0 stops
// the others at once (they would wait for it in a collective), another rank tells rank 0.
Fabric::~Fabric() {
  const bool failed = std::uncaught_exceptions() > uncaught_;
  try {
    detail::RunLoggers(options_.loggers(), *strategy_).finalize(failed ? "failed" : "success");
  } catch (const std::exception& error) {
    console().error("the loggers could not write their last records: {}", error.what());
  }
  if (failed)
    strategy_->on_failure("an exception left its training loop");
  else
    strategy_->teardown();
}

void Fabric::prepare(torch::nn::Module& model) {
  precision_->convert_module(model);
  strategy_->setup_module(model);
  connect_sync_batch_norms(model, strategy_->collectives(), options_.sync_batchnorm());
}

void Fabric::prepare(torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params())
      ARC_CHECK(p.device() == device(), "an optimizer parameter is on ", p.device().str(), " but this rank trains on ",
                device().str(), "; call prepare(model) before creating the optimizer");
}

std::unique_ptr<DataLoader> Fabric::prepare(const DataSource& data) {
  return std::make_unique<DataLoader>(data, strategy_->global_rank(), strategy_->world_size(),
                                      options_.seed().value_or(0));
}

Batch Fabric::prepare_batch(const Batch& batch) const { return precision_->to_device(batch); }

void Fabric::backward(const torch::Tensor& loss, bool sync) {
  strategy_->set_gradient_sync(sync);
  strategy_->backward(precision_->pre_backward(loss));
  strategy_->set_gradient_sync(true);
}

void Fabric::unscale_gradients(torch::optim::Optimizer& optimizer) { precision_->unscale(optimizer); }

std::optional<double> Fabric::clip_gradients(torch::optim::Optimizer& optimizer, double clip_val,
                                             const std::string& algorithm) {
  return precision_->clip_gradients(optimizer, clip_val, algorithm);
}

bool Fabric::step(torch::optim::Optimizer& optimizer) {
  const bool stepped = strategy_->optimizer_step(optimizer, [&] { return precision_->optimizer_step(optimizer); });
  precision_->update();
  return stepped;
}

void Fabric::save(const std::string& path, const FabricState& state) {
  if (strategy_->sharded_checkpoints()) {
    CheckpointWriter shard(is_global_zero() ? nlohmann::json{{"accelerator_state", {{"values", state.values}}},
                                                             {"precision", precision_->state_dict()}}
                                            : nlohmann::json{{"shard", global_rank()}});
    for (const auto& [name, module] : state.modules_) add_owned_state(shard, *module, name, *strategy_);
    for (const auto& [name, optimizer] : state.optimizers_) add_owned_optimizer(shard, name, *optimizer, *strategy_);
    write_sharded_checkpoint(shard, path, *strategy_->collectives());
    return;
  }
  // Whatever stops rank 0 reaches every rank, which would otherwise wait for it.
  std::string failure;
  // Sharded optimizer state comes to rank 0 for the file, which holds it whole.
  std::vector<std::vector<int64_t>> owners;
  for (const auto& [name, optimizer] : state.optimizers_) {
    owners.push_back(strategy_->state_owners(*optimizer));
    if (!owners.back().empty()) gather_optimizer_state(*optimizer, owners.back(), *strategy_->collectives());
  }
  // Under FULL_SHARD the modules' parameters are gathered for the file.
  strategy_->with_whole_parameters([&] {
    if (!is_global_zero()) return;
    try {
      CheckpointWriter writer(
          {{"accelerator_state", {{"values", state.values}}}, {"precision", precision_->state_dict()}});
      for (const auto& [name, module] : state.modules_) writer.add_module(*module, name);
      for (const auto& [name, optimizer] : state.optimizers_) save_optimizer(writer, name, *optimizer);
      writer.write(path);
    } catch (const std::exception& error) {
      failure = error.what();
    }
    for (size_t i = 0; i < owners.size(); ++i)
      if (!owners[i].empty()) keep_own_optimizer_state(*state.optimizers_[i].second, owners[i], 0);
  });
  const CollectiveName name("Fabric::save");
  failure = broadcast(failure);  // as it is with one process
  ARC_CHECK(failure.empty(), is_global_zero() ? "" : "rank 0 failed to save: ", failure);
}

LoadResult Fabric::load(const std::string& path, FabricState& state, bool strict) {
  const CheckpointReader checkpoint(path);
  return reading_checkpoint(path, [&] { return load_checked(checkpoint, state, strict); });
}

LoadResult Fabric::load_checked(const CheckpointReader& checkpoint, FabricState& state, bool strict) {
  const auto& path = checkpoint.path();
  LoadResult unmatched;
  for (const auto& [name, module] : state.modules_)
    if (!checkpoint.holds_under(name)) unmatched.missing_keys.push_back(name);
  for (const auto& [name, optimizer] : state.optimizers_)
    if (!checkpoint.contains(name)) unmatched.missing_keys.push_back(name);
  ARC_CHECK(!strict || unmatched.missing_keys.empty(), "checkpoint '", path, "' holds no ",
            join(unmatched.missing_keys), "; it holds ", join(checkpoint.top_names()),
            ". Load it into the state it was saved from (or with strict=false to leave out what it lacks)");
  strategy_->with_whole_parameters([&] {
    for (const auto& [name, module] : state.modules_) {
      if (!checkpoint.holds_under(name)) continue;
      const auto result = checkpoint.load_module(*module, strict, name);
      for (const auto& key : result.missing_keys) unmatched.missing_keys.push_back(name + "/" + key);
      for (const auto& key : result.unexpected_keys) unmatched.unexpected_keys.push_back(name + "/" + key);
    }
  });
  for (const auto& [name, optimizer] : state.optimizers_)
    if (checkpoint.contains(name)) {
      // The file holds every rank's state; a sharded rank reads its own.
      load_optimizer(checkpoint, name, *optimizer, strategy_->state_owners(*optimizer), strategy_->owner_rank());
    }
  const auto parts = checkpoint.meta().value("accelerator_state", nlohmann::json::object());
  state.values = parts.value("values", nlohmann::json::object());
  precision_->load_state_dict(checkpoint.meta().value("precision", nlohmann::json(nullptr)));
  return unmatched;
}

void Fabric::log_dict(const std::map<std::string, double>& values, int64_t step) {
  if (!is_global_zero()) return;
  for (auto& logger : options_.loggers()) logger->log_metrics(values, step);
}

void Fabric::log_hyperparams(const nlohmann::json& hparams) {
  detail::RunLoggers(options_.loggers(), *strategy_).log_hyperparams(hparams);
}

std::map<std::string, torch::Tensor> Fabric::all_reduce_dict(const std::map<std::string, torch::Tensor>& values,
                                                             Reduce op) {
  return strategy_->all_reduce(values, op);
}

torch::Tensor Fabric::all_reduce(const torch::Tensor& tensor, Reduce op) { return strategy_->all_reduce(tensor, op); }

void Fabric::all_reduce_(torch::Tensor& tensor, Reduce op) { strategy_->all_reduce_(tensor, op); }

torch::Tensor Fabric::reduce_buffer(torch::IntArrayRef sizes, torch::TensorOptions options) {
  return strategy_->reduce_buffer(sizes, options);
}

void Fabric::broadcast(torch::Tensor& tensor, int64_t src) { strategy_->broadcast(tensor, src); }

std::string Fabric::broadcast(const std::string& text, int64_t src) { return strategy_->broadcast(text, src); }

std::vector<torch::Tensor> Fabric::all_gather(const torch::Tensor& tensor) { return strategy_->all_gather(tensor); }

void Fabric::barrier() { strategy_->barrier(); }

std::vector<nlohmann::json> Fabric::distribute(const std::function<nlohmann::json(int64_t rank)>& fn) {
  const std::string mine = fn(global_rank()).dump();
  std::vector<nlohmann::json> out;
  for (int64_t rank = 0; rank < world_size(); ++rank) out.push_back(nlohmann::json::parse(broadcast(mine, rank)));
  return out;
}

int64_t Fabric::global_rank() const { return strategy_->global_rank(); }
int64_t Fabric::local_rank() const { return strategy_->local_rank(); }
int64_t Fabric::world_size() const { return strategy_->world_size(); }
bool Fabric::is_global_zero() const { return strategy_->is_global_zero(); }
torch::Device Fabric::device() const { return strategy_->root_device(); }

}  // namespace arc
