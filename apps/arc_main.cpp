// Entry point of `arc-engine`, which runs the `arc` tool's commands (apps/tool_launcher.h) over the
// example modules on the canonical workload.
#include <arc/cli/cli.h>

namespace {

const char* kExamples = R"(Examples:
  arc fit                                     train mlp_classifier one epoch on the canonical data
  arc fit --config run.json                   train what run.json describes
  arc fit --set module.name=cnn_classifier --set trainer.max_epochs=3
  arc fit --set data.batch_size=128 --set trainer.limit_train_batches=0.1
  arc fit --trainer.max_epochs=3 --data.batch_size 128   LightningCLI's flags: the same as --set
  arc fit --model=cnn_classifier --optimizer=Adam --optimizer.lr=0.001 --seed_everything 42
  arc fit --resume last                       continue from the newest last.ckpt, exactly (none: start afresh)
  arc validate --config run.json --ckpt last  one validation pass with the last checkpoint's weights
  arc export --ckpt last --to model.safetensors   the last checkpoint's weights, for PyTorch and Hugging Face
  arc fit --set module.init_weights=model.safetensors   start from pretrained weights
  arc consolidate --ckpt last.ckpt --to whole.ckpt  a sharded checkpoint (a folder) as one file
  arc lr_find --config run.json --svg lr.svg  the learning-rate range test; prints the suggested rate
  arc scale_batch_size --mode binsearch       the largest data.batch_size whose steps fit in memory
  arc modules                                 list registered modules and data modules, with their keys
  arc reference                               every config key with its default, as Markdown
  arc fit --trainer.callbacks.help ModelCheckpoint   a class's init_args with their defaults (jsonargparse's
                                              --<key>.help; also trainer.logger, model, data, optimizer, lr_scheduler,
                                              trainer.strategy, trainer.profiler, trainer.plugins)
  (`arc train` is `arc fit` under its earlier name; `arc fit --help` lists every trainer key.)

A config (JSON, or YAML for .yaml and .yml) has three sections:
  {"module": {"name": "mlp_classifier", "hidden": 256},
   "data": {"batch_size": 64},
   "trainer": {"max_epochs": 1, "accelerator": "cpu",
               "callbacks": [{"class_path": "EarlyStopping", "init_args": {"monitor": "val_loss"}}]}}
  As in LightningCLI, the module's section may be called "model", and the module and data may be
  given as {"class_path": "mlp_classifier", "init_args": {"hidden": 256}}.
)";

}  // namespace

int main(int argc, char** argv) {
  // With no config, `arc fit` trains mlp_classifier for one epoch.
  return arc::cli::run(argc, argv,
                       arc::cli::CliOptions()
                           .program("arc")
                           .module("mlp_classifier")
                           .examples(kExamples)
                           .trainer_defaults({{"max_epochs", 1}}));
}
