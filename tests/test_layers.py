"""Module 03: activations, Module, state_dict, initializers and layers, against NumPy references."""

from __future__ import annotations

import math
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import tinyflo
from tinyflo import ShapeError, Tensor
from tinyflo.core import layers as nn

SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SHAPES = hnp.array_shapes(min_dims=1, max_dims=3, min_side=1, max_side=5)


def arrays(shape, low=-4.0, high=4.0):
    return hnp.arrays(np.float32, shape, elements=st.floats(low, high, width=32))


def _erf(x):
    return np.vectorize(math.erf)(x)


def _softplus(x, beta=1.0, threshold=20.0):
    return np.where(beta * x > threshold, x, np.logaddexp(0, beta * x) / beta)


SELU_ALPHA, SELU_SCALE = 1.6732632423543772, 1.0507009873554805

# name -> (tinyflo function, NumPy reference), evaluated in float64
REFERENCES = {
    "relu": (nn.relu, lambda x: np.maximum(x, 0)),
    "sigmoid": (nn.sigmoid, lambda x: 1 / (1 + np.exp(-x))),
    "tanh": (nn.tanh, np.tanh),
    "leaky_relu": (nn.leaky_relu, lambda x: np.where(x > 0, x, 0.01 * x)),
    "leaky_relu-0.2": (lambda x: nn.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x)),
    "elu": (nn.elu, lambda x: np.where(x > 0, x, np.expm1(x))),
    "elu-0.5": (lambda x: nn.elu(x, alpha=0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(x))),
    "selu": (nn.selu, lambda x: SELU_SCALE * np.where(x > 0, x, SELU_ALPHA * np.expm1(x))),
    "gelu": (nn.gelu, lambda x: 0.5 * x * (1 + _erf(x / math.sqrt(2)))),
    "gelu-tanh": (
        lambda x: nn.gelu(x, approximate="tanh"),
        lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))),
    ),
    "silu": (nn.silu, lambda x: x / (1 + np.exp(-x))),
    "mish": (nn.mish, lambda x: x * np.tanh(_softplus(x))),
    "softplus": (nn.softplus, _softplus),
    "softplus-beta": (lambda x: nn.softplus(x, beta=2.0, threshold=3.0), lambda x: _softplus(x, 2.0, 3.0)),
    "hardswish": (nn.hardswish, lambda x: x * np.clip(x + 3, 0, 6) / 6),
    "softmax": (nn.softmax, lambda x: np.exp(x - x.max(-1, keepdims=True)) / np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True)),
    "log_softmax": (nn.log_softmax, lambda x: x - x.max(-1, keepdims=True) - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True))),
}

MODULES = {
    "relu": nn.ReLU(), "sigmoid": nn.Sigmoid(), "tanh": nn.Tanh(), "leaky_relu-0.2": nn.LeakyReLU(0.2),
    "elu-0.5": nn.ELU(0.5), "selu": nn.SELU(), "gelu": nn.GELU(), "gelu-tanh": nn.GELU("tanh"),
    "silu": nn.SiLU(), "mish": nn.Mish(), "softplus-beta": nn.Softplus(2.0, 3.0),
    "hardswish": nn.Hardswish(), "softmax": nn.Softmax(), "log_softmax": nn.LogSoftmax(),
}


# ----- task layers_activations ----------------------------------------------------

@pytest.mark.task("layers_activations")
@pytest.mark.parametrize("name", sorted(REFERENCES))
@SETTINGS
@given(data=st.data())
def test_layers_activations_match_numpy(name, data, device):
    fn, reference = REFERENCES[name]
    x = data.draw(SHAPES.flatmap(arrays))
    out = fn(Tensor(x, device=device))
    assert out.dtype == tinyflo.float32 and out.shape == x.shape
    np.testing.assert_allclose(out.numpy(), reference(x.astype(np.float64)), rtol=2e-5, atol=2e-6)
    x64 = fn(Tensor(x.astype(np.float64), device=device))
    assert x64.dtype == tinyflo.float64
    np.testing.assert_allclose(x64.numpy(), reference(x.astype(np.float64)), rtol=1e-12, atol=1e-13)


@pytest.mark.task("layers_activations")
@pytest.mark.parametrize("name", sorted(MODULES))
def test_layers_activations_modules_wrap_their_function(name):
    x = Tensor(np.linspace(-3, 3, 12, dtype=np.float32).reshape(3, 4))
    np.testing.assert_array_equal(MODULES[name](x).numpy(), REFERENCES[name][0](x).numpy())
    assert list(MODULES[name].parameters()) == []


@pytest.mark.task("layers_activations")
def test_layers_activations_module_reprs():
    assert repr(nn.ReLU()) == "ReLU()"
    assert repr(nn.LeakyReLU(0.2)) == "LeakyReLU(negative_slope=0.2)"
    assert repr(nn.GELU("tanh")) == "GELU(approximate='tanh')"
    assert repr(nn.Softplus()) == "Softplus(beta=1.0, threshold=20.0)"
    assert repr(nn.Softmax(axis=0)) == "Softmax(axis=0)"
    assert repr(nn.PReLU(3)) == "PReLU(num_parameters=3)"


@pytest.mark.task("layers_gelu")
@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_layers_gelu_vectorised_erf_matches_math_erf_over_a_wide_range(dtype):
    rng = np.random.default_rng(0)
    magnitudes = np.concatenate([10.0 ** rng.uniform(-40, 1.5, 20000), rng.uniform(0, 7, 20000),
                                 [0.84375, 1.25, 1 / 0.35, 6.0, 27.0, 1e30]])
    x = (magnitudes * rng.choice([-1.0, 1.0], magnitudes.size)).astype(dtype)
    got = nn._erf_rational(x).astype(dtype)  # the SciPy-free path, whatever is installed
    ref = np.array([math.erf(float(v)) for v in x])
    if dtype == np.float32:
        np.testing.assert_array_equal(got, ref.astype(np.float32))  # exact to float32 rounding
    else:
        np.testing.assert_array_less(np.abs(got - ref), np.spacing(np.abs(ref)) * 1.0001 + 1e-300)  # ≤ 1 ulp
    assert nn.erf(x).dtype == dtype


@pytest.mark.task("layers_gelu")
def test_layers_gelu_erf_is_float64_accurate():
    x = np.concatenate([np.linspace(-8, 8, 20001), [0.0, -0.0, 1e-300, 0.84375, 1.25, 1 / 0.35, 6.0, np.inf, -np.inf]])
    np.testing.assert_allclose(nn.erf(x), _erf(x), rtol=4e-16, atol=4e-16)
    assert np.isnan(nn.erf(np.array([np.nan])))[0]
    assert nn.erf(np.float32([0.5])).dtype == np.float32


EXTREME = [
    "relu", "sigmoid", "tanh", "leaky_relu", "elu", "selu", "gelu", "gelu-tanh", "silu", "mish",
    "softplus", "hardswish", "softmax", "log_softmax",
]


@pytest.mark.task("layers_activations")
@pytest.mark.parametrize("name", EXTREME)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_layers_activations_extreme_inputs_stay_finite(name, dtype):
    fn, _ = REFERENCES[name]
    x = Tensor([[1e4, -1e4, 0.5, -1e4], [-1e4, -1e4, -1e4, -1e4]], dtype=dtype, requires_grad=True)
    with warnings.catch_warnings(), np.errstate(over="raise", invalid="raise", divide="raise"):
        warnings.simplefilter("error")
        out = fn(x)
        (out * Tensor(np.arange(8).reshape(2, 4), dtype=dtype)).sum().backward()
    assert np.all(np.isfinite(out.numpy())), out
    assert np.all(np.isfinite(x.grad.numpy())), x.grad


@pytest.mark.task("layers_softplus")
def test_layers_softplus_is_stable_and_linear_past_threshold():
    x = Tensor([-1e4, -50.0, 0.0, 19.0, 21.0, 1e4], requires_grad=True)
    out = nn.softplus(x)
    np.testing.assert_allclose(out.numpy(), [0, math.exp(-50), math.log(2), math.log1p(math.exp(19)), 21, 1e4], rtol=1e-6, atol=1e-30)
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [0, math.exp(-50), 0.5, 1 / (1 + math.exp(-19)), 1, 1], rtol=1e-6)


@pytest.mark.task("layers_elu")
@pytest.mark.parametrize("alpha", [1.0, 0.3])
def test_layers_elu_gradient_is_out_plus_alpha_on_the_negative_side(alpha):
    x = Tensor([-3.0, -0.5, 0.5, 2.0], requires_grad=True)
    out = nn.elu(x, alpha=alpha)
    assert isinstance(out._ctx, nn.EluFn), "one node"
    out.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), np.where(x.numpy() > 0, 1.0, out.numpy() + alpha), rtol=1e-6)


@pytest.mark.task("layers_activations")
def test_layers_activations_prelu_weights_and_errors():
    x = Tensor(-np.ones((2, 3, 4), np.float32))
    out = nn.prelu(x, Tensor([0.1, 0.2, 0.3]))
    np.testing.assert_allclose(out.numpy(), -np.array([0.1, 0.2, 0.3])[None, :, None] * np.ones((2, 3, 4)), rtol=1e-6)
    layer = nn.PReLU(3)
    assert layer.weight.tolist() == [0.25] * 3 and [n for n, _ in layer.named_parameters()] == ["weight"]
    np.testing.assert_allclose(nn.PReLU()(x).numpy(), -0.25)
    with pytest.raises(ShapeError, match=r"\(2,\).*\(2, 3, 4\)"):
        nn.prelu(x, Tensor([0.1, 0.2]))
    with pytest.raises(ValueError, match="fast"):
        nn.gelu(x, approximate="fast")
    with pytest.raises(ValueError, match="fast"):
        nn.GELU("fast")


@pytest.mark.task("layers_activations")
def test_layers_activations_integer_input_becomes_float32():
    for fn in (nn.elu, nn.gelu, nn.softplus, nn.softmax, nn.log_softmax, nn.sigmoid):
        assert fn(Tensor([1, 2, 3])).dtype == tinyflo.float32, fn.__name__


# ----- task layers_softmax --------------------------------------------------------

@pytest.mark.task("layers_softmax")
@SETTINGS
@given(data=st.data())
def test_layers_softmax_properties(data, device):
    x = data.draw(SHAPES.flatmap(lambda s: arrays(s, -30, 30)))
    axis = data.draw(st.integers(-len(x.shape), len(x.shape) - 1))
    t = Tensor(x.astype(np.float64), device=device)
    s = nn.softmax(t, axis=axis).numpy()
    np.testing.assert_allclose(s.sum(axis=axis), 1, rtol=1e-12)
    assert np.all(s >= 0)
    shifted = nn.softmax(t + 1000.0, axis=axis).numpy()
    np.testing.assert_allclose(shifted, s, rtol=1e-9, atol=1e-300), "softmax ignores a shift"
    log = nn.log_softmax(t, axis=axis).numpy()
    np.testing.assert_allclose(np.exp(log), s, rtol=1e-9, atol=1e-300)
    reference = x - np.log(np.exp(x.astype(np.float64) - x.max(axis, keepdims=True)).sum(axis, keepdims=True)) - x.max(axis, keepdims=True)
    np.testing.assert_allclose(log, reference, rtol=1e-9, atol=1e-9)


@pytest.mark.task("layers_softmax")
def test_layers_softmax_extreme_logits():
    logits = Tensor([[1e4, -1e4, 0.0], [-1e4, -1e4, -1e4]], requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = nn.log_softmax(logits)
        (out * Tensor([[1.0, 2.0, 3.0], [1.0, 1.0, 1.0]])).sum().backward()
    np.testing.assert_allclose(out.numpy(), [[0, -2e4, -1e4], [-math.log(3)] * 3], rtol=1e-6)
    np.testing.assert_allclose(logits.grad.numpy(), [[1 - 6, 2, 3], [0, 0, 0]], atol=1e-5)
    np.testing.assert_allclose(nn.softmax(logits).numpy(), [[1, 0, 0], [1 / 3] * 3], rtol=1e-6)


@pytest.mark.task("layers_softmax")
def test_layers_softmax_axis_errors_and_one_node():
    x = Tensor(np.zeros((2, 3), np.float32), requires_grad=True)
    with pytest.raises(ShapeError, match="axis 2"):
        nn.softmax(x, axis=2)
    with pytest.raises(ShapeError):
        nn.log_softmax(x, axis=-3)
    assert isinstance(nn.softmax(x)._ctx, nn.SoftmaxFn) and isinstance(nn.log_softmax(x)._ctx, nn.LogSoftmaxFn)


# ----- task layers_module ---------------------------------------------------------

class Block(nn.Module):
    def __init__(self, n: int = 3):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(n, 4), nn.ReLU(), nn.Linear(4, 4))
        self.norm = nn.BatchNorm1d(4)
        self.head = nn.Linear(4, 2)
        self.scale = nn.Parameter([1.5])
        self.drop = nn.Dropout(0.5)

    def forward(self, x):
        return self.head(self.drop(self.norm(self.encoder(x)))) * self.scale


@pytest.mark.task("layers_module_walk")
def test_layers_module_walk_registration_order_and_qualified_names():
    block = Block()
    assert [n for n, _ in block.named_parameters()] == [
        "scale", "encoder.0.weight", "encoder.0.bias", "encoder.2.weight", "encoder.2.bias",
        "norm.weight", "norm.bias", "head.weight", "head.bias",
    ]
    assert [n for n, _ in block.named_buffers()] == [
        "norm.running_mean", "norm.running_var", "norm.num_batches_tracked",
    ]
    assert [n for n, _ in block.named_modules()] == [
        "", "encoder", "encoder.0", "encoder.1", "encoder.2", "norm", "head", "drop",
    ]
    assert [n for n, _ in block.named_children()] == ["encoder", "norm", "head", "drop"]
    assert list(block.children())[0] is block.encoder
    assert len(list(block.parameters())) == 9 and len(list(block.buffers())) == 3
    assert [n for n, _ in block.named_parameters(prefix="model")][0] == "model.scale"
    assert [n for n, _ in block.named_parameters(recurse=False)] == ["scale"]


@pytest.mark.task("layers_module_walk")
def test_layers_module_walk_shared_parameters_and_modules_listed_once():
    a = nn.Linear(3, 3)
    model = nn.Sequential(a, nn.ReLU(), a)
    assert [n for n, _ in model.named_parameters()] == ["0.weight", "0.bias"]
    assert [n for n, _ in model.named_modules()] == ["", "0", "1"]
    tied = nn.Sequential(nn.Embedding(5, 3), nn.Linear(3, 5, bias=False))
    tied[1].weight = tied[0].weight
    assert tied.num_parameters() == 15
    assert list(tied.state_dict()) == ["0.weight", "1.weight"], "state_dict names both, like PyTorch"


@pytest.mark.task("layers_module")
def test_layers_module_setattr_rules():
    m = nn.Linear(2, 2)
    with pytest.raises(TypeError, match="weight"):
        m.weight = Tensor(np.zeros((2, 2), np.float32))
    m.weight = None
    assert m.weight is None and [n for n, _ in m.named_parameters()] == ["bias"]
    m.weight = nn.Parameter(np.ones((2, 2), np.float32))
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"], "a re-assigned name keeps its place"
    m.bias = nn.Identity()
    assert "bias" not in m._parameters and m.bias is m._modules["bias"]
    with pytest.raises(TypeError, match="bias"):
        m.bias = 3
    m.note = "hello"
    assert m.__dict__["note"] == "hello"
    del m.weight
    assert not hasattr(m, "weight") and [n for n, _ in m.named_parameters()] == []
    m.register_buffer("steps", Tensor(0))
    m.steps = Tensor(5)
    assert m.steps.item() == 5 and [n for n, _ in m.named_buffers()] == ["steps"]
    with pytest.raises(TypeError, match="steps"):
        m.steps = 7

    class Early(nn.Module):
        def __init__(self):
            self.layer = nn.Linear(1, 1)

    with pytest.raises(AttributeError, match=r"super\(\).__init__\(\)"):
        Early()
    with pytest.raises(AttributeError, match="missing"):
        _ = m.missing


@pytest.mark.task("layers_module")
def test_layers_module_parameter_is_a_tensor_that_requires_grad():
    p = nn.Parameter([1.0, 2.0])
    assert isinstance(p, Tensor) and p.requires_grad and p.dtype == tinyflo.float32 and p.is_leaf
    assert not nn.Parameter([1.0], requires_grad=False).requires_grad
    t = tinyflo.zeros(3)
    shared = nn.Parameter(t)
    t.data[0] = 5
    assert shared.data[0] == 5, "a Parameter made from a tensor shares its array"
    assert type(p * 2) is Tensor, "results of ops are plain tensors"
    assert p.freeze() is p and not p.requires_grad and p.unfreeze().requires_grad
    assert repr(p).startswith("Parameter containing:\ntensor(")
    with pytest.raises(TypeError):
        nn.Parameter([1, 2])


@pytest.mark.task("layers_module_train")
def test_layers_module_train_eval_propagate():
    block = Block()
    assert all(m.training for m in block.modules())
    assert block.eval() is block and not any(m.training for m in block.modules())
    block.encoder.train()
    assert block.encoder[0].training and not block.head.training
    assert all(m.training for m in block.train().modules())


@pytest.mark.task("layers_module_walk")
def test_layers_module_walk_freeze_unfreeze_counts():
    block = Block()
    total = 1 + 3 * 4 + 4 + 4 * 4 + 4 + 4 + 4 + 4 * 2 + 2
    assert block.num_parameters() == block.num_parameters(trainable_only=True) == total
    block.encoder.freeze()
    assert block.num_parameters(trainable_only=True) == total - (3 * 4 + 4 + 4 * 4 + 4)
    block.head.weight.freeze()
    assert block.num_parameters(trainable_only=True) == total - 36 - 8
    assert block.num_parameters() == total
    block.unfreeze()
    assert block.num_parameters(trainable_only=True) == total
    assert block.requires_grad_(False) is block and block.num_parameters(trainable_only=True) == 0


@pytest.mark.task("layers_module_walk")
def test_layers_module_walk_zero_grad_and_backward_through_frozen_parts():
    block = Block()
    block.encoder.freeze()
    block(tinyflo.randn(8, 3)).sum().backward()
    assert all(p.grad is None for p in block.encoder.parameters())
    assert block.head.weight.grad is not None and block.head.weight.grad.shape == (2, 4)
    block.zero_grad()
    assert all(p.grad is None for p in block.parameters())


@pytest.mark.task("layers_module_to")
def test_layers_module_to_moves_in_place(device):
    block = Block()
    params = list(block.parameters())
    block(tinyflo.randn(4, 3)).sum().backward()
    assert block.to(device) is block
    assert [id(p) for p in block.parameters()] == [id(p) for p in params], "the same Parameter objects"
    assert all(p.device == tinyflo.device(device) for p in block.parameters())
    assert all(b.device == tinyflo.device(device) for b in block.buffers())
    assert all(p.grad.device == tinyflo.device(device) for p in block.parameters())
    block.to(dtype=tinyflo.float64)
    assert all(p.dtype == tinyflo.float64 for p in block.parameters())
    assert block.norm.running_var.dtype == tinyflo.float64 and block.norm.num_batches_tracked.dtype == tinyflo.int64
    assert block.head.weight.grad.dtype == tinyflo.float64
    block.to(tinyflo.float32)
    assert block.head.weight.dtype == tinyflo.float32
    out = block(tinyflo.randn(4, 3, device=device))
    assert out.device == tinyflo.device(device) and out.dtype == tinyflo.float32
    with pytest.raises(TypeError, match="floating"):
        block.to(dtype="int64")


@pytest.mark.task("layers_module_to")
def test_layers_module_to_a_virtual_device_keeps_optimizer_references():
    model = nn.Linear(3, 2)
    held = list(model.parameters())
    model.to("cpu:1")
    assert all(p.device == tinyflo.device("cpu:1") for p in held)
    out = model(tinyflo.randn(2, 3, device="cpu:1"))
    out.sum().backward()
    assert held[0].grad.device == tinyflo.device("cpu:1")
    with pytest.raises(tinyflo.DeviceError):
        model(tinyflo.randn(2, 3))


@pytest.mark.task("layers_module")
def test_layers_module_repr_is_a_tree():
    assert repr(Block()) == (
        "Block(\n"
        "  (encoder): Sequential(\n"
        "    (0): Linear(in_features=3, out_features=4, bias=True)\n"
        "    (1): ReLU()\n"
        "    (2): Linear(in_features=4, out_features=4, bias=True)\n"
        "  )\n"
        "  (norm): BatchNorm1d(4, eps=1e-05, momentum=0.1, affine=True)\n"
        "  (head): Linear(in_features=4, out_features=2, bias=True)\n"
        "  (drop): Dropout(p=0.5)\n"
        ")"
    )


@pytest.mark.task("layers_module")
def test_layers_module_containers():
    seq = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    assert len(seq) == 3 and isinstance(seq[1], nn.Tanh) and seq[-1] is list(seq)[2]
    head = seq[1:]
    assert isinstance(head, nn.Sequential) and [n for n, _ in head.named_parameters()] == ["2.weight", "2.bias"]
    x = tinyflo.randn(5, 3)
    np.testing.assert_allclose(seq(x).numpy(), seq[2](seq[1](seq[0](x))).numpy())
    named = nn.Sequential({"fc": nn.Linear(3, 3), "act": nn.ReLU()})
    assert [n for n, _ in named.named_parameters()] == ["fc.weight", "fc.bias"]
    assert seq.append(nn.Identity()) is seq and len(seq) == 4
    with pytest.raises(TypeError, match="argument 1"):
        nn.Sequential(nn.ReLU(), lambda x: x)
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)])
    assert len(layers) == 3 and [n for n, _ in layers.named_parameters()][-1] == "2.bias"
    layers[1] = nn.Identity()
    assert isinstance(layers[1], nn.Identity) and layers.num_parameters() == 12
    assert len(layers[:2]) == 2 and len(layers.extend([nn.ReLU()])) == 4
    with pytest.raises(NotImplementedError, match="forward"):
        layers(x)
    assert nn.Identity()(x) is x
    assert nn.Flatten()(tinyflo.zeros(2, 3, 4)).shape == (2, 12)
    assert nn.Flatten(0)(tinyflo.zeros(2, 3, 4)).shape == (24,)
    assert nn.Flatten(1, 2)(tinyflo.zeros(2, 3, 4, 5)).shape == (2, 12, 5)


@pytest.mark.task("layers_module")
def test_layers_module_apply_visits_every_module():
    seen = []
    Block().apply(lambda m: seen.append(type(m).__name__))
    assert seen == ["Linear", "ReLU", "Linear", "Sequential", "BatchNorm1d", "Linear", "Dropout", "Block"]


# ----- task layers_state_dict -----------------------------------------------------

@pytest.mark.task("layers_state_dict")
def test_layers_state_dict_nested_round_trip():
    tinyflo.manual_seed(0)
    src = Block()
    src.train()(tinyflo.randn(8, 3))  # moves the running statistics
    state = src.state_dict()
    assert list(state) == [
        "scale", "encoder.0.weight", "encoder.0.bias", "encoder.2.weight", "encoder.2.bias",
        "norm.weight", "norm.bias", "norm.running_mean", "norm.running_var", "norm.num_batches_tracked",
        "head.weight", "head.bias",
    ]
    assert all(not t.requires_grad and t._ctx is None for t in state.values())
    assert np.shares_memory(state["head.weight"].data, src.head.weight.data), "views, not copies"
    dst = Block()
    held = dict(dst.named_parameters())
    result = dst.load_state_dict({k: v.numpy() for k, v in state.items()})
    assert result == nn.IncompatibleKeys([], []) and result.missing_keys == []
    for name, p in dst.named_parameters():
        assert p is held[name]
        np.testing.assert_array_equal(p.numpy(), src.state_dict()[name].numpy())
    assert dst.norm.num_batches_tracked.item() == 1 and dst.norm.num_batches_tracked.dtype == tinyflo.int64
    x = tinyflo.randn(4, 3)
    np.testing.assert_array_equal(src.eval()(x).numpy(), dst.eval()(x).numpy())


@pytest.mark.task("layers_load_state_dict")
def test_layers_load_state_dict_strict_errors_name_keys_and_shapes():
    model = Block()
    state = model.state_dict()
    del state["head.bias"]
    state["head.extra"] = np.zeros(2)
    with pytest.raises(RuntimeError) as info:
        model.load_state_dict(state)
    message = str(info.value)
    assert "missing keys: head.bias" in message and "unexpected keys: head.extra" in message
    result = model.load_state_dict(state, strict=False)
    assert result.missing_keys == ["head.bias"] and result.unexpected_keys == ["head.extra"]
    state = model.state_dict()
    state["encoder.2.weight"] = np.zeros((5, 4), np.float32)
    state["head.weight"] = np.zeros((2, 4), np.float32)
    before = model.head.weight.numpy().copy()
    for strict in (True, False):
        with pytest.raises(RuntimeError, match=r"encoder\.2\.weight: the state has shape \(5, 4\), the model \(4, 4\)"):
            model.load_state_dict(state, strict=strict)
    np.testing.assert_array_equal(model.head.weight.numpy(), before), "nothing copied when anything is wrong"


@pytest.mark.task("layers_load_state_dict")
def test_layers_load_state_dict_values_keep_dtype_and_device():
    model = nn.Linear(3, 2).to("cpu:1")
    source = nn.Linear(3, 2).to(dtype="float64")
    model.load_state_dict(source.state_dict())
    assert model.weight.dtype == tinyflo.float32 and model.weight.device == tinyflo.device("cpu:1")
    np.testing.assert_allclose(model.weight.numpy(), source.weight.numpy(), rtol=1e-6)
    model.load_state_dict({"weight": [[1, 2, 3], [4, 5, 6]], "bias": [0.5, 0.5]})
    assert model.weight.tolist() == [[1, 2, 3], [4, 5, 6]] and model.weight.dtype == tinyflo.float32


@pytest.mark.task("layers_state_dict")
def test_layers_state_dict_skips_non_persistent_and_none():
    m = nn.Linear(2, 2, bias=False)
    m.register_buffer("cache", tinyflo.zeros(2), persistent=False)
    m.register_buffer("empty", None)
    assert list(m.state_dict()) == ["weight"]
    assert [n for n, _ in m.named_buffers()] == ["cache"]
    assert list(m.state_dict(prefix="layer.")) == ["layer.weight"]


# ----- task layers_init -----------------------------------------------------------

N = 200_000


@pytest.mark.task("layers_init_fans")
def test_layers_init_fans_and_gains():
    assert nn.calculate_fan_in_and_fan_out(tinyflo.zeros(10, 20)) == (20, 10)
    assert nn.calculate_fan_in_and_fan_out(tinyflo.zeros(8, 4, 3, 3)) == (36, 72)
    with pytest.raises(ValueError, match=r"\(5,\)"):
        nn.calculate_fan_in_and_fan_out(tinyflo.zeros(5))
    gains = {"linear": 1, "conv2d": 1, "sigmoid": 1, "tanh": 5 / 3, "relu": math.sqrt(2),
             "leaky_relu": math.sqrt(2 / (1 + 0.01**2)), "selu": 0.75}
    for name, gain in gains.items():
        assert nn.calculate_gain(name) == pytest.approx(gain, rel=1e-12), name
    assert nn.calculate_gain("leaky_relu", math.sqrt(5)) == pytest.approx(math.sqrt(1 / 3))
    with pytest.raises(ValueError, match="swish"):
        nn.calculate_gain("swish")


def _stats(t):
    v = t.numpy().astype(np.float64)
    return v.mean(), v.std(), np.abs(v).max()


@pytest.mark.task("layers_init")
@pytest.mark.parametrize(
    "init, shape, std, bound",
    [
        (lambda t: nn.kaiming_uniform_(t), (500, 400), math.sqrt(2 / 400), math.sqrt(6 / 400)),
        (lambda t: nn.kaiming_uniform_(t, a=math.sqrt(5)), (500, 400), math.sqrt(1 / 1200), 1 / 20),
        (lambda t: nn.kaiming_uniform_(t, mode="fan_out", nonlinearity="relu"), (500, 400), math.sqrt(2 / 500), math.sqrt(6 / 500)),
        (lambda t: nn.kaiming_normal_(t, nonlinearity="relu"), (50, 40, 10), math.sqrt(2 / 400), None),
        (lambda t: nn.kaiming_normal_(t, mode="fan_out", nonlinearity="tanh"), (50, 40, 10), 5 / 3 / math.sqrt(500), None),
        (lambda t: nn.xavier_uniform_(t), (300, 600), math.sqrt(2 / 900), math.sqrt(6 / 900)),
        (lambda t: nn.xavier_uniform_(t, gain=3.0), (300, 600), 3 * math.sqrt(2 / 900), 3 * math.sqrt(6 / 900)),
        (lambda t: nn.xavier_normal_(t, gain=2.0), (300, 600), 2 * math.sqrt(2 / 900), None),
        (lambda t: nn.uniform_(t, -2.0, 2.0), (N,), 2 / math.sqrt(3), 2.0),
        (lambda t: nn.normal_(t, 0.0, 0.3), (N,), 0.3, None),
        (lambda t: nn.fan_in_uniform_(t, 64), (N,), 1 / 8 / math.sqrt(3), 1 / 8),
    ],
)
def test_layers_init_statistics(init, shape, std, bound, device):
    t = tinyflo.zeros(shape, device=device)
    assert init(t) is t
    mean, s, top = _stats(t)
    assert abs(mean) < 4 * std / math.sqrt(t.numel())
    assert s == pytest.approx(std, rel=0.02)
    if bound is not None:
        assert bound * 0.995 < top <= bound


@pytest.mark.task("layers_init")
def test_layers_init_uniform_and_normal_with_offsets():
    u = nn.uniform_(tinyflo.zeros(N), 3.0, 5.0).numpy()
    assert u.min() >= 3 and u.max() < 5 and u.mean() == pytest.approx(4, abs=0.01)
    n = nn.normal_(tinyflo.zeros(N, dtype="float64"), -1.0, 2.0).numpy()
    assert n.dtype == np.float64 and n.mean() == pytest.approx(-1, abs=0.02) and n.std() == pytest.approx(2, rel=0.01)
    assert nn.ones_(tinyflo.zeros(3)).tolist() == [1, 1, 1] and nn.zeros_(tinyflo.ones(2)).tolist() == [0, 0]
    assert nn.constant_(tinyflo.zeros(2), 2.5).tolist() == [2.5, 2.5]
    half = nn.normal_(tinyflo.zeros(1000, dtype="float16"))
    assert half.dtype == tinyflo.float16
    with pytest.raises(TypeError, match="floating"):
        nn.normal_(tinyflo.zeros(3, dtype="int64"))


@pytest.mark.task("layers_orthogonal")
@pytest.mark.parametrize("shape", [(40, 30), (30, 40), (16, 3, 3, 3), (5, 5), (1, 7)])
@pytest.mark.parametrize("gain", [1.0, 2.5])
def test_layers_orthogonal_is_orthonormal(shape, gain, device):
    t = nn.orthogonal_(tinyflo.zeros(shape, dtype="float64", device=device), gain=gain)
    q = t.numpy().reshape(shape[0], -1)
    rows, cols = q.shape
    gram = q.T @ q if rows >= cols else q @ q.T
    np.testing.assert_allclose(gram, gain**2 * np.eye(min(rows, cols)), atol=1e-10)


@pytest.mark.task("layers_orthogonal")
def test_layers_orthogonal_is_uniformly_signed():
    # Without the sign fix, R's diagonal is non-negative in LAPACK's convention and Q's first
    # column correlates with the first column of the normal draw; with it, entries average to 0.
    firsts = np.array([nn.orthogonal_(tinyflo.zeros(4, 4, dtype="float64")).numpy()[0, 0] for _ in range(2000)])
    assert abs(firsts.mean()) < 0.05


@pytest.mark.task("layers_trunc_normal")
@pytest.mark.parametrize("mean, std, a, b", [(0.0, 1.0, -2.0, 2.0), (0.0, 1.0, -1.0, 0.5), (1.0, 0.5, 0.0, 3.0), (0.0, 0.02, -0.04, 0.04)])
def test_layers_trunc_normal_resamples(mean, std, a, b):
    t = nn.trunc_normal_(tinyflo.zeros(N, dtype="float64"), mean, std, a, b).numpy()
    assert t.min() >= a and t.max() <= b
    alpha, beta = (a - mean) / std, (b - mean) / std
    pdf = lambda z: math.exp(-z * z / 2) / math.sqrt(2 * math.pi)
    cdf = lambda z: 0.5 * (1 + math.erf(z / math.sqrt(2)))
    mass = cdf(beta) - cdf(alpha)
    expected_mean = mean + std * (pdf(alpha) - pdf(beta)) / mass
    expected_var = std**2 * (1 + (alpha * pdf(alpha) - beta * pdf(beta)) / mass - ((pdf(alpha) - pdf(beta)) / mass) ** 2)
    assert t.mean() == pytest.approx(expected_mean, abs=4 * std / math.sqrt(N) + 1e-12)
    assert t.std() == pytest.approx(math.sqrt(expected_var), rel=0.01)
    # not clamped: no pile-up at the edges
    assert (t == a).sum() + (t == b).sum() == 0


@pytest.mark.task("layers_init")
def test_layers_init_reproducible_and_outside_the_graph():
    p = nn.Parameter(tinyflo.zeros(6, 5))
    for init in (nn.kaiming_uniform_, nn.kaiming_normal_, nn.xavier_uniform_, nn.xavier_normal_,
                 nn.orthogonal_, nn.trunc_normal_, nn.uniform_, nn.normal_):
        tinyflo.manual_seed(5)
        first = init(p).numpy().copy()
        tinyflo.manual_seed(5)
        assert init(p) is p
        np.testing.assert_array_equal(p.numpy(), first, err_msg=init.__name__)
        assert p.requires_grad and p._ctx is None and p.dtype == tinyflo.float32
    with pytest.raises(ValueError, match="empty"):
        nn.trunc_normal_(tinyflo.zeros(3), a=1.0, b=-1.0)
    with pytest.raises(ValueError, match="mode"):
        nn.kaiming_uniform_(p, mode="fan_avg")


# ----- task layers_linear ---------------------------------------------------------

@pytest.mark.task("layers_linear")
@SETTINGS
@given(batch=hnp.array_shapes(min_dims=0, max_dims=2, min_side=1, max_side=4), n_in=st.integers(1, 6),
       n_out=st.integers(1, 6), bias=st.booleans(), seed=st.integers(0, 1000))
def test_layers_linear_matches_numpy(batch, n_in, n_out, bias, seed, device):
    tinyflo.manual_seed(seed)
    layer = nn.Linear(n_in, n_out, bias=bias).to(device)
    x = np.random.default_rng(seed).standard_normal(batch + (n_in,)).astype(np.float32)
    out = layer(Tensor(x, device=device))
    expected = x @ layer.weight.numpy().T + (layer.bias.numpy() if bias else 0)
    assert out.shape == batch + (n_out,) and out.dtype == tinyflo.float32 and out.device == tinyflo.device(device)
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.task("layers_linear")
@pytest.mark.parametrize("lead", [(), (5,), (3, 4), (2, 3, 2), (0, 3)])
def test_layers_linear_nd_input_equals_the_2d_computation_and_gradchecks(lead, device):
    from tinyflo.core.autograd import gradcheck

    rng = np.random.default_rng(len(lead))
    tinyflo.manual_seed(0)
    layer = nn.Linear(6, 4).to(device)
    x = rng.standard_normal((*lead, 6)).astype(np.float32)
    g = rng.standard_normal((*lead, 4)).astype(np.float32)
    tx = Tensor(x, device=device, requires_grad=True)
    out = layer(tx)
    out.backward(Tensor(g, device=device))
    rows = x.reshape(-1, 6)
    w, b = layer.weight.numpy(), layer.bias.numpy()
    assert out.shape == (*lead, 4) and out.dtype == tinyflo.float32
    np.testing.assert_allclose(out.numpy(), (rows @ w.T + b).reshape(*lead, 4), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(tx.grad.numpy(), (g.reshape(-1, 4) @ w).reshape(x.shape), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(layer.weight.grad.numpy(), g.reshape(-1, 4).T @ rows, rtol=1e-4, atol=1e-4)
    assert tx.grad.dtype == layer.weight.grad.dtype == tinyflo.float32
    if 0 not in lead:
        layer64 = nn.Linear(6, 4, dtype="float64").to(device)
        x64 = Tensor(x.astype(np.float64), device=device, requires_grad=True)
        assert gradcheck(lambda t, w, b: layer64(t), x64, layer64.weight, layer64.bias)


@pytest.mark.task("layers_linear")
def test_layers_linear_default_init_is_pytorchs():
    layer = nn.Linear(256, 512)
    bound = 1 / 16
    w, b = layer.weight.numpy(), layer.bias.numpy()
    assert layer.weight.shape == (512, 256) and np.abs(w).max() <= bound and np.abs(w).max() > 0.999 * bound
    assert w.std() == pytest.approx(bound / math.sqrt(3), rel=0.02)
    assert np.abs(b).max() <= bound and np.abs(b).max() > 0.9 * bound
    tinyflo.manual_seed(1)
    first = nn.Linear(3, 2).state_dict()
    tinyflo.manual_seed(1)
    assert all(np.array_equal(v.numpy(), first[k].numpy()) for k, v in nn.Linear(3, 2).state_dict().items())
    assert nn.Linear(2, 2, dtype="float64").weight.dtype == tinyflo.float64


@pytest.mark.task("layers_linear")
def test_layers_linear_errors_and_repr():
    with pytest.raises(ShapeError) as info:
        nn.Linear(784, 10)(tinyflo.zeros(32, 785))
    assert str(info.value) == "Linear(784, 10) got input of shape (32, 785); expected (..., 784)"
    with pytest.raises(ShapeError, match=r"shape \(\)"):
        nn.Linear(1, 1)(Tensor(1.0))
    assert repr(nn.Linear(3, 2, bias=False)) == "Linear(in_features=3, out_features=2, bias=False)"
    assert nn.Linear(3, 2, bias=False).bias is None


@pytest.mark.task("layers_embedding")
def test_layers_embedding_lookup_and_scatter(device):
    emb = nn.Embedding(6, 4).to(device)
    idx = Tensor([[0, 5, 5], [2, 0, 0]], device=device)
    out = emb(idx)
    assert out.shape == (2, 3, 4) and out.device == tinyflo.device(device)
    np.testing.assert_array_equal(out.numpy(), emb.weight.numpy()[idx.numpy()])
    (out * 2).sum().backward()
    np.testing.assert_array_equal(emb.weight.grad.numpy()[:, 0], [6, 0, 2, 0, 0, 4])
    assert emb([3]).shape == (1, 4) and emb(np.array(1)).shape == (4,)
    assert emb.weight.numpy().std() > 0.3
    for bad in ([6], [-1]):
        if tinyflo.device(device).reads_wait:  # a GPU: checked on the device, the row is NaN
            assert np.isnan(emb(Tensor(bad, device=device)).numpy()).all()
            continue
        with pytest.raises(IndexError, match=r"Embedding\(6, 4\): index -?\d+ is out of range \[0, 6\)"):
            emb(Tensor(bad, device=device))
    with pytest.raises(TypeError, match="integers"):
        emb(Tensor([1.0], device=device))


@pytest.mark.task("layers_embedding")
def test_layers_embedding_checked_without_a_read(request):
    """Where reads wait (a GPU), an index out of range gets a row of NaN; the others are the plain lookup."""
    emb = nn.Embedding(6, 4)
    idx = [[0, 5, 7], [2, -1, 0]]
    good = [[0, 5, 1], [2, 3, 0]]
    eager = emb(Tensor(good)).numpy()
    request.getfixturevalue("reads_wait")
    np.testing.assert_array_equal(emb(Tensor(good)).numpy(), eager)
    out = emb(Tensor(idx))
    assert out.dtype == np.float32
    assert np.isnan(out.numpy()[[0, 1], [2, 1]]).all()
    np.testing.assert_array_equal(out.numpy()[[0, 0, 1, 1], [0, 1, 0, 2]], eager[[0, 0, 1, 1], [0, 1, 0, 2]])
    emb.weight.grad = None
    emb(Tensor(good)).sum().backward()
    np.testing.assert_array_equal(emb.weight.grad.numpy()[:, 0], [2, 1, 1, 1, 0, 1])


# ----- task layers_dropout --------------------------------------------------------

@pytest.mark.task("layers_dropout")
@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_layers_dropout_statistics(p, device):
    x = tinyflo.ones(400, 500, device=device)
    out = nn.dropout(x, p).numpy()
    zeroed = out == 0
    assert zeroed.mean() == pytest.approx(p, abs=0.01)
    np.testing.assert_allclose(out[~zeroed], 1 / (1 - p), rtol=1e-6)
    assert out.mean() == pytest.approx(1.0, abs=0.02)


@pytest.mark.task("layers_dropout")
def test_layers_dropout_identity_cases_and_errors():
    x = tinyflo.randn(10, 10, requires_grad=True)
    assert nn.dropout(x, 0.0) is x and nn.dropout(x, 0.7, training=False) is x
    layer = nn.Dropout(0.3)
    assert layer.eval()(x) is x and layer.train()(x) is not x
    assert np.all(nn.dropout(x, 1.0).numpy() == 0)
    with pytest.raises(ValueError, match="1.2"):
        nn.dropout(x, 1.2)
    with pytest.raises(ValueError, match="-0.1"):
        nn.Dropout(-0.1)
    assert nn.dropout(tinyflo.ones(4, dtype="float16"), 0.5).dtype == tinyflo.float16


@pytest.mark.task("layers_dropout")
def test_layers_dropout_reproducible_and_gradient_through_the_mask(device):
    x = tinyflo.randn(50, 40, device=device, requires_grad=True)
    tinyflo.manual_seed(123)
    first = nn.dropout(x, 0.5)
    tinyflo.manual_seed(123)
    second = nn.dropout(x, 0.5)
    np.testing.assert_array_equal(first.numpy(), second.numpy())
    different = nn.dropout(x, 0.5)
    assert not np.array_equal(different.numpy(), first.numpy())
    first.sum().backward()
    kept = first.numpy() != 0
    np.testing.assert_array_equal(x.grad.numpy(), np.where(kept, 2.0, 0.0))


# ----- tasks layers_layer_norm and layers_batch_norm -----------------------------------------------------------

@pytest.mark.task("layers_layer_norm")
@SETTINGS
@given(data=st.data())
def test_layers_layer_norm_matches_numpy(data, device):
    shape = data.draw(hnp.array_shapes(min_dims=1, max_dims=4, min_side=1, max_side=5))
    k = data.draw(st.integers(1, len(shape)))
    x = data.draw(arrays(shape, -5, 5))
    layer = nn.LayerNorm(shape[len(shape) - k:]).to(device)
    with tinyflo.no_grad():
        nn.normal_(layer.weight)
        nn.normal_(layer.bias)
    axes = tuple(range(len(shape) - k, len(shape)))
    xd = x.astype(np.float64)
    expected = (xd - xd.mean(axes, keepdims=True)) / np.sqrt(xd.var(axes, keepdims=True) + 1e-5)
    expected = expected * layer.weight.numpy() + layer.bias.numpy()
    out = layer(Tensor(x, device=device))
    assert out.dtype == tinyflo.float32
    # Nearly constant rows divide float32 rounding (~5e-7) by sqrt(eps) ≈ 3e-3: allow 1e-3.
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-4, atol=1e-3)


@pytest.mark.task("layers_layer_norm")
def test_layers_layer_norm_options_and_errors():
    layer = nn.LayerNorm((2, 3), eps=1e-3, elementwise_affine=False)
    assert list(layer.parameters()) == [] and layer.weight is None
    x = tinyflo.randn(4, 2, 3)
    assert layer(x).shape == (4, 2, 3) and layer.eval()(x).shape == (4, 2, 3)
    with pytest.raises(ShapeError, match=r"LayerNorm\(\(2, 3\)\) got input of shape \(4, 3, 2\)"):
        layer(tinyflo.randn(4, 3, 2))
    with pytest.raises(ShapeError):
        nn.LayerNorm((2, 3))(tinyflo.randn(3))
    assert repr(nn.LayerNorm(8)) == "LayerNorm((8,), eps=1e-05, elementwise_affine=True)"


def _batchnorm_reference(batches, momentum, eps=1e-5):
    """PyTorch's BatchNorm1d rule in NumPy: outputs and running statistics after each batch."""
    channels = batches[0].shape[1]
    mean, var, count = np.zeros(channels), np.ones(channels), 0
    outputs = []
    for x in batches:
        axes = (0,) if x.ndim == 2 else (0, 2)
        shape = (1, channels) + (1,) * (x.ndim - 2)
        m, v = x.mean(axes), x.var(axes)
        n = x.size // channels
        outputs.append((x - m.reshape(shape)) / np.sqrt(v.reshape(shape) + eps))
        count += 1
        f = momentum if momentum is not None else 1 / count
        mean = (1 - f) * mean + f * m
        var = (1 - f) * var + f * v * n / (n - 1)
    return outputs, mean, var, count


@pytest.mark.task("layers_batch_norm")
@pytest.mark.parametrize("shape", [(16, 5), (6, 5, 7), (2, 5)])
@pytest.mark.parametrize("momentum", [0.1, 0.7, None])
def test_layers_batch_norm_running_statistics(shape, momentum, device):
    rng = np.random.default_rng(0)
    batches = [rng.standard_normal(shape) * (i + 1) + i for i in range(5)]
    layer = nn.BatchNorm1d(5, momentum=momentum).to(device)
    outputs, mean, var, count = _batchnorm_reference(batches, momentum)
    for x, expected in zip(batches, outputs):
        np.testing.assert_allclose(layer(Tensor(x, dtype="float32", device=device)).numpy(), expected, rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(layer.running_mean.numpy(), mean, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(layer.running_var.numpy(), var, rtol=1e-5, atol=1e-6)
    assert layer.num_batches_tracked.item() == count and layer.running_var.dtype == tinyflo.float32
    layer.eval()
    x = batches[0]
    axis_shape = (1, 5) + (1,) * (x.ndim - 2)
    expected = (x - mean.reshape(axis_shape)) / np.sqrt(var.reshape(axis_shape) + 1e-5)
    np.testing.assert_allclose(layer(Tensor(x, dtype="float32", device=device)).numpy(), expected, rtol=1e-4, atol=1e-4)
    assert layer.num_batches_tracked.item() == count, "eval does not update"
    np.testing.assert_allclose(layer.running_mean.numpy(), mean, rtol=1e-5, atol=1e-6)


@pytest.mark.task("layers_batch_norm")
def test_layers_batch_norm_affine_shapes_and_errors():
    layer = nn.BatchNorm1d(3)
    with tinyflo.no_grad():
        layer.weight[...] = [1.0, 2.0, 3.0]
        layer.bias[...] = [0.0, 1.0, -1.0]
    x = np.random.default_rng(1).standard_normal((8, 3, 4))
    out = layer(Tensor(x, dtype="float32")).numpy()
    normal = (x - x.mean((0, 2), keepdims=True)) / np.sqrt(x.var((0, 2), keepdims=True) + 1e-5)
    np.testing.assert_allclose(out, normal * np.array([1, 2, 3])[None, :, None] + np.array([0, 1, -1])[None, :, None], rtol=1e-4, atol=1e-4)
    for bad in ((8, 4), (8, 3, 2, 2), (3,)):
        with pytest.raises(ShapeError, match=r"BatchNorm1d\(3\) got input of shape .*expected \(N, 3\) or \(N, 3, L\)"):
            layer(tinyflo.zeros(bad))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        layer(tinyflo.zeros(1, 3))
    assert nn.BatchNorm1d(3, affine=False).num_parameters() == 0
    assert layer.eval()(tinyflo.zeros(1, 3)).shape == (1, 3)
    assert list(layer.state_dict()) == ["weight", "bias", "running_mean", "running_var", "num_batches_tracked"]


@pytest.mark.task("layers_layer_norm")
def test_layers_layer_norm_float16_inputs_are_normalised_in_float32():
    big = Tensor((np.random.default_rng(0).standard_normal((8, 4)) * 300).astype(np.float16))
    out = nn.LayerNorm(4)(big)
    assert out.dtype == np.float16 and np.abs(out.numpy()).max() > 0.5, "not all zeros"
    np.testing.assert_allclose(out.numpy().std(axis=1), 1.0, atol=0.02)
    bn = nn.BatchNorm1d(4)
    bn(big)
    assert np.all(np.isfinite(bn.running_var.numpy()))


@pytest.mark.task("layers_linear")
def test_layers_linear_refuses_a_float_input_of_another_dtype():
    layer = nn.Linear(3, 2)
    with pytest.raises(TypeError, match=r"Linear\(3, 2\) holds float32 weights but got a float64 input"):
        layer(Tensor(np.ones((1, 3))))
    assert layer(Tensor([[1, 2, 3]])).dtype == np.float32, "integer data is converted"


@pytest.mark.task("layers_dropout")
def test_layers_dropout_refuses_integer_tensors():
    with pytest.raises(TypeError, match="dropout: expected a floating tensor; got int64"):
        nn.dropout(Tensor([1, 2, 3, 4]), 0.5)


@pytest.mark.task("layers_module_to")
def test_layers_module_to_names_a_bad_target():
    with pytest.raises(TypeError, match="expected a device .* or a floating dtype; got 'tpu'"):
        nn.Linear(2, 2).to("tpu")


def test_layers_parameter_from_a_tensor_shares_its_array_and_device():
    t = tinyflo.randn(2, device="cpu:1")
    p = nn.Parameter(t)
    assert p.data is t.data and p.device is t.device and p.requires_grad and p.is_leaf
