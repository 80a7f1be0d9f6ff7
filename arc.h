// The whole public API of Arclight: this header and those it includes are the public headers. The
// other installed headers are what those need; detail/ folders are internal and not installed.
#pragma once

#include <arc/accelerators/accelerator_backend.h>
#include <arc/base/config.h>
#include <arc/base/console.h>
#include <arc/base/error.h>
#include <arc/base/registry.h>
#include <arc/base/sha256.h>
#include <arc/callbacks/batch_size_finder.h>
#include <arc/callbacks/callback.h>
#include <arc/callbacks/callback_registry.h>
#include <arc/callbacks/device_stats_monitor.h>
#include <arc/callbacks/early_stopping.h>
#include <arc/callbacks/elastic_checkpoint.h>
#include <arc/callbacks/finetuning.h>
#include <arc/callbacks/gradient_accumulation_scheduler.h>
#include <arc/callbacks/lambda_callback.h>
#include <arc/callbacks/learning_rate_finder.h>
#include <arc/callbacks/learning_rate_monitor.h>
#include <arc/callbacks/model_checkpoint.h>
#include <arc/callbacks/model_pruning.h>
#include <arc/callbacks/model_summary.h>
#include <arc/callbacks/on_exception_checkpoint.h>
#include <arc/callbacks/prediction_writer.h>
#include <arc/callbacks/progress_bar.h>
#include <arc/callbacks/spike_detection.h>
#include <arc/callbacks/throughput_monitor.h>
#include <arc/callbacks/timer.h>
#include <arc/callbacks/weight_averaging.h>
#include <arc/core/async_checkpoint_writer.h>
#include <arc/core/checkpoint.h>
#include <arc/core/load_from_checkpoint.h>
#include <arc/core/lr_scheduler.h>
#include <arc/core/module_registry.h>
#include <arc/core/optimizer_registry.h>
#include <arc/core/train_module.h>
#include <arc/core/trainer.h>
#include <arc/core/trainer_options.h>
#include <arc/core/tuner.h>
#include <arc/data/batch.h>
#include <arc/data/data_loader.h>
#include <arc/data/data_module.h>
#include <arc/data/dataset.h>
#include <arc/data/sampler.h>
#include <arc/fabric/accelerator.h>
#include <arc/loggers/csv_logger.h>
#include <arc/loggers/folder_logger.h>
#include <arc/loggers/jsonl_logger.h>
#include <arc/loggers/logger.h>
#include <arc/loggers/logger_registry.h>
#include <arc/loggers/tensorboard_logger.h>
#include <arc/profilers/advanced_profiler.h>
#include <arc/profilers/profiler.h>
#include <arc/profilers/simple_profiler.h>
#include <arc/strategies/strategy.h>
#include <arc/strategies/sync_batch_norm.h>
#include <arc/version.h>

/// Arclight: a Lightning-style training framework for C++ on LibTorch. Start with arc::Trainer,
/// arc::TrainModule and arc::TrainerOptions; arc::Accelerator is the facade for your own loop.
namespace arc {}
