"""safetensors from the specification alone (struct + json), for the weights tests.
read(path) gives a file's tensors by name.

  safetensors_spec.py check FILE   reads FILE as the spec says, checks its layout and that its
                                   tensors are those of expected() (bit for bit); prints "OK <n>"
  safetensors_spec.py write FILE   writes expected() to FILE the same way

The tensors: one per safetensors dtype, their values from torch.arange, so that both sides make
the same ones.
"""
import json
import struct
import sys

import torch

DTYPES = {"F64": torch.float64, "F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16,
          "I64": torch.int64, "I32": torch.int32, "I16": torch.int16, "I8": torch.int8, "U8": torch.uint8,
          "BOOL": torch.bool}


def expected():
    """name -> tensor: "t_<dtype>" of shape [2, 3] for each dtype, and an empty one."""
    out = {}
    for name, dtype in DTYPES.items():
        values = torch.arange(6, dtype=torch.float64).reshape(2, 3) * 0.75 - 1.5
        out["t_" + name.lower()] = (values != 0) if dtype == torch.bool else values.to(dtype)
    out["empty"] = torch.zeros(0, 4, dtype=torch.float32)
    return out


def read(path):
    """name -> tensor of the file at `path`, read as the spec says."""
    data = open(path, "rb").read()
    (length,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + length].decode("utf-8"))
    body = data[8 + length:]
    out = {}
    for name, entry in header.items():
        if name == "__metadata__":
            continue
        begin, end = entry["data_offsets"]
        dtype = DTYPES[entry["dtype"]]
        raw = bytearray(body[begin:end])
        flat = torch.frombuffer(raw, dtype=dtype) if raw else torch.zeros(0, dtype=dtype)
        out[name] = flat.reshape(entry["shape"])
    return out


def check(path):
    data = open(path, "rb").read()
    (length,) = struct.unpack("<Q", data[:8])
    assert (8 + length) % 8 == 0, f"the header ends at byte {8 + length}, not on an 8-byte boundary"
    header = json.loads(data[8:8 + length].decode("utf-8"))
    body = data[8 + length:]
    spans = sorted(tuple(v["data_offsets"]) for k, v in header.items() if k != "__metadata__")
    at = 0
    for begin, end in spans:
        assert begin == at, f"a hole or an overlap at byte {begin} of the data (expected {at})"
        at = end
    assert at == len(body), f"{len(body) - at} bytes after the last tensor"
    assert header.get("__metadata__", {}).get("format") == "pt", header.get("__metadata__")
    want, got = expected(), read(path)
    assert sorted(got) == sorted(want), sorted(got)
    for name, tensor in want.items():
        assert got[name].dtype == tensor.dtype and torch.equal(got[name], tensor), (name, got[name], tensor)
    print("OK", len(want))


def write(path, tensors=None):
    """Writes `tensors` (name -> tensor; default expected()) to `path` as the spec says."""
    header, chunks, at = {"__metadata__": {"format": "pt", "written_by": "the spec"}}, [], 0
    for name, tensor in (expected() if tensors is None else tensors).items():
        raw = tensor.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes() if tensor.numel() else b""
        header[name] = {"dtype": next(k for k, v in DTYPES.items() if v == tensor.dtype),
                        "shape": list(tensor.shape), "data_offsets": [at, at + len(raw)]}
        chunks.append(raw)
        at += len(raw)
    text = json.dumps(header).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as out:
        out.write(struct.pack("<Q", len(text)) + text + b"".join(chunks))


if __name__ == "__main__":
    {"check": check, "write": write}[sys.argv[1]](sys.argv[2])
