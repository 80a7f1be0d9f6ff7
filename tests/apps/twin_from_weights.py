"""Loads weights that `arc export` wrote into the PyTorch twin of the canonical workload
(bench/python/torch_workload.py) and prints what the twin makes of them, as JSON: its parameters'
SHA-256 (as the workload's RESULT line gives it) and its validation loss and accuracy.

  twin_from_weights.py FILE mlp|cnn
FILE: .safetensors, read by a reader written from the spec; .pt, read by
torch.load(FILE, weights_only=True).
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


def main(path, kind):
    torch.set_num_threads(1)  # as the Arclight run it is compared with
    model = torch_workload.make_model(kind)
    state = {}
    weights = torch.load(path, weights_only=True) if path.endswith(".pt") else read(path)
    for name, tensor in weights.items():
        layer, _, rest = name.partition(".")
        state[NAMES[kind][layer] + "." + rest] = tensor
    model.load_state_dict(state, strict=True)
    x, y = torch_workload.make_data()
    loss, correct, count = torch_workload.validate(model, x, y, "32-true").tolist()
    print(json.dumps({"param_sha256": torch_workload.parameter_sha256(model), "val_loss": loss / count,
                      "val_acc": correct / count}))


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
