"""Optimizers (module 06) and learning-rate schedules (module 07), as in ``torch.optim``."""

from tinyflo.core.optim import SGD, Adagrad, Adam, AdamW, NAdam, Optimizer, RAdam, RMSprop
from tinyflo.optim import lr_scheduler

__all__ = ["SGD", "Adagrad", "Adam", "AdamW", "NAdam", "Optimizer", "RAdam", "RMSprop", "lr_scheduler"]
