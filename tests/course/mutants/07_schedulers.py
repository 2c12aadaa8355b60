"""Seeded mutants of 07_schedulers: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # phase 1 of one-cycle ends a step late (PyTorch's boundary is pct_start * total_steps - 1).
    ('schedulers_onecycle', "(float(self.pct_start * self.total_steps) - 1, initial, self.max_lr)",
      "(float(self.pct_start * self.total_steps), initial, self.max_lr)"),
    # the wrapped schedule's clock does not restart after the warm-up.
    ('schedulers_warmup', "return self.scheduler.lr(t - self.warmup_steps)", "return self.scheduler.lr(t)"),
    # a milestone counted from the step after it.
    ('schedulers_step', "bisect.bisect_right(self.milestones, t)", "bisect.bisect_left(self.milestones, t)"),
    # triangular2 halves the amplitude already in the first cycle.
    ('schedulers_cyclic', "amplitude = 1 / (2.0 ** (cycle - 1))", "amplitude = 1 / (2.0 ** cycle)"),
    # the plateau cuts after `patience` bad epochs instead of more than `patience`.
    ('schedulers_plateau', "if self.num_bad_epochs > self.patience:", "if self.num_bad_epochs >= self.patience:"),
    # bad epochs during the cooldown still count (a hidden test catches it).
    ('schedulers_plateau', "self.cooldown_counter -= 1\n            self.num_bad_epochs = 0", "self.cooldown_counter -= 1"),
    # Only a hidden test catches this one: the cosine clamped at total instead of going on like PyTorch's.
    ('schedulers_cosine', "math.cos(math.pi * t / self.total)", "math.cos(math.pi * min(t, self.total) / self.total)"),
]
