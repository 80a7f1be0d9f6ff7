// LambdaCallback: hooks given as functions, for one-off behaviour without a class.
#pragma once

#include <arc/callbacks/callback.h>

#include <functional>

namespace arc {

/// Set the functions you need; the others stay empty.
class LambdaCallback : public Callback {
 public:
  using Hook = std::function<void(Trainer&, TrainModule&)>;
  using BatchHook = std::function<void(Trainer&, TrainModule&, const torch::Tensor&, Batch&, int64_t)>;

  std::string state_key() const override { return "LambdaCallback"; }
  Hook fit_start, fit_end, train_epoch_start, train_epoch_end, validation_end;
  BatchHook train_batch_end;

  void on_fit_start(Trainer& t, TrainModule& m) override { call(fit_start, t, m); }
  void on_fit_end(Trainer& t, TrainModule& m) override { call(fit_end, t, m); }
  void on_train_epoch_start(Trainer& t, TrainModule& m) override { call(train_epoch_start, t, m); }
  void on_train_epoch_end(Trainer& t, TrainModule& m) override { call(train_epoch_end, t, m); }
  void on_validation_end(Trainer& t, TrainModule& m) override { call(validation_end, t, m); }
  void on_train_batch_end(Trainer& t, TrainModule& m, const torch::Tensor& loss, Batch& batch, int64_t i) override {
    if (train_batch_end) train_batch_end(t, m, loss, batch, i);
  }

 private:
  static void call(const Hook& hook, Trainer& t, TrainModule& m) {
    if (hook) hook(t, m);
  }
};

}  // namespace arc
