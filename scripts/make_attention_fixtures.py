"""PyTorch's answers for module 03's fused attention and layer norm, as one small reference file.

Run from the repository root where torch is installed::

    PYTHONPATH=src python scripts/make_attention_fixtures.py

It writes ``tests/fixtures/layers/attention_reference.npz``, which ``tests/test_attention.py``
replays against tinyflo without importing torch. Everything is float64 and seeded. For each case
``<case>/inputs`` names the arrays stored under ``<case>/<name>``; ``<case>/out`` is the output and
``<case>/grad_<name>`` the gradient of ``sum(out * c)`` with ``c = <case>/cotangent``:

* ``sdpa-*``: ``F.scaled_dot_product_attention`` — plain, causal, causal with a scale, a boolean
  mask, a float mask, and a key sequence longer than the queries;
* ``layer_norm-*``: ``F.layer_norm`` over one and two trailing axes, with and without weight and bias.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "layers" / "attention_reference.npz"


def record(arrays: dict, case: str, inputs: dict[str, np.ndarray], fn, extra: dict | None = None) -> None:
    tensors = {name: torch.tensor(a, requires_grad=True) for name, a in inputs.items()}
    out = fn(**tensors, **{k: torch.tensor(v) for k, v in (extra or {}).items()})
    v = np.random.default_rng(len(arrays)).standard_normal(out.shape)
    (out * torch.tensor(v)).sum().backward()
    arrays[f"{case}/inputs"] = np.array(list(inputs))
    for name, a in inputs.items():
        arrays[f"{case}/{name}"] = a
        arrays[f"{case}/grad_{name}"] = tensors[name].grad.numpy()
    for name, a in (extra or {}).items():
        arrays[f"{case}/{name}"] = a
    arrays[f"{case}/out"] = out.detach().numpy()
    arrays[f"{case}/cotangent"] = v


def main() -> None:
    rng = np.random.default_rng(2017)
    arrays: dict[str, np.ndarray] = {}

    def qkv(L, S, E=4, Ev=3, batch=(2, 3)):
        return {"q": rng.standard_normal((*batch, L, E)), "k": rng.standard_normal((*batch, S, E)),
                "v": rng.standard_normal((*batch, S, Ev))}

    record(arrays, "sdpa-plain", qkv(5, 5), lambda q, k, v: F.scaled_dot_product_attention(q, k, v))
    record(arrays, "sdpa-causal", qkv(6, 6), lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True))
    record(arrays, "sdpa-causal-scale", qkv(6, 6, E=8),
           lambda q, k, v: F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.7))
    record(arrays, "sdpa-longer-keys", qkv(3, 7), lambda q, k, v: F.scaled_dot_product_attention(q, k, v))
    keep = rng.random((4, 6)) > 0.4
    keep[:, 0] = True  # every query sees at least one key
    record(arrays, "sdpa-bool-mask", qkv(4, 6),
           lambda q, k, v, mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask), {"mask": keep})
    record(arrays, "sdpa-float-mask", qkv(4, 6),
           lambda q, k, v, mask: F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
           {"mask": rng.standard_normal((4, 6))})

    x = rng.standard_normal((5, 8)) * 3 + 1
    record(arrays, "layer_norm-plain", {"x": x}, lambda x: F.layer_norm(x, (8,)))
    record(arrays, "layer_norm-affine", {"x": x, "weight": rng.standard_normal(8), "bias": rng.standard_normal(8)},
           lambda x, weight, bias: F.layer_norm(x, (8,), weight, bias))
    record(arrays, "layer_norm-weight-only", {"x": x, "weight": rng.standard_normal(8)},
           lambda x, weight: F.layer_norm(x, (8,), weight))
    x3 = rng.standard_normal((3, 2, 4))
    record(arrays, "layer_norm-2-axes", {"x": x3, "weight": rng.standard_normal((2, 4)),
                                         "bias": rng.standard_normal((2, 4))},
           lambda x, weight, bias: F.layer_norm(x, (2, 4), weight, bias, eps=1e-3))

    OUT.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT, **arrays)
    print(f"wrote {OUT} ({len(arrays)} arrays, torch {torch.__version__})")


if __name__ == "__main__":
    main()
