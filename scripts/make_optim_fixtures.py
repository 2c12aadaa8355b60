"""Record 20-step torch.optim trajectories (float64) that tests/test_optim.py replays without torch.

Run from the repository root: ``.venv/bin/python scripts/make_optim_fixtures.py``. It writes
``tests/fixtures/optim/configs.json`` (what each case is) and ``trajectories.npz`` (the initial
parameters and, per case, the parameters after every step, flattened and concatenated).

The gradients come from a fixed function of the parameters and the step, computed with NumPy,
so the replay reproduces them exactly: ``grad(theta_i, t) = cos(2 theta_i + i) + 0.05 (t + 1) theta_i``
for parameter number i at step t (t = 0 first).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import torch

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "optim"
STEPS = 20
SHAPES = [(4, 3), (3,), (2, 2, 2), (1,)]

# name -> (torch class name, constructor keyword arguments, parameter groups or None)
CASES: dict[str, tuple[str, dict, list | None]] = {
    "sgd_plain": ("SGD", {"lr": 0.1}, None),
    "sgd_nesterov_decay": ("SGD", {"lr": 0.05, "momentum": 0.9, "nesterov": True, "weight_decay": 0.01}, None),
    "sgd_dampening": ("SGD", {"lr": 0.05, "momentum": 0.8, "dampening": 0.3}, None),
    "adam_plain": ("Adam", {"lr": 0.05}, None),
    "adam_amsgrad_decay": ("Adam", {"lr": 0.05, "betas": [0.8, 0.95], "amsgrad": True, "weight_decay": 0.1}, None),
    "adam_groups": ("Adam", {"lr": 0.05},
                    [{"params": [0, 1]}, {"params": [2, 3], "lr": 0.01, "weight_decay": 0.1}]),
    "adamw_plain": ("AdamW", {"lr": 0.05}, None),
    "adamw_amsgrad_decay": ("AdamW", {"lr": 0.05, "amsgrad": True, "weight_decay": 0.3, "eps": 1e-6}, None),
    "rmsprop_plain": ("RMSprop", {"lr": 0.01}, None),
    "rmsprop_centered_momentum": ("RMSprop", {"lr": 0.01, "alpha": 0.9, "momentum": 0.9, "centered": True,
                                              "weight_decay": 0.1}, None),
    "adagrad_plain": ("Adagrad", {"lr": 0.1}, None),
    "adagrad_decay_accumulator": ("Adagrad", {"lr": 0.1, "lr_decay": 0.1, "weight_decay": 0.1,
                                              "initial_accumulator_value": 0.5, "eps": 1e-8}, None),
    "radam_plain": ("RAdam", {"lr": 0.05}, None),
    "radam_short_memory_decay": ("RAdam", {"lr": 0.05, "betas": [0.8, 0.9], "weight_decay": 0.1}, None),
    "nadam_plain": ("NAdam", {"lr": 0.05}, None),
    "nadam_momentum_decay": ("NAdam", {"lr": 0.05, "betas": [0.8, 0.99], "momentum_decay": 0.01,
                                       "weight_decay": 0.1}, None),
}


def gradient(theta: np.ndarray, i: int, t: int) -> np.ndarray:
    """The fixed gradient of parameter number ``i`` at step ``t`` (see the module docstring)."""
    return np.cos(2 * theta + i) + 0.05 * (t + 1) * theta


def initial_parameters() -> list[np.ndarray]:
    rng = np.random.default_rng(2024)
    return [rng.standard_normal(shape) for shape in SHAPES]


def trajectory(cls_name: str, kwargs: dict, groups: list | None) -> np.ndarray:
    params = [torch.nn.Parameter(torch.tensor(a, dtype=torch.float64)) for a in initial_parameters()]
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in kwargs.items()}
    if groups is None:
        spec = params
    else:
        spec = [{**{k: v for k, v in g.items() if k != "params"}, "params": [params[i] for i in g["params"]]}
                for g in groups]
    opt = getattr(torch.optim, cls_name)(spec, foreach=False, **kwargs)
    rows = []
    for t in range(STEPS):
        for i, p in enumerate(params):
            p.grad = torch.tensor(gradient(p.detach().numpy(), i, t))
        opt.step()
        rows.append(np.concatenate([p.detach().numpy().ravel() for p in params]))
    return np.stack(rows)


def main() -> None:
    torch.set_default_dtype(torch.float64)  # torch's scalar state (step, mu_product) in float64 too
    OUT.mkdir(parents=True, exist_ok=True)
    arrays = {f"initial_{i}": a for i, a in enumerate(initial_parameters())}
    configs = {}
    for name, (cls_name, kwargs, groups) in CASES.items():
        arrays[name] = trajectory(cls_name, kwargs, groups)
        configs[name] = {"optimizer": cls_name, "kwargs": kwargs, "groups": groups}
    meta = {"torch": torch.__version__, "steps": STEPS, "shapes": SHAPES,
            "gradient": "cos(2 * theta_i + i) + 0.05 * (t + 1) * theta_i", "cases": configs}
    (OUT / "configs.json").write_text(json.dumps(meta, indent=1) + "\n")
    np.savez_compressed(OUT / "trajectories.npz", **arrays)
    print(f"wrote {len(configs)} cases to {OUT}")


if __name__ == "__main__":
    main()
