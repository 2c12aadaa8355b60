"""PyTorch's answers for module 10's convolutions and pooling, as one small reference file.

Run from the repository root where torch is installed::

    .venv/bin/python scripts/make_conv_fixtures.py

It writes ``tests/fixtures/conv/torch_reference.npz``, which ``tests/test_conv_torch_parity.py``
replays against tinyflo without importing torch. Everything is float64 and seeded:

* ``conv2d/<case>/...``: input, weight, bias (when the case has one), the output, the projection
  ``v`` and the gradients of ``sum(out * v)`` with respect to input, weight and bias, for each
  option combination in ``CONV_CASES`` (its arguments as JSON under ``conv2d/<case>/args``);
* ``pool/<case>/...``: the same (input, output, ``v``, input gradient) for the pooling cases;
* ``batchnorm2d/...``: BatchNorm2d over three training steps (output and running statistics after
  each), then one evaluation output.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch
import torch.nn as tnn
import torch.nn.functional as F

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "conv" / "torch_reference.npz"

# name: (input shape, weight shape, bias?, keyword arguments of conv2d)
CONV_CASES = {
    "plain": ((2, 3, 7, 6), (4, 3, 3, 3), True, {}),
    "no-bias": ((2, 3, 7, 6), (4, 3, 3, 3), False, {}),
    "stride-padding": ((2, 3, 8, 7), (5, 3, 3, 3), True, {"stride": 2, "padding": 1}),
    "dilation": ((1, 2, 9, 8), (3, 2, 3, 2), True, {"dilation": 2, "padding": 1}),
    "groups": ((2, 4, 6, 6), (6, 2, 3, 3), True, {"groups": 2, "padding": 1}),
    "depthwise": ((2, 3, 6, 5), (3, 1, 3, 3), False, {"groups": 3}),
    "non-square": ((2, 2, 8, 9), (3, 2, 2, 4), True, {"stride": [2, 1], "padding": [1, 2], "dilation": [1, 2]}),
    "5x5-padding-2": ((1, 1, 12, 12), (6, 1, 5, 5), True, {"padding": 2}),
}

# name: (input shape, function name, keyword arguments)
POOL_CASES = {
    "max-2": ((2, 3, 6, 6), "max_pool2d", {"kernel_size": 2}),
    "max-3-stride-2-pad-1": ((2, 2, 7, 6), "max_pool2d", {"kernel_size": 3, "stride": 2, "padding": 1}),
    "max-dilation-non-square": ((1, 2, 8, 7), "max_pool2d", {"kernel_size": [2, 3], "stride": [1, 2], "dilation": 2}),
    "avg-2": ((2, 3, 6, 6), "avg_pool2d", {"kernel_size": 2}),
    "avg-3-stride-2-pad-1": ((2, 2, 7, 6), "avg_pool2d", {"kernel_size": 3, "stride": 2, "padding": 1}),
    "avg-exclude-pad": ((2, 2, 7, 6), "avg_pool2d",
                        {"kernel_size": 3, "stride": 2, "padding": 1, "count_include_pad": False}),
    "avg-non-square": ((1, 2, 7, 8), "avg_pool2d", {"kernel_size": [2, 3], "stride": [1, 2], "padding": [1, 0]}),
    "adaptive-non-divisible": ((2, 2, 7, 5), "adaptive_avg_pool2d", {"output_size": [3, 4]}),
    "adaptive-upsample": ((1, 2, 3, 2), "adaptive_avg_pool2d", {"output_size": [5, 3]}),
    "adaptive-global": ((2, 3, 5, 4), "adaptive_avg_pool2d", {"output_size": 1}),
}


def conv_cases(rng, arrays):
    for name, (xs, ws, has_bias, kwargs) in CONV_CASES.items():
        x, w = torch.tensor(rng.standard_normal(xs), requires_grad=True), torch.tensor(rng.standard_normal(ws), requires_grad=True)
        b = torch.tensor(rng.standard_normal(ws[0]), requires_grad=True) if has_bias else None
        out = F.conv2d(x, w, b, **{k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()})
        v = rng.standard_normal(out.shape)
        (out * torch.tensor(v)).sum().backward()
        key = f"conv2d/{name}"
        arrays.update({f"{key}/args": np.array(json.dumps(kwargs)), f"{key}/x": x.detach().numpy(),
                       f"{key}/weight": w.detach().numpy(), f"{key}/out": out.detach().numpy(), f"{key}/v": v,
                       f"{key}/grad_x": x.grad.numpy(), f"{key}/grad_weight": w.grad.numpy()})
        if b is not None:
            arrays.update({f"{key}/bias": b.detach().numpy(), f"{key}/grad_bias": b.grad.numpy()})


def pool_cases(rng, arrays):
    for name, (xs, fn, kwargs) in POOL_CASES.items():
        size = int(np.prod(xs))  # distinct values: max pooling has no ties to break
        x = torch.tensor(rng.permutation(size).reshape(xs) / size - 0.5, requires_grad=True)
        out = getattr(F, fn)(x, **{k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()})
        v = rng.standard_normal(out.shape)
        (out * torch.tensor(v)).sum().backward()
        key = f"pool/{name}"
        arrays.update({f"{key}/fn": np.array(fn), f"{key}/args": np.array(json.dumps(kwargs)),
                       f"{key}/x": x.detach().numpy(), f"{key}/out": out.detach().numpy(), f"{key}/v": v,
                       f"{key}/grad_x": x.grad.numpy()})


def batchnorm2d(rng, arrays):
    layer = tnn.BatchNorm2d(3, momentum=0.3).double()
    with torch.no_grad():
        layer.weight.copy_(torch.tensor([0.5, 1.0, 2.0]))
        layer.bias.copy_(torch.tensor([0.0, -1.0, 1.0]))
    for step in range(3):
        x = torch.tensor(rng.standard_normal((3, 3, 4, 5)) * (step + 1) + step, requires_grad=True)
        out = layer(x)
        v = rng.standard_normal(out.shape)
        (out * torch.tensor(v)).sum().backward()
        key = f"batchnorm2d/step{step}"
        arrays.update({f"{key}/x": x.detach().numpy(), f"{key}/out": out.detach().numpy(), f"{key}/v": v,
                       f"{key}/grad_x": x.grad.numpy(),
                       f"{key}/running_mean": layer.running_mean.numpy().copy(),
                       f"{key}/running_var": layer.running_var.numpy().copy()})
    arrays["batchnorm2d/grad_weight"] = layer.weight.grad.numpy()  # summed over the three steps
    arrays["batchnorm2d/grad_bias"] = layer.bias.grad.numpy()
    layer.eval()
    x = rng.standard_normal((2, 3, 4, 4))
    arrays["batchnorm2d/eval/x"] = x
    arrays["batchnorm2d/eval/out"] = layer(torch.tensor(x)).detach().numpy()


def main() -> None:
    rng = np.random.default_rng(1998)
    arrays: dict[str, np.ndarray] = {}
    conv_cases(rng, arrays)
    pool_cases(rng, arrays)
    batchnorm2d(rng, arrays)
    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, torch_version=np.array(torch.__version__), **arrays)
    print(f"wrote {OUT} ({OUT.stat().st_size:,} bytes, {len(arrays)} arrays)")


if __name__ == "__main__":
    main()
