// arc::Accelerator.
#include <arc/fabric/accelerator.h>

#include <arc/accelerators/accelerator_backend.h>
#include <arc/core/detail/accelerator_connector.h>
#include <arc/strategies/strategy.h>
#include <arc/strategies/sync_batch_norm.h>

#include <torch/torch.h>

namespace arc {

Accelerator::Accelerator(TrainerOptions options) : options_(std::move(options)) {
  options_.validate();
  auto run = detail::resolve_run(options_);
  backend_ = std::move(run.accelerator);
  strategy_ = std::move(run.strategy);
  precision_ = std::move(run.precision);
  torch::set_num_threads(static_cast<int>(run.threads_per_process));
  if (options_.seed()) torch::manual_seed(*options_.seed());
}

// The other ranks may still be running; ddp_spawn waits for them when the program exits. An
// exception that leaves the loop is the rank's failure, as in a Trainer: ddp_spawn's rank 0 stops
// the others at once (they would wait for it in a collective), another rank tells rank 0.
Accelerator::~Accelerator() {
  if (std::uncaught_exceptions() > uncaught_)
    strategy_->on_failure("an exception left its training loop");
  else
    strategy_->teardown();
}

void Accelerator::prepare(torch::nn::Module& model) {
  precision_->convert_module(model);
  strategy_->setup_module(model);
  connect_sync_batch_norms(model, strategy_->collectives(), options_.sync_batchnorm());
}

void Accelerator::prepare(torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params())
      ARC_CHECK(p.device() == device(), "an optimizer parameter is on ", p.device().str(), " but this rank trains on ",
                device().str(), "; call prepare(model) before creating the optimizer");
}

std::unique_ptr<DataLoader> Accelerator::prepare(const DataSource& data) {
  return std::make_unique<DataLoader>(data, strategy_->global_rank(), strategy_->world_size(),
                                      options_.seed().value_or(0));
}

Batch Accelerator::prepare_batch(const Batch& batch) const { return precision_->to_device(batch); }

void Accelerator::backward(const torch::Tensor& loss, bool sync) {
  strategy_->set_gradient_sync(sync);
  strategy_->backward(precision_->pre_backward(loss));
  strategy_->set_gradient_sync(true);
}

void Accelerator::unscale_gradients(torch::optim::Optimizer& optimizer) { precision_->unscale(optimizer); }

bool Accelerator::step(torch::optim::Optimizer& optimizer) {
  const bool stepped = precision_->optimizer_step(optimizer);
  precision_->update();
  return stepped;
}

std::map<std::string, torch::Tensor> Accelerator::all_reduce_dict(const std::map<std::string, torch::Tensor>& values,
                                                                  Reduce op) {
  return strategy_->all_reduce(values, op);
}

torch::Tensor Accelerator::all_reduce(const torch::Tensor& tensor, Reduce op) {
  return strategy_->all_reduce(tensor, op);
}

void Accelerator::broadcast(torch::Tensor& tensor, int64_t src) { strategy_->broadcast(tensor, src); }

std::string Accelerator::broadcast(const std::string& text, int64_t src) { return strategy_->broadcast(text, src); }

std::vector<torch::Tensor> Accelerator::all_gather(const torch::Tensor& tensor) {
  return strategy_->all_gather(tensor);
}

void Accelerator::barrier() { strategy_->barrier(); }

std::vector<nlohmann::json> Accelerator::distribute(const std::function<nlohmann::json(int64_t rank)>& fn) {
  const std::string mine = fn(global_rank()).dump();
  std::vector<nlohmann::json> out;
  for (int64_t rank = 0; rank < world_size(); ++rank) out.push_back(nlohmann::json::parse(broadcast(mine, rank)));
  return out;
}

int64_t Accelerator::global_rank() const { return strategy_->global_rank(); }
int64_t Accelerator::local_rank() const { return strategy_->local_rank(); }
int64_t Accelerator::world_size() const { return strategy_->world_size(); }
bool Accelerator::is_global_zero() const { return strategy_->is_global_zero(); }
torch::Device Accelerator::device() const { return strategy_->root_device(); }

}  // namespace arc
