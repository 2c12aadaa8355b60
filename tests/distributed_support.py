"""The model, data and single-process reference that the data-parallel tests share (mpi worker included)."""

from __future__ import annotations

import numpy as np

from tinyflo.core.distributed import DataParallelStrategy
from tinyflo.core.layers import Linear, ReLU, Sequential
from tinyflo.core.losses import mse_loss
from tinyflo.core.optim import SGD, Adam
from tinyflo.core.schedulers import StepLR
from tinyflo.core.tensor import Tensor, manual_seed
from tinyflo.core.training import Trainer


def make_model(seed: int = 0) -> Sequential:
    """A float64 5-7-3 MLP with biases, the same for the same seed."""
    manual_seed(seed)
    return Sequential(Linear(5, 7), ReLU(), Linear(7, 3)).double()


def make_batches(sizes=(12, 12, 7), seed: int = 1) -> list[tuple[Tensor, Tensor]]:
    """Float64 regression batches; the default's last one is uneven."""
    rng = np.random.default_rng(seed)
    return [(Tensor(rng.standard_normal((n, 5))), Tensor(rng.standard_normal((n, 3)))) for n in sizes]


OPTIMIZERS = {
    "sgd-momentum": lambda params: SGD(params, lr=0.1, momentum=0.9, weight_decay=1e-3),
    "adam": lambda params: Adam(params, lr=0.01),
}


def train_single_process(make_optimizer, batches, epochs: int = 2) -> list[np.ndarray]:
    """The parameters after full-batch training of ``make_model()`` in one process."""
    model = make_model()
    opt = make_optimizer(model.parameters())
    for _ in range(epochs):
        for x, y in batches:
            opt.zero_grad()
            mse_loss(model(x), y).backward()
            opt.step()
    return [p.numpy() for p in model.parameters()]


def train_with_trainer(group=None, local_sgd=None, epochs: int = 2, accumulation_steps: int = 1,
                       momentum: float = 0.9, grad_clip_norm: float | None = 0.5):
    """A Trainer (step schedule, clipping; group= when given) after ``epochs`` epochs, and its epoch losses."""
    model = make_model()
    opt = SGD(model.parameters(), lr=0.1, momentum=momentum)
    trainer = Trainer(model, opt, mse_loss, scheduler=StepLR(step_size=2, gamma=0.5), scheduler_interval="step",
                      grad_clip_norm=grad_clip_norm, log_every=None, verbosity="quiet",
                      plugins=[] if group is None else [DataParallelStrategy(group, local_sgd=local_sgd)])
    losses = [trainer.train_epoch(make_batches(), accumulation_steps) for _ in range(epochs)]
    return trainer, losses
