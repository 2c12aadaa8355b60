"""PyTorch's per-group learning-rate sequences for every schedule of module 07, as small JSON files.

Run from the repository root where torch is installed::

    .venv/bin/python scripts/make_scheduler_fixtures.py

It writes ``tests/fixtures/schedulers/<Scheduler>.json``: the torch version and a list of cases,
each with the tinyflo class and keyword arguments that describe the same schedule (``kwargs``),
the initial learning rates of the optimizer's parameter groups (``lrs``: two groups, most cases
at very different rates, one case per schedule with equal ones), how PyTorch was called
(``torch``), and ``lr``: for each group, its learning rate right after the scheduler was made
(t = 0) and after each ``scheduler.step()`` (t = 1, 2, ...). A dummy SGD optimizer with one
parameter per group does the stepping. ``tests/test_schedulers.py`` replays every group's sequence
through ``Scheduler.apply`` on a tinyflo optimizer with the same groups, without importing torch.

Extra fields: ``closed_form`` (CosineAnnealingLR only) is PyTorch's closed-form value of each
group at each t, next to ``lr`` from its chainable recursion; ``metrics`` (ReduceLROnPlateau only)
is the metric sequence fed to ``step(metric)``, and ``lr[g][i + 1]`` is group g's rate after
metric ``i``; ``raises_at`` (OneCycleLR only) is the first t for which PyTorch's ``step()`` raises.
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
APART = [0.1, 0.001]  # two groups far apart: a shared rate would show at once
EQUAL = [0.05, 0.05]


def optimizer(lrs: list[float]) -> torch.optim.Optimizer:
    """An SGD optimizer with one dummy parameter per group (momentum, so CyclicLR may cycle it)."""
    groups = [{"params": [torch.nn.Parameter(torch.zeros(1))], "lr": lr} for lr in lrs]
    return torch.optim.SGD(groups, lr=lrs[0], momentum=0.9)


def lrs_of(opt: torch.optim.Optimizer) -> list[float]:
    return [float(group["lr"]) for group in opt.param_groups]


def by_group(rows: list[list[float]]) -> list[list[float]]:
    """Rates listed per t, turned into one sequence per group."""
    return [list(column) for column in zip(*rows)]


def run(make, steps: int, lrs: list[float]) -> list[list[float]]:
    """Each group's lr at t = 0 .. steps as ``make(optimizer)`` steps it."""
    opt = optimizer(lrs)
    sched = make(opt)
    rows = [lrs_of(opt)]
    for _ in range(steps):
        opt.step()
        sched.step()
        rows.append(lrs_of(opt))
    return by_group(rows)


def case(name: str, kwargs: dict, lrs: list[float], torch_call: str, lr: list[list[float]], **extra) -> dict:
    return {"name": name, "kwargs": kwargs, "lrs": lrs, "torch": torch_call, "lr": lr, **extra}


def step_lr() -> list[dict]:
    configs = [("gamma-0.5", {"step_size": 3, "gamma": 0.5}, APART, 40),
               ("default-gamma", {"step_size": 7}, [1.0, 0.01], 40),
               ("equal-groups", {"step_size": 2, "gamma": 0.8}, EQUAL, 20)]
    return [case(name, kw, lrs, f"StepLR(opt(lrs={lrs}), **{kw})", run(lambda o, kw=kw: S.StepLR(o, **kw), n, lrs))
            for name, kw, lrs, n in configs]


def multistep_lr() -> list[dict]:
    configs = [("three", {"milestones": [2, 5, 9], "gamma": 0.5}, APART, 30),
               ("repeated-milestone", {"milestones": [10, 10, 25]}, [1.0, 0.003], 40),
               ("equal-groups", {"milestones": [3, 6], "gamma": 0.3}, EQUAL, 12)]
    return [case(name, kw, lrs, f"MultiStepLR(opt(lrs={lrs}), **{kw})",
                 run(lambda o, kw=kw: S.MultiStepLR(o, **kw), n, lrs))
            for name, kw, lrs, n in configs]


def exponential_lr() -> list[dict]:
    configs = [("decay", {"gamma": 0.9}, APART, 60), ("growth", {"gamma": 1.05}, [2.0, 0.02], 60),
               ("equal-groups", {"gamma": 0.7}, EQUAL, 20)]
    return [case(name, kw, lrs, f"ExponentialLR(opt(lrs={lrs}), **{kw})",
                 run(lambda o, kw=kw: S.ExponentialLR(o, **kw), n, lrs))
            for name, kw, lrs, n in configs]


def cosine_closed_form(lrs: list[float], t_max: int, eta_min: float, steps: int) -> list[list[float]]:
    """PyTorch's own closed form (what ``step(epoch)`` uses) of each group at t = 0 .. steps."""
    sched = S.CosineAnnealingLR(optimizer(lrs), T_max=t_max, eta_min=eta_min)
    rows = []
    for t in range(steps + 1):
        sched.last_epoch = t
        rows.append([float(v) for v in sched._get_closed_form_lr()])
    return by_group(rows)


def cosine_annealing_lr() -> list[dict]:
    configs = [("with-min", APART, 10, 0.0001, 45), ("to-zero", [1.0, 0.02], 37, 0.0, 100),
               ("long", [0.05, 0.0005], 200, 1e-6, 420), ("equal-groups", EQUAL, 12, 0.001, 30)]
    return [
        case(name, {"total": t_max, "min_lr": eta_min}, lrs,
             f"CosineAnnealingLR(opt(lrs={lrs}), T_max={t_max}, eta_min={eta_min})",
             run(lambda o, t_max=t_max, eta_min=eta_min: S.CosineAnnealingLR(o, T_max=t_max, eta_min=eta_min), steps, lrs),
             closed_form=cosine_closed_form(lrs, t_max, eta_min, steps))
        for name, lrs, t_max, eta_min, steps in configs
    ]


def warmup() -> list[dict]:
    inner = {
        "cosine": ({"type": "CosineAnnealing", "kwargs": {"total": 20, "min_lr": 0.0}},
                   lambda o: S.CosineAnnealingLR(o, T_max=20), APART, 5, 1 / 3, 40),
        "step": ({"type": "StepLR", "kwargs": {"step_size": 3, "gamma": 0.5}},
                 lambda o: S.StepLR(o, step_size=3, gamma=0.5), [1.0, 0.01], 4, 0.1, 25),
        "exponential": ({"type": "ExponentialLR", "kwargs": {"gamma": 0.9}},
                        lambda o: S.ExponentialLR(o, gamma=0.9), [0.5, 0.002], 3, 0.5, 25),
        "equal-groups": ({"type": "StepLR", "kwargs": {"step_size": 2, "gamma": 0.5}},
                         lambda o: S.StepLR(o, step_size=2, gamma=0.5), EQUAL, 4, 0.25, 15),
    }
    cases = []
    for name, (spec, make, lrs, steps_, factor, n) in inner.items():
        def sequential(o, make=make, steps_=steps_, factor=factor):
            ramp = S.LinearLR(o, start_factor=factor, end_factor=1.0, total_iters=steps_)
            return S.SequentialLR(o, [ramp, make(o)], milestones=[steps_])
        cases.append(case(name, {"scheduler": spec, "warmup_steps": steps_, "start_factor": factor}, lrs,
                          f"SequentialLR([LinearLR(opt(lrs={lrs}), start_factor={factor}, total_iters={steps_}), "
                          f"{spec['type']}-equivalent], milestones=[{steps_}])",
                          run(sequential, n, lrs)))
    return cases


def one_cycle_lr() -> list[dict]:
    configs = [
        ("defaults", {"total_steps": 20}, {}, APART),
        ("linear", {"total_steps": 10, "pct_start": 0.25, "anneal": "linear"},
         {"pct_start": 0.25, "anneal_strategy": "linear"}, [1.0, 0.004]),
        ("factors", {"total_steps": 100, "pct_start": 0.4, "div_factor": 10.0, "final_div_factor": 100.0},
         {"pct_start": 0.4, "div_factor": 10.0, "final_div_factor": 100.0}, [0.5, 0.005]),
        ("equal-groups", {"total_steps": 30}, {}, EQUAL),
    ]
    cases = []
    for name, kwargs, torch_kwargs, lrs in configs:
        total = kwargs["total_steps"]
        # each group's own lr is its peak: max_lr=[each group's lr]
        make = lambda o, lrs=lrs, tk=torch_kwargs, total=total: S.OneCycleLR(o, list(lrs), total_steps=total, **tk)  # noqa: E731
        sched = make(optimizer(lrs))
        for _ in range(total):
            sched.step()
        try:
            sched.step()
            raises_at = None
        except ValueError:
            raises_at = total + 1
        cases.append(case(name, kwargs, lrs, f"OneCycleLR(opt, max_lr={lrs}, total_steps={total}, **{torch_kwargs})",
                          run(make, total, lrs), raises_at=raises_at))
    return cases


def cyclic_lr() -> list[dict]:
    configs = [
        ("triangular", {"max_factor": 10.0, "step_size_up": 4}, {}, APART),
        ("triangular2-uneven", {"max_factor": 6.0, "step_size_up": 3, "step_size_down": 5, "mode": "triangular2"},
         {"step_size_down": 5, "mode": "triangular2"}, [0.01, 0.0002]),
        ("exp-range", {"max_factor": 10.0, "step_size_up": 5, "mode": "exp_range", "gamma": 0.95},
         {"mode": "exp_range", "gamma": 0.95}, [0.1, 0.003]),
        ("equal-groups", {"max_factor": 4.0, "step_size_up": 3}, {}, EQUAL),
    ]
    cases = []
    for name, kwargs, tk, lrs in configs:
        # the low end is each group's lr, the top max_factor times it
        tops = [kwargs["max_factor"] * lr for lr in lrs]
        make = lambda o, lrs=lrs, tops=tops, kw=kwargs, tk=tk: S.CyclicLR(  # noqa: E731
            o, list(lrs), tops, step_size_up=kw["step_size_up"], **tk)
        cases.append(case(name, kwargs, lrs, f"CyclicLR(opt, base_lr={lrs}, max_lr={tops}, "
                                             f"step_size_up={kwargs['step_size_up']}, **{tk})", run(make, 60, lrs)))
    return cases


def plateau() -> list[dict]:
    rng = np.random.default_rng(0)
    noisy = [float(v) for v in np.maximum(1.0 - 0.03 * np.arange(60), 0.3) + 0.02 * rng.standard_normal(60)]
    accuracy = [float(v) for v in np.minimum(0.5 + 0.02 * np.arange(60), 0.9) + 0.01 * rng.standard_normal(60)]
    configs = [
        ("defaults-short-patience", {"patience": 2}, [1.0, 0.01], noisy),
        ("max-abs-cooldown", {"mode": "max", "factor": 0.5, "patience": 1, "threshold": 0.005,
                              "threshold_mode": "abs", "cooldown": 2, "min_lr": 0.01}, [0.1, 0.02], accuracy),
        # the groups meet min_lr and eps at different cuts
        ("floor-and-eps", {"factor": 0.3, "patience": 0, "cooldown": 1, "min_lr": 1e-3, "eps": 1e-3,
                           "threshold": 0.01}, [0.5, 0.005], noisy),
        ("equal-groups", {"patience": 1, "factor": 0.5}, EQUAL, noisy),
    ]
    cases = []
    for name, kwargs, lrs, metrics in configs:
        opt = optimizer(lrs)
        sched = S.ReduceLROnPlateau(opt, **kwargs)
        rows = [lrs_of(opt)]
        for m in metrics:
            sched.step(m)
            rows.append(lrs_of(opt))
        cases.append(case(name, kwargs, lrs, f"ReduceLROnPlateau(opt(lrs={lrs}), **{kwargs})", by_group(rows),
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
            assert len(c["lr"]) == len(c["lrs"]) == 2, (name, c["name"])
            assert all(math.isfinite(v) for group in c["lr"] for v in group), (name, c["name"])
        payload = {"scheduler": name, "torch_version": torch.__version__.split("+")[0], "cases": cases}
        (OUT / f"{name}.json").write_text(json.dumps(payload, indent=1) + "\n")
        print(f"wrote {OUT / f'{name}.json'} ({len(cases)} cases)")


if __name__ == "__main__":
    main()
