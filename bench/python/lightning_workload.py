"""The canonical workload (shared/WORKLOAD.md) as a PyTorch Lightning user writes it: a
LightningModule, a DataLoader over the training samples in the workload's epoch order, and
Trainer.fit for one epoch. The Lightning rows of bench/frameworks_bench.

    python3 lightning_workload.py --model mlp --accelerator gpu --precision bf16-mixed

Prints one line: RESULT {json} with WORKLOAD.md section 6's fields, timed at the same points as
torch_workload.py and Arclight's RunReport (a step ends once its loss is read back).
"""
import argparse
import dataclasses
import os
import sys
import time
from collections.abc import Mapping

import numpy as np
import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset


def allow_torch_1_13_on_python_3_11():
    """Lightning imports torch.distributed._shard, whose torch 1.13 declares a dataclass field with
    another dataclass's instance as its default; Python 3.11 refuses such unhashable defaults
    (torch 2.0 gives the field a default_factory). Gives such a field a factory before it is refused,
    until Lightning is imported; returns the function to put back (None: nothing was changed)."""
    if sys.version_info < (3, 11) or int(torch.__version__.split(".")[0]) >= 2:
        return None
    get_field = dataclasses._get_field

    def with_factory(cls, name, *args):
        declared = cls.__dict__.get(name)
        if isinstance(declared, dataclasses.Field) and dataclasses.is_dataclass(declared.default) \
                and type(declared.default).__hash__ is None:
            default = declared.default
            declared.default, declared.default_factory = dataclasses.MISSING, lambda: default
        return get_field(cls, name, *args)

    dataclasses._get_field = with_factory
    return get_field


original_get_field = allow_torch_1_13_on_python_3_11()
try:
    try:
        import lightning.pytorch as pl
    except ImportError:
        import pytorch_lightning as pl
    if original_get_field is not None and torch.distributed.is_available():
        # A LightningModule's __init__ imports it on torch < 2.1: imported here, under the fix.
        import torch.distributed._shard.sharded_tensor  # noqa: F401
finally:
    if original_get_field is not None:
        dataclasses._get_field = original_get_field

import torch_workload as workload


class Classifier(pl.LightningModule):
    def __init__(self, kind):
        super().__init__()
        self.net = workload.make_model(kind)
        workload.init_parameters(self.net)

    def training_step(self, batch, batch_idx):
        inputs, labels = batch
        return F.cross_entropy(self.net(inputs), labels)

    def configure_optimizers(self):
        return torch.optim.SGD(self.parameters(), lr=0.05, momentum=0.9)


class Timing(pl.Callback):
    def __init__(self):
        self.start, self.first_step, self.step_ends, self.losses = None, None, [], []

    def on_train_epoch_start(self, trainer, module):
        if self.start is None:
            self.start = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        # Lightning hands on a training_step's loss as {"loss": loss}.
        loss = outputs["loss"] if isinstance(outputs, Mapping) else outputs
        self.losses.append(loss.item())
        self.step_ends.append(time.perf_counter())
        if self.first_step is None:
            self.first_step = time.time() - workload.t0()


def main():
    parser = argparse.ArgumentParser()
    workload.add_workload_arguments(parser)
    parser.add_argument("--accelerator", choices=["cpu", "gpu"], default="cpu")
    args = parser.parse_args()
    torch.set_num_threads(int(os.environ.get("TORCH_THREADS", "1")))

    x, y = workload.make_data()
    train = TensorDataset(x[:60000], y[:60000])
    loader = DataLoader(train, batch_size=64, sampler=workload.epoch_order().tolist(),
                        pin_memory=args.accelerator == "gpu")
    module = Classifier(args.model)
    timing = Timing()
    trainer = pl.Trainer(accelerator=args.accelerator, devices=1, precision=args.precision, max_epochs=1,
                         limit_train_batches=args.steps or 1.0, logger=False, enable_checkpointing=False,
                         deterministic=args.deterministic or None,
                         enable_progress_bar=False, enable_model_summary=False, callbacks=[timing])
    trainer.fit(module, loader)

    # Lightning's teardown moves the module back to the CPU; validate where it trained.
    totals = workload.validate(module.net.to("cuda" if args.accelerator == "gpu" else "cpu"), x, y, args.precision)
    workload.print_result(module.net, len(timing.step_ends), 1, bool(args.steps), timing.step_ends[-1] - timing.start,
                          timing.first_step, float(np.mean(timing.losses[-100:])), timing.step_ends, totals)


if __name__ == "__main__":
    main()
