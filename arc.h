// The whole public API of Arclight.
#pragma once

#include <arc/accelerators/accelerator_backend.h>
#include <arc/callbacks/callback.h>
#include <arc/callbacks/model_checkpoint.h>
#include <arc/callbacks/model_summary.h>
#include <arc/callbacks/progress_bar.h>
#include <arc/core/accelerator.h>
#include <arc/core/batch.h>
#include <arc/core/checkpoint.h>
#include <arc/core/config.h>
#include <arc/core/console.h>
#include <arc/core/data_loader.h>
#include <arc/core/data_module.h>
#include <arc/core/dataset.h>
#include <arc/core/error.h>
#include <arc/core/lr_scheduler.h>
#include <arc/core/module_registry.h>
#include <arc/core/registry.h>
#include <arc/core/sampler.h>
#include <arc/core/sha256.h>
#include <arc/core/train_module.h>
#include <arc/core/trainer.h>
#include <arc/core/trainer_options.h>
#include <arc/loggers/jsonl_logger.h>
#include <arc/loggers/logger.h>
#include <arc/strategies/strategy.h>
