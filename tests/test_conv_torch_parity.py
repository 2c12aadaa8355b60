"""Module 10 against PyTorch's values, stored by scripts/make_conv_fixtures.py (no torch here)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tinyflo
from tinyflo import Tensor
from tinyflo.core import conv

FIXTURE = Path(__file__).parent / "fixtures" / "conv" / "torch_reference.npz"
REFERENCE = dict(np.load(FIXTURE))
CONV_CASES = sorted({key.split("/")[1] for key in REFERENCE if key.startswith("conv2d/")})
POOL_CASES = sorted({key.split("/")[1] for key in REFERENCE if key.startswith("pool/")})


def _args(key: str) -> dict:
    return {k: tuple(v) if isinstance(v, list) else v for k, v in json.loads(str(REFERENCE[key])).items()}


def _close(actual: Tensor, key: str) -> None:
    np.testing.assert_allclose(actual.numpy(), REFERENCE[key], rtol=1e-10, atol=1e-12, err_msg=key)


@pytest.mark.task("conv_conv2d")
def test_conv_conv2d_parity_fixture_has_every_option():
    options = set().union(*(_args(f"conv2d/{c}/args") for c in CONV_CASES))
    assert {"stride", "padding", "dilation", "groups"} <= options
    assert any(f"conv2d/{c}/bias" not in REFERENCE for c in CONV_CASES), "a case without bias"


@pytest.mark.task("conv_conv2d")
@pytest.mark.parametrize("case", CONV_CASES)
def test_conv_conv2d_matches_pytorch(case, device):
    key = f"conv2d/{case}"
    x, w = (Tensor(REFERENCE[f"{key}/{n}"], device=device, requires_grad=True) for n in ("x", "weight"))
    b = Tensor(REFERENCE[f"{key}/bias"], device=device, requires_grad=True) if f"{key}/bias" in REFERENCE else None
    out = conv.conv2d(x, w, b, **_args(f"{key}/args"))
    _close(out, f"{key}/out")
    (out * Tensor(REFERENCE[f"{key}/v"], device=device)).sum().backward()
    _close(x.grad, f"{key}/grad_x")
    _close(w.grad, f"{key}/grad_weight")
    if b is not None:
        _close(b.grad, f"{key}/grad_bias")


@pytest.mark.task("conv_max_pool")
@pytest.mark.task("conv_avg_pool")
@pytest.mark.task("conv_adaptive_avg_pool")
@pytest.mark.parametrize("case", POOL_CASES)
def test_conv_pools_match_pytorch(case, device):
    key = f"pool/{case}"
    x = Tensor(REFERENCE[f"{key}/x"], device=device, requires_grad=True)
    out = getattr(conv, str(REFERENCE[f"{key}/fn"]))(x, **_args(f"{key}/args"))
    _close(out, f"{key}/out")
    (out * Tensor(REFERENCE[f"{key}/v"], device=device)).sum().backward()
    _close(x.grad, f"{key}/grad_x")


@pytest.mark.task("conv_batchnorm")
def test_conv_batchnorm_matches_pytorch(device):
    layer = conv.BatchNorm2d(3, momentum=0.3).to(device, dtype=tinyflo.float64)
    with tinyflo.no_grad():
        layer.weight[...] = [0.5, 1.0, 2.0]
        layer.bias[...] = [0.0, -1.0, 1.0]
    for step in range(3):
        key = f"batchnorm2d/step{step}"
        x = Tensor(REFERENCE[f"{key}/x"], device=device, requires_grad=True)
        out = layer(x)
        _close(out, f"{key}/out")
        (out * Tensor(REFERENCE[f"{key}/v"], device=device)).sum().backward()
        _close(x.grad, f"{key}/grad_x")
        _close(layer.running_mean, f"{key}/running_mean")
        _close(layer.running_var, f"{key}/running_var")
    _close(layer.weight.grad, "batchnorm2d/grad_weight")
    _close(layer.bias.grad, "batchnorm2d/grad_bias")
    _close(layer.eval()(Tensor(REFERENCE["batchnorm2d/eval/x"], device=device)), "batchnorm2d/eval/out")
