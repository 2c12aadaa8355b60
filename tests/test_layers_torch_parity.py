"""Module 03 against PyTorch's values, stored by scripts/make_layer_fixtures.py (no torch here)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import tinyflo
from tinyflo import Tensor
from tinyflo.core import layers as nn

FIXTURE = Path(__file__).parent / "fixtures" / "layers" / "torch_reference.npz"
REFERENCE = dict(np.load(FIXTURE))

ACTIVATIONS = {
    "relu": nn.relu,
    "sigmoid": nn.sigmoid,
    "tanh": nn.tanh,
    "leaky_relu": nn.leaky_relu,
    "leaky_relu-0.2": lambda x: nn.leaky_relu(x, 0.2),
    "elu": nn.elu,
    "elu-0.5": lambda x: nn.elu(x, alpha=0.5),
    "selu": nn.selu,
    "gelu": nn.gelu,
    "gelu-tanh": lambda x: nn.gelu(x, approximate="tanh"),
    "silu": nn.silu,
    "mish": nn.mish,
    "softplus": nn.softplus,
    "softplus-beta": lambda x: nn.softplus(x, beta=2.0, threshold=3.0),
    "hardswish": nn.hardswish,
    "softmax": nn.softmax,
    "softmax-axis0": lambda x: nn.softmax(x, axis=0),
    "log_softmax": nn.log_softmax,
    "log_softmax-axis0": lambda x: nn.log_softmax(x, axis=0),
}


def _task(name: str) -> str:
    return "layers_softmax" if "softmax" in name else "layers_activations"


@pytest.mark.task("layers_activations")
def test_layers_activations_parity_fixture_covers_every_activation():
    stored = {key.split("/")[1] for key in REFERENCE if key.startswith("act/")}
    assert stored == set(ACTIVATIONS) | {"prelu"}


@pytest.mark.task("layers_activations")
@pytest.mark.parametrize("name", [n for n in ACTIVATIONS if _task(n) == "layers_activations"])
def test_layers_activations_match_pytorch(name):
    _check_activation(name)


@pytest.mark.task("layers_softmax")
@pytest.mark.parametrize("name", [n for n in ACTIVATIONS if _task(n) == "layers_softmax"])
def test_layers_softmax_match_pytorch(name):
    _check_activation(name)


def _check_activation(name):
    x = Tensor(REFERENCE[f"act/{name}/x"], requires_grad=True)
    out = ACTIVATIONS[name](x)
    np.testing.assert_allclose(out.numpy(), REFERENCE[f"act/{name}/out"], rtol=1e-12, atol=1e-12)
    (out * Tensor(REFERENCE[f"act/{name}/v"])).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), REFERENCE[f"act/{name}/grad"], rtol=1e-10, atol=1e-12)


@pytest.mark.task("layers_activations")
def test_layers_activations_prelu_matches_pytorch():
    x = Tensor(REFERENCE["act/prelu/x"], requires_grad=True)
    w = Tensor(REFERENCE["act/prelu/weight"], requires_grad=True)
    out = nn.prelu(x, w)
    np.testing.assert_allclose(out.numpy(), REFERENCE["act/prelu/out"], rtol=1e-12)
    (out * Tensor(REFERENCE["act/prelu/v"])).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), REFERENCE["act/prelu/grad"], rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), REFERENCE["act/prelu/grad_weight"], rtol=1e-10)


@pytest.mark.task("layers_batch_norm")
def test_layers_batch_norm_matches_pytorch():
    layer = nn.BatchNorm1d(3, momentum=0.3).to(dtype="float64")
    with tinyflo.no_grad():
        layer.weight[...] = [0.5, 1.0, 2.0]
        layer.bias[...] = [0.0, -1.0, 1.0]
    for step in range(3):
        out = layer(Tensor(REFERENCE[f"batchnorm/step{step}/x"]))
        np.testing.assert_allclose(out.numpy(), REFERENCE[f"batchnorm/step{step}/out"], rtol=1e-10, atol=1e-12)
        np.testing.assert_allclose(layer.running_mean.numpy(), REFERENCE[f"batchnorm/step{step}/running_mean"], rtol=1e-12)
        np.testing.assert_allclose(layer.running_var.numpy(), REFERENCE[f"batchnorm/step{step}/running_var"], rtol=1e-12)
    out = layer.eval()(Tensor(REFERENCE["batchnorm/eval/x"]))
    np.testing.assert_allclose(out.numpy(), REFERENCE["batchnorm/eval/out"], rtol=1e-10, atol=1e-12)


@pytest.mark.task("layers_state_dict")
def test_layers_state_dict_loads_a_pytorch_models_state():
    model = nn.Sequential(
        nn.Linear(5, 8), nn.BatchNorm1d(8), nn.GELU(), nn.Dropout(0.5), nn.Linear(8, 6),
        nn.LayerNorm(6), nn.PReLU(6), nn.Linear(6, 3), nn.LogSoftmax(axis=-1),
    ).to(dtype="float64")
    keys = json.loads(str(REFERENCE["model_keys"]))
    assert list(model.state_dict()) == keys, "the same names, in the same order, as PyTorch"
    state = {key: REFERENCE[f"model/state/{key}"] for key in keys}
    assert {k: v.shape for k, v in model.state_dict().items()} == {k: v.shape for k, v in state.items()}
    assert model.load_state_dict(state) == nn.IncompatibleKeys([], [])
    assert model[1].num_batches_tracked.item() == 3
    out = model.eval()(Tensor(REFERENCE["model/x"]))
    np.testing.assert_allclose(out.numpy(), REFERENCE["model/out"], rtol=1e-10, atol=1e-12)
