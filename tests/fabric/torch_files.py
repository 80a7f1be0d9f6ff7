"""Files that Python's torch.save writes, for the weights tests to read without Python.

  torch_files.py FOLDER   writes into FOLDER:
    views.pt, views.safetensors  the same tensors (every dtype; a transposed, a sliced and a row view
                                 sharing one storage; an empty and a 0-d tensor), as torch.save
                                 writes them and, contiguous, as the safetensors spec says
    lightning.ckpt               a checkpoint laid out as Lightning's: "state_dict" beside epoch,
                                 global_step, its version, hyper_parameters, optimizer states and loops
                                 (floats, None, tuples, bytes)
    nested.pt                    {"model": state_dict, "opt": 1}: no state_dict at the top
    evil.pt                      a pickle that calls os.system (it would create FOLDER/pwned)
    script.pt                    a TorchScript archive (torch.jit.save)
    legacy.pt                    the format before PyTorch 1.6 (_use_new_zipfile_serialization=False)
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from safetensors_spec import expected, write  # noqa: E402


class Evil:
    def __init__(self, folder):
        self.folder = folder

    def __reduce__(self):
        return (os.system, ("touch " + os.path.join(self.folder, "pwned"),))


def main(folder):
    tensors = expected()
    grid = torch.arange(24, dtype=torch.float32).reshape(4, 6)
    tensors.update({"transposed": grid.t(), "sliced": grid[:, 2:5], "row": grid[1], "scalar": torch.tensor(2.5)})
    torch.save(tensors, os.path.join(folder, "views.pt"))
    write(os.path.join(folder, "views.safetensors"), {k: v.contiguous() for k, v in tensors.items()})

    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.BatchNorm1d(8), torch.nn.Linear(8, 3))
    state = net.state_dict()
    torch.save({"epoch": 3, "global_step": 120, "pytorch-lightning_version": "2.2.5",
                "state_dict": {"model." + k: v for k, v in state.items()},
                "optimizer_states": [{"state": {0: {"momentum_buffer": torch.ones(2)}},
                                      "param_groups": [{"lr": 0.1, "betas": (0.9, 0.999), "params": [0]}]}],
                "hyper_parameters": {"lr": 0.1, "hidden": [8], "name": None}, "loops": {"raw": b"\x00\xff"}},
               os.path.join(folder, "lightning.ckpt"))
    torch.save({"model": state, "opt": 1}, os.path.join(folder, "nested.pt"))
    torch.save({"w": Evil(folder)}, os.path.join(folder, "evil.pt"))
    torch.jit.save(torch.jit.script(net.eval()), os.path.join(folder, "script.pt"))
    torch.save(state, os.path.join(folder, "legacy.pt"), _use_new_zipfile_serialization=False)
    torch.save(state, os.path.join(folder, "net.pt"))


if __name__ == "__main__":
    main(sys.argv[1])
