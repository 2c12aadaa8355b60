"""PyTorch's learning-rate sequences for every schedule of module 07, as small JSON files.

Run from the repository root where torch is installed::

    .venv/bin/python scripts/make_scheduler_fixtures.py

It writes ``tests/fixtures/schedulers/<Scheduler>.json``: the torch version and a list of cases,
each with the tinyflo class and keyword arguments that describe the same schedule (``kwargs``),
how PyTorch was called (``torch``), and ``lr``: the optimizer's learning rate right after the
scheduler was made (t = 0) and after each ``scheduler.step()`` (t = 1, 2, ...). A dummy SGD
optimizer with one parameter does the stepping. ``tests/test_schedulers.py`` replays the cases
against tinyflo without importing torch.

Extra fields: ``closed_form`` (CosineAnnealingLR only) is PyTorch's closed-form value at each t,
next to ``lr`` from its chainable recursion; ``metrics`` (ReduceLROnPlateau only) is the metric
sequence fed to ``step(metric)``, and ``lr[i + 1]`` is the rate after metric ``i``; ``raises_at``
(OneCycleLR only) is the first t for which PyTorch's ``step()`` raises.
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import torch
from torch.optim import lr_scheduler as S

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "schedulers"


def optimizer(lr: float) -> torch.optim.Optimizer:
    """An SGD optimizer over one dummy parameter (momentum, so CyclicLR may cycle it)."""
    return torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=lr, momentum=0.9)


def lr_of(opt: torch.optim.Optimizer) -> float:
    return float(opt.param_groups[0]["lr"])


def run(make, steps: int, lr: float = 1.0) -> list[float]:
    """The optimizer's lr at t = 0 .. steps as ``make(optimizer)`` steps it."""
    opt = optimizer(lr)
    sched = make(opt)
    rates = [lr_of(opt)]
    for _ in range(steps):
        opt.step()
        sched.step()
        rates.append(lr_of(opt))
    return rates


def case(name: str, kwargs: dict, torch_call: str, lr: list[float], **extra) -> dict:
    return {"name": name, "kwargs": kwargs, "torch": torch_call, "lr": lr, **extra}


def step_lr() -> list[dict]:
    return [
        case("gamma-0.5", {"base_lr": 0.1, "step_size": 3, "gamma": 0.5}, "StepLR(opt(lr=0.1), step_size=3, gamma=0.5)",
             run(lambda o: S.StepLR(o, step_size=3, gamma=0.5), 40, 0.1)),
        case("default-gamma", {"base_lr": 1.0, "step_size": 7}, "StepLR(opt(lr=1.0), step_size=7)",
             run(lambda o: S.StepLR(o, step_size=7), 40, 1.0)),
    ]


def multistep_lr() -> list[dict]:
    return [
        case("three", {"base_lr": 0.1, "milestones": [2, 5, 9], "gamma": 0.5},
             "MultiStepLR(opt(lr=0.1), milestones=[2, 5, 9], gamma=0.5)",
             run(lambda o: S.MultiStepLR(o, [2, 5, 9], gamma=0.5), 30, 0.1)),
        case("repeated-milestone", {"base_lr": 1.0, "milestones": [10, 10, 25]},
             "MultiStepLR(opt(lr=1.0), milestones=[10, 10, 25])",
             run(lambda o: S.MultiStepLR(o, [10, 10, 25]), 40, 1.0)),
    ]


def exponential_lr() -> list[dict]:
    return [
        case("decay", {"base_lr": 0.1, "gamma": 0.9}, "ExponentialLR(opt(lr=0.1), gamma=0.9)",
             run(lambda o: S.ExponentialLR(o, gamma=0.9), 60, 0.1)),
        case("growth", {"base_lr": 2.0, "gamma": 1.05}, "ExponentialLR(opt(lr=2.0), gamma=1.05)",
             run(lambda o: S.ExponentialLR(o, gamma=1.05), 60, 2.0)),
    ]


def cosine_closed_form(lr: float, t_max: int, eta_min: float, steps: int) -> list[float]:
    """PyTorch's own closed form (what ``step(epoch)`` uses) at t = 0 .. steps."""
    opt = optimizer(lr)
    sched = S.CosineAnnealingLR(opt, T_max=t_max, eta_min=eta_min)
    values = []
    for t in range(steps + 1):
        sched.last_epoch = t
        values.append(float(sched._get_closed_form_lr()[0]))
    return values


def cosine_annealing_lr() -> list[dict]:
    configs = [("with-min", 0.1, 10, 0.001, 45), ("to-zero", 1.0, 37, 0.0, 100), ("long", 0.05, 200, 1e-4, 420)]
    return [
        case(name, {"base_lr": lr, "total": t_max, "min_lr": eta_min},
             f"CosineAnnealingLR(opt(lr={lr}), T_max={t_max}, eta_min={eta_min})",
             run(lambda o, t_max=t_max, eta_min=eta_min: S.CosineAnnealingLR(o, T_max=t_max, eta_min=eta_min), steps, lr),
             closed_form=cosine_closed_form(lr, t_max, eta_min, steps))
        for name, lr, t_max, eta_min, steps in configs
    ]


def warmup() -> list[dict]:
    inner = {
        "cosine": ({"type": "CosineAnnealing", "kwargs": {"base_lr": 0.1, "total": 20, "min_lr": 0.0}},
                   lambda o: S.CosineAnnealingLR(o, T_max=20), 0.1, 5, 1 / 3, 40),
        "step": ({"type": "StepLR", "kwargs": {"base_lr": 1.0, "step_size": 3, "gamma": 0.5}},
                 lambda o: S.StepLR(o, step_size=3, gamma=0.5), 1.0, 4, 0.1, 25),
        "exponential": ({"type": "ExponentialLR", "kwargs": {"base_lr": 0.5, "gamma": 0.9}},
                        lambda o: S.ExponentialLR(o, gamma=0.9), 0.5, 3, 0.5, 25),
    }
    cases = []
    for name, (spec, make, lr, steps_, factor, n) in inner.items():
        def sequential(o, make=make, steps_=steps_, factor=factor):
            ramp = S.LinearLR(o, start_factor=factor, end_factor=1.0, total_iters=steps_)
            return S.SequentialLR(o, [ramp, make(o)], milestones=[steps_])
        cases.append(case(name, {"scheduler": spec, "warmup_steps": steps_, "start_factor": factor},
                          f"SequentialLR([LinearLR(opt(lr={lr}), start_factor={factor}, total_iters={steps_}), "
                          f"{spec['type']}-equivalent], milestones=[{steps_}])",
                          run(sequential, n, lr)))
    return cases


def one_cycle_lr() -> list[dict]:
    configs = [
        ("defaults", {"max_lr": 0.1, "total_steps": 20}, {}),
        ("linear", {"max_lr": 1.0, "total_steps": 10, "pct_start": 0.25, "anneal": "linear"},
         {"pct_start": 0.25, "anneal_strategy": "linear"}),
        ("factors", {"max_lr": 0.5, "total_steps": 100, "pct_start": 0.4, "div_factor": 10.0, "final_div_factor": 100.0},
         {"pct_start": 0.4, "div_factor": 10.0, "final_div_factor": 100.0}),
    ]
    cases = []
    for name, kwargs, torch_kwargs in configs:
        total = kwargs["total_steps"]
        make = lambda o, kw=kwargs, tk=torch_kwargs: S.OneCycleLR(o, kw["max_lr"], total_steps=kw["total_steps"], **tk)  # noqa: E731
        opt = optimizer(1.0)
        sched = make(opt)
        for _ in range(total):
            sched.step()
        try:
            sched.step()
            raises_at = None
        except ValueError:
            raises_at = total + 1
        cases.append(case(name, kwargs, f"OneCycleLR(opt, {kwargs['max_lr']}, total_steps={total}, {torch_kwargs})",
                          run(make, total), raises_at=raises_at))
    return cases


def cyclic_lr() -> list[dict]:
    configs = [
        ("triangular", {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 4}, {}),
        ("triangular2-uneven", {"base_lr": 0.01, "max_lr": 0.1, "step_size_up": 3, "step_size_down": 5,
                                "mode": "triangular2"}, {"step_size_down": 5, "mode": "triangular2"}),
        ("exp-range", {"base_lr": 0.1, "max_lr": 1.0, "step_size_up": 5, "mode": "exp_range", "gamma": 0.95},
         {"mode": "exp_range", "gamma": 0.95}),
    ]
    return [
        case(name, kwargs, f"CyclicLR(opt, {kwargs['base_lr']}, {kwargs['max_lr']}, step_size_up={kwargs['step_size_up']}, {tk})",
             run(lambda o, kw=kwargs, tk=tk: S.CyclicLR(o, kw["base_lr"], kw["max_lr"], step_size_up=kw["step_size_up"], **tk), 60))
        for name, kwargs, tk in configs
    ]


def plateau() -> list[dict]:
    rng = np.random.default_rng(0)
    noisy = [float(v) for v in np.maximum(1.0 - 0.03 * np.arange(60), 0.3) + 0.02 * rng.standard_normal(60)]
    accuracy = [float(v) for v in np.minimum(0.5 + 0.02 * np.arange(60), 0.9) + 0.01 * rng.standard_normal(60)]
    configs = [
        ("defaults-short-patience", {"base_lr": 1.0, "patience": 2}, noisy),
        ("max-abs-cooldown", {"base_lr": 0.1, "mode": "max", "factor": 0.5, "patience": 1, "threshold": 0.005,
                              "threshold_mode": "abs", "cooldown": 2, "min_lr": 0.01}, accuracy),
        ("floor-and-eps", {"base_lr": 0.5, "factor": 0.3, "patience": 0, "cooldown": 1, "min_lr": 1e-3, "eps": 1e-3,
                           "threshold": 0.01}, noisy),
    ]
    cases = []
    for name, kwargs, metrics in configs:
        torch_kwargs = {k: v for k, v in kwargs.items() if k != "base_lr"}
        opt = optimizer(kwargs["base_lr"])
        sched = S.ReduceLROnPlateau(opt, **torch_kwargs)
        rates = [lr_of(opt)]
        for m in metrics:
            sched.step(m)
            rates.append(lr_of(opt))
        cases.append(case(name, kwargs, f"ReduceLROnPlateau(opt(lr={kwargs['base_lr']}), {torch_kwargs})", rates,
                          metrics=metrics))
    return cases


def main() -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    warnings.simplefilter("ignore")  # PyTorch's step-order and deprecation warnings say nothing about the values
    tables = {
        "StepLR": step_lr(), "MultiStepLR": multistep_lr(), "ExponentialLR": exponential_lr(),
        "CosineAnnealing": cosine_annealing_lr(), "Warmup": warmup(), "OneCycle": one_cycle_lr(),
        "CyclicLR": cyclic_lr(), "ReduceLROnPlateau": plateau(),
    }
    for name, cases in tables.items():
        for c in cases:
            assert all(math.isfinite(v) for v in c["lr"]), (name, c["name"])
        payload = {"scheduler": name, "torch_version": torch.__version__.split("+")[0], "cases": cases}
        (OUT / f"{name}.json").write_text(json.dumps(payload, indent=1) + "\n")
        print(f"wrote {OUT / f'{name}.json'} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
