"""Loads weights that `arc export` wrote into the PyTorch twin of the canonical workload
(bench/python/torch_workload.py) and prints what the twin makes of them, as JSON: its parameters'
SHA-256 (as the workload's RESULT line gives it) and its validation loss and accuracy.

  twin_from_weights.py FILE mlp|cnn [ONNX]
FILE: .safetensors, read by a reader written from the spec; .pt, read by
torch.load(FILE, weights_only=True); .ckpt, read by Lightning's load_from_checkpoint into a
LightningModule with Arclight's parameter names where Lightning imports, else its "state_dict" by
torch.load(FILE, weights_only=True). "loaded_by" in the JSON says which.
ONNX: also export the twin with torch.onnx.export to this file, check it with onnx.checker and
compare its initializers with the twin's parameters ("onnx_initializers_match").
"""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "..", "bench", "python"))
sys.path.insert(0, os.path.join(HERE, "..", "fabric"))

import torch  # noqa: E402
import torch_workload  # noqa: E402
from safetensors_spec import read  # noqa: E402

# Arclight's module names -> the twin's (an nn.Sequential, numbered by position).
NAMES = {"mlp": {"fc1": "0", "fc2": "2", "fc3": "4"}, "cnn": {"conv1": "1", "conv2": "4", "fc": "8"}}


def lightning_twin(path, kind):
    """The twin, loaded by load_from_checkpoint through a LightningModule named as Arclight's module."""
    from lightning_workload import pl  # imports Lightning as the benchmark does, on torch 1.13 too

    class Twin(pl.LightningModule):
        def __init__(self, kind, **hparams):
            super().__init__()
            self.save_hyperparameters()
            self.layers = [torch_workload.make_model(kind)]  # a list: registered by Arclight's names only
            for name, index in NAMES[kind].items():
                setattr(self, name, self.layers[0][int(index)])

    twin = Twin.load_from_checkpoint(path, map_location="cpu", kind=kind)
    return twin.layers[0], {"hparams": {k: v for k, v in twin.hparams.items() if k != "kind"}}


def to_onnx(model, kind, path):
    """Exports `model` to `path`; whether the checked file's initializers are its parameters."""
    import onnx
    from onnx import numpy_helper

    if kind == "cnn":  # images in, as ONNX takes them (torch 1.13 does not export Unflatten)
        model, example = model[1:], torch.zeros(1, 1, 28, 28)
    else:
        example = torch.zeros(1, 784)
    torch.onnx.export(model.eval(), example, path, input_names=["pixels"], output_names=["logits"])
    exported = onnx.load(path)
    onnx.checker.check_model(exported, full_check=True)
    initializers = [numpy_helper.to_array(tensor) for tensor in exported.graph.initializer]
    return all(any(p.shape == i.shape and (p.detach().numpy() == i).all() for i in initializers)
               for p in model.parameters())


def main(path, kind, onnx_path=None):
    torch.set_num_threads(1)  # as the Arclight run it is compared with
    model, extra = torch_workload.make_model(kind), {"loaded_by": "torch.load"}
    if path.endswith(".ckpt"):
        try:
            model, extra = lightning_twin(path, kind)
            extra["loaded_by"] = "lightning"
        except ImportError:
            checkpoint = torch.load(path)  # torch 1.13's weights_only refuses the hparams' floats
            extra["epoch"], extra["global_step"] = checkpoint["epoch"], checkpoint["global_step"]
            weights = checkpoint["state_dict"]
    elif path.endswith(".pt"):
        weights = torch.load(path, weights_only=True)
    else:
        weights, extra = read(path), {"loaded_by": "safetensors_spec"}
    if extra["loaded_by"] != "lightning":
        state = {}
        for name, tensor in weights.items():
            layer, _, rest = name.partition(".")
            state[NAMES[kind][layer] + "." + rest] = tensor
        model.load_state_dict(state, strict=True)
    x, y = torch_workload.make_data()
    loss, correct, count = torch_workload.validate(model, x, y, "32-true").tolist()
    if onnx_path:
        extra["onnx_initializers_match"] = to_onnx(model, kind, onnx_path)
    print(json.dumps({"param_sha256": torch_workload.parameter_sha256(model), "val_loss": loss / count,
                      "val_acc": correct / count, **extra}))


if __name__ == "__main__":
    main(*sys.argv[1:])
