"""Module 03's fused attention, layer norm and GELU (tanh): against the written-out forms, PyTorch and central differences.

``scaled_dot_product_attention`` and ``layer_norm`` are single graph nodes with backwards derived by
hand; each is checked three ways: it equals the composition of graded ops it replaces (values and
gradients, float32), PyTorch's stored answers (``scripts/make_attention_fixtures.py``, float64), and
float64 central differences, on the CPU and on ``cuda:0``.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest

import tinyflo
from tinyflo import Tensor, gradcheck
from tinyflo.core import layers as nn
from tinyflo.nn import functional as F

FIXTURE = Path(__file__).parent / "fixtures" / "layers" / "attention_reference.npz"
REFERENCE = dict(np.load(FIXTURE))

SDPA_CASES = {
    "sdpa-plain": {},
    "sdpa-causal": {"is_causal": True},
    "sdpa-causal-scale": {"is_causal": True, "scale": 0.7},
    "sdpa-longer-keys": {},
    "sdpa-bool-mask": {"attn_mask": "mask"},
    "sdpa-float-mask": {"attn_mask": "mask"},
}
LAYER_NORM_CASES = {
    "layer_norm-plain": ((8,), 1e-5),
    "layer_norm-affine": ((8,), 1e-5),
    "layer_norm-weight-only": ((8,), 1e-5),
    "layer_norm-2-axes": ((2, 4), 1e-3),
}


def written_attention(q, k, v, is_causal=False, mask=None, scale=None):
    """Attention out of graded ops: ``@``, ``where`` and ``softmax`` (the milestone's form)."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    scores = (q @ k.transpose(-2, -1)) * scale
    if is_causal:
        mask = np.tril(np.ones((q.shape[-2], k.shape[-2]), bool))
    if mask is not None:
        scores = tinyflo.where(Tensor(mask, device=q.device), scores, float("-inf"))
    return nn.softmax(scores, axis=-1) @ v


def _stored(case: str, device: str = "cpu") -> dict[str, Tensor]:
    names = [str(n) for n in REFERENCE[f"{case}/inputs"]]
    return {n: Tensor(REFERENCE[f"{case}/{n}"], device=device, requires_grad=True) for n in names}


def _assert_matches_reference(case: str, out: Tensor, inputs: dict[str, Tensor], device: str) -> None:
    """``out`` and, after a backward of the stored cotangent, every input's gradient equal PyTorch's."""
    np.testing.assert_allclose(out.numpy(), REFERENCE[f"{case}/out"], rtol=1e-10, atol=1e-12)
    (out * Tensor(REFERENCE[f"{case}/cotangent"], device=device)).sum().backward()
    for name, t in inputs.items():
        np.testing.assert_allclose(t.grad.numpy(), REFERENCE[f"{case}/grad_{name}"], rtol=1e-9, atol=1e-12,
                                   err_msg=name)


def test_attention_fixture_covers_every_case():
    stored = {key.split("/")[0] for key in REFERENCE}
    assert stored == set(SDPA_CASES) | set(LAYER_NORM_CASES)


@pytest.mark.task("layers_softmax")
@pytest.mark.parametrize("case", SDPA_CASES)
def test_layers_softmax_attention_matches_pytorch(case, device):
    inputs = _stored(case, device)
    options = dict(SDPA_CASES[case])
    if options.get("attn_mask") == "mask":
        options["attn_mask"] = Tensor(REFERENCE[f"{case}/mask"], device=device)
    out = F.scaled_dot_product_attention(inputs["q"], inputs["k"], inputs["v"], **options)
    _assert_matches_reference(case, out, inputs, device)


@pytest.mark.task("layers_layer_norm")
@pytest.mark.parametrize("case", LAYER_NORM_CASES)
def test_layers_layer_norm_fused_matches_pytorch(case, device):
    inputs = _stored(case, device)
    shape, eps = LAYER_NORM_CASES[case]
    out = F.layer_norm(inputs["x"], shape, inputs.get("weight"), inputs.get("bias"), eps=eps)
    _assert_matches_reference(case, out, inputs, device)


@pytest.mark.task("layers_softmax")
@pytest.mark.parametrize("options", [{}, {"is_causal": True}, {"is_causal": True, "scale": 0.3}, {"mask": True}],
                         ids=["plain", "causal", "causal-scale", "bool-mask"])
@pytest.mark.parametrize("lengths", [(5, 5), (3, 6)], ids=["square", "longer-keys"])
def test_layers_softmax_attention_gradcheck(options, lengths, device):
    L, S = lengths
    rng = np.random.default_rng(L * 10 + S)
    q = Tensor(rng.standard_normal((2, 3, L, 4)), device=device, requires_grad=True)
    k = Tensor(rng.standard_normal((2, 3, S, 4)), device=device, requires_grad=True)
    v = Tensor(rng.standard_normal((2, 3, S, 2)), device=device, requires_grad=True)
    options = dict(options)
    if options.pop("mask", False):
        mask = rng.random((L, S)) > 0.4
        mask[:, 0] = True
        options["attn_mask"] = mask
    assert gradcheck(lambda a, b, c: F.scaled_dot_product_attention(a, b, c, **options), q, k, v)


@pytest.mark.task("layers_softmax")
def test_layers_softmax_attention_dropout_gradcheck_and_reproducible(device):
    rng = np.random.default_rng(5)
    q, k, v = (Tensor(rng.standard_normal((2, 4, 3)), device=device, requires_grad=True) for _ in range(3))

    def dropped(a, b, c):
        tinyflo.manual_seed(7)  # the same mask on every call gradcheck makes
        return F.scaled_dot_product_attention(a, b, c, dropout_p=0.3, is_causal=True)

    assert gradcheck(dropped, q, k, v)
    np.testing.assert_array_equal(dropped(q, k, v).numpy(), dropped(q, k, v).numpy())
    assert not np.allclose(dropped(q, k, v).numpy(), F.scaled_dot_product_attention(q, k, v, is_causal=True).numpy())
    assert not F.scaled_dot_product_attention(q, k, v, dropout_p=1.0).numpy().any(), "p = 1 drops every weight"


@pytest.mark.task("layers_layer_norm")
@pytest.mark.parametrize("normalized", [(4,), (3, 4)], ids=["last-axis", "two-axes"])
def test_layers_layer_norm_fused_gradcheck(normalized, device):
    rng = np.random.default_rng(len(normalized))
    x = Tensor(rng.standard_normal((2, 3, 4)) * 2 + 1, device=device, requires_grad=True)
    w = Tensor(rng.standard_normal(normalized), device=device, requires_grad=True)
    b = Tensor(rng.standard_normal(normalized), device=device, requires_grad=True)
    assert gradcheck(lambda a, g, s: F.layer_norm(a, normalized, g, s), x, w, b)
    assert gradcheck(lambda a: F.layer_norm(a, normalized), x)


@pytest.mark.task("layers_softmax")
@pytest.mark.parametrize("is_causal", [False, True])
def test_layers_softmax_attention_equals_the_written_out_form_in_float32(is_causal, device):
    rng = np.random.default_rng(1)
    arrays = [rng.standard_normal((3, 2, 8, 4)).astype(np.float32) for _ in range(3)]
    fused = [Tensor(a, device=device, requires_grad=True) for a in arrays]
    written = [Tensor(a, device=device, requires_grad=True) for a in arrays]
    out = F.scaled_dot_product_attention(*fused, is_causal=is_causal)
    ref = written_attention(*written, is_causal=is_causal)
    assert out.dtype == tinyflo.float32, "float32 in, float32 out"
    assert isinstance(out._ctx, nn.ScaledDotProductAttentionFn), "attention is one graph node"
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-6)
    g = Tensor(rng.standard_normal(out.shape).astype(np.float32), device=device)
    (out * g).sum().backward()
    (ref * g).sum().backward()
    for a, b in zip(fused, written):
        assert a.grad.dtype == tinyflo.float32
        np.testing.assert_allclose(a.grad.numpy(), b.grad.numpy(), rtol=1e-4, atol=1e-5)


@pytest.mark.task("layers_layer_norm")
def test_layers_layer_norm_module_is_one_node_and_equals_the_composed_form(device):
    rng = np.random.default_rng(2)
    ln = nn.LayerNorm(6).to(device)
    with tinyflo.no_grad():
        ln.weight[...] = rng.standard_normal(6).astype(np.float32)
        ln.bias[...] = rng.standard_normal(6).astype(np.float32)
    x = Tensor(rng.standard_normal((5, 6)).astype(np.float32) * 3, device=device, requires_grad=True)
    x2 = Tensor(x.numpy(), device=device, requires_grad=True)
    out = ln(x)
    assert isinstance(out._ctx, nn.LayerNormFn) and out.dtype == tinyflo.float32
    ref = nn._composed_layer_norm_forward(ln, x2)
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-5, atol=1e-5)
    g = Tensor(rng.standard_normal((5, 6)).astype(np.float32), device=device)
    (out * g).sum().backward()
    grads = [ln.weight.grad.numpy(), ln.bias.grad.numpy()]
    ln.zero_grad()
    (ref * g).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), x2.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads[0], ln.weight.grad.numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(grads[1], ln.bias.grad.numpy(), rtol=1e-4, atol=1e-5)
    assert x.grad.dtype == tinyflo.float32


def test_attention_and_layer_norm_refuse_what_does_not_fit():
    q = tinyflo.randn(2, 4, 3)
    with pytest.raises(tinyflo.ShapeError, match=r"\(2, 4, 5\)"):
        F.scaled_dot_product_attention(q, tinyflo.randn(2, 4, 5), q)
    with pytest.raises(ValueError, match="not both"):
        F.scaled_dot_product_attention(q, q, q, attn_mask=np.ones((4, 4), bool), is_causal=True)
    with pytest.raises(ValueError, match="dropout_p"):
        F.scaled_dot_product_attention(q, q, q, dropout_p=1.5)
    with pytest.raises(tinyflo.ShapeError, match=r"got input of shape \(2, 4, 3\)"):
        F.layer_norm(q, 4)


@pytest.mark.task("layers_gelu")
@pytest.mark.parametrize("shape", [(64, 32), (3, nn.GELU_BLOCK // 64 + 5, 64), (0, 7)], ids=["small", "blocks", "empty"])
def test_layers_gelu_tanh_in_place_equals_the_graded_form(shape, device):
    """Also over several CPU blocks with a short last one, a transposed (non-contiguous) input, and no elements."""
    rng = np.random.default_rng(3)
    data = (rng.standard_normal(shape) * 3).astype(np.float32)
    if len(shape) == 3:
        data = data.transpose(0, 2, 1)
    x, x2 = (Tensor(data, device=device, requires_grad=True) for _ in range(2))
    out, ref = F.gelu(x, approximate="tanh"), nn._graded_gelu(x2, approximate="tanh")
    assert isinstance(out._ctx, nn.GeluTanhFn) and out.dtype == tinyflo.float32
    np.testing.assert_allclose(out.numpy(), ref.numpy(), rtol=1e-6, atol=1e-6)
    g = Tensor(rng.standard_normal(data.shape).astype(np.float32), device=device)
    (out * g).sum().backward()
    (ref * g).sum().backward()
    assert x.grad.dtype == tinyflo.float32
    np.testing.assert_allclose(x.grad.numpy(), x2.grad.numpy(), rtol=1e-5, atol=1e-5)  # float32 ulps of O(1)
