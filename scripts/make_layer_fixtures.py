"""PyTorch's answers for module 03's activations and layers, as one small reference file.

Run from the repository root where torch is installed::

    .venv/bin/python scripts/make_layer_fixtures.py

It writes ``tests/fixtures/layers/torch_reference.npz``, which ``tests/test_layers_torch_parity.py``
replays against tinyflo without importing torch. Everything is float64 and seeded:

* ``act/<name>/x``, ``act/<name>/out``, ``act/<name>/grad``: each activation on inputs that
  include ±1e4, and the gradient of ``sum(out * v)`` for ``v = act/<name>/v``; PReLU's weight
  and its gradient under ``act/prelu/weight`` and ``act/prelu/grad_weight``;
* ``batchnorm/...``: BatchNorm1d over three training steps on (N, C, L) batches — each step's
  output, the running statistics after each step — then an evaluation output;
* ``model/...``: a small model's ``state_dict`` (its key order under ``model_keys``), an input,
  and the model's output in eval mode, to be loaded into the same tinyflo model.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn as tnn
import torch.nn.functional as F

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "layers" / "torch_reference.npz"

ACTIVATIONS = {
    "relu": F.relu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "leaky_relu": F.leaky_relu,
    "leaky_relu-0.2": lambda x: F.leaky_relu(x, 0.2),
    "elu": F.elu,
    "elu-0.5": lambda x: F.elu(x, alpha=0.5),
    "selu": F.selu,
    "gelu": F.gelu,
    "gelu-tanh": lambda x: F.gelu(x, approximate="tanh"),
    "silu": F.silu,
    "mish": F.mish,
    "softplus": F.softplus,
    "softplus-beta": lambda x: F.softplus(x, beta=2.0, threshold=3.0),
    "hardswish": F.hardswish,
    "softmax": lambda x: F.softmax(x, dim=-1),
    "softmax-axis0": lambda x: F.softmax(x, dim=0),
    "log_softmax": lambda x: F.log_softmax(x, dim=-1),
    "log_softmax-axis0": lambda x: F.log_softmax(x, dim=0),
}


def activations(rng, arrays):
    for name, fn in ACTIVATIONS.items():
        x = rng.standard_normal((4, 6)) * 3
        x[0, :4] = [1e4, -1e4, 25.0, -25.0]
        x[3] = [-1e4] * 6
        t = torch.tensor(x, requires_grad=True)
        out = fn(t)
        v = rng.standard_normal(out.shape)
        (out * torch.tensor(v)).sum().backward()
        arrays.update({f"act/{name}/x": x, f"act/{name}/out": out.detach().numpy(),
                       f"act/{name}/v": v, f"act/{name}/grad": t.grad.numpy()})
    x = rng.standard_normal((3, 4, 2)) * 2
    w = rng.uniform(0.05, 0.5, 4)
    t, tw = torch.tensor(x, requires_grad=True), torch.tensor(w, requires_grad=True)
    out = F.prelu(t, tw)
    v = rng.standard_normal(out.shape)
    (out * torch.tensor(v)).sum().backward()
    arrays.update({"act/prelu/x": x, "act/prelu/weight": w, "act/prelu/out": out.detach().numpy(),
                   "act/prelu/v": v, "act/prelu/grad": t.grad.numpy(), "act/prelu/grad_weight": tw.grad.numpy()})


def batchnorm(rng, arrays):
    layer = tnn.BatchNorm1d(3, momentum=0.3).double()
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([0.5, 1.0, 2.0]))
        layer.bias.copy_(torch.tensor([0.0, -1.0, 1.0]))
    for step in range(3):
        x = rng.standard_normal((4, 3, 5)) * (step + 1) + step
        arrays[f"batchnorm/step{step}/x"] = x
        arrays[f"batchnorm/step{step}/out"] = layer(torch.tensor(x)).detach().numpy()
        arrays[f"batchnorm/step{step}/running_mean"] = layer.running_mean.numpy().copy()
        arrays[f"batchnorm/step{step}/running_var"] = layer.running_var.numpy().copy()
    layer.eval()
    x = rng.standard_normal((2, 3, 5))
    arrays["batchnorm/eval/x"] = x
    arrays["batchnorm/eval/out"] = layer(torch.tensor(x)).detach().numpy()


def model(rng, arrays):
    torch.manual_seed(0)
    net = tnn.Sequential(
        tnn.Linear(5, 8), tnn.BatchNorm1d(8), tnn.GELU(), tnn.Dropout(0.5), tnn.Linear(8, 6),
        tnn.LayerNorm(6), tnn.PReLU(6), tnn.Linear(6, 3), tnn.LogSoftmax(dim=-1),
    ).double()
    net.train()
    for _ in range(3):  # move the running statistics away from their initial values
        net(torch.randn(16, 5, dtype=torch.float64))
    net.eval()
    state = net.state_dict()
    for key, value in state.items():
        arrays[f"model/state/{key}"] = value.numpy()
    x = rng.standard_normal((7, 5))
    arrays["model/x"] = x
    arrays["model/out"] = net(torch.tensor(x)).detach().numpy()
    return list(state)


def main() -> None:
    rng = np.random.default_rng(2026)
    arrays: dict[str, np.ndarray] = {}
    activations(rng, arrays)
    batchnorm(rng, arrays)
    keys = model(rng, arrays)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, model_keys=np.array(json.dumps(keys)), torch_version=np.array(torch.__version__), **arrays)
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes, {len(arrays)} arrays)")


if __name__ == "__main__":
    main()
