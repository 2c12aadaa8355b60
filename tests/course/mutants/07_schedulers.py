"""Seeded mutants of 07_schedulers: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # StepLR decays one step early: (t + 1) // step_size.
    (
        "schedulers_step",
        "self.gamma ** (t // self.step_size)",
        "self.gamma ** ((t + 1) // self.step_size)",
    ),
    # ExponentialLR counts from 1, so lr(0) is already base_lr · gamma.
    (
        "schedulers_step",
        "return base_lr * self.gamma**t",
        "return base_lr * self.gamma ** (t + 1)",
    ),
    # StepLR takes any step_size, 0 included, and fails only later with a ZeroDivisionError.
    (
        "schedulers_step",
        'self.step_size = _check_int("StepLR", "step_size", step_size)',
        "self.step_size = int(step_size)",
    ),
    # ExponentialLR accepts a gamma of 0 or below.
    (
        "schedulers_step",
        'self.gamma = _check_number("ExponentialLR", "gamma", gamma, strict=True)',
        'self.gamma = _check_number("ExponentialLR", "gamma", gamma)',
    ),
    # a milestone counted from the step after it.
    (
        "schedulers_multistep",
        "bisect.bisect_right(self.milestones, t)",
        "bisect.bisect_left(self.milestones, t)",
    ),
    # a milestone listed twice applies gamma once.
    (
        "schedulers_multistep",
        "self.gamma ** bisect.bisect_right(self.milestones, t)",
        "self.gamma ** len({m for m in self.milestones if m <= t})",
    ),
    # duplicates refused instead of unsorted milestones.
    (
        "schedulers_multistep",
        "if self.milestones != sorted(self.milestones):",
        "if len(set(self.milestones)) != len(self.milestones):",
    ),
    # milestones not checked: a negative or fractional one slips through.
    (
        "schedulers_multistep",
        'self.milestones = [_check_int("MultiStepLR", "milestones", m, low=0) for m in milestones]',
        "self.milestones = list(milestones)",
    ),
    # the cosine clamped at total instead of going on like PyTorch's.
    (
        "schedulers_cosine",
        "math.cos(math.pi * t / self.total)",
        "math.cos(math.pi * min(t, self.total) / self.total)",
    ),
    # min_lr added on top instead of being the floor of the cosine.
    (
        "schedulers_cosine",
        "self.min_lr + (base_lr - self.min_lr) * (1 + math.cos",
        "self.min_lr + base_lr * (1 + math.cos",
    ),
    # min_lr reached one step early, at t = total - 1.
    (
        "schedulers_cosine",
        "(1 + math.cos(math.pi * t / self.total)) / 2",
        "(1 + math.cos(math.pi * t / (self.total - 1))) / 2",
    ),
    # total checked as a number, so a fractional total is accepted.
    (
        "schedulers_cosine",
        'self.total = _check_int("CosineAnnealing", "total", total)',
        'self.total = _check_number("CosineAnnealing", "total", total, strict=True)',
    ),
    # the wrapped schedule's clock does not restart after the warm-up.
    (
        "schedulers_warmup",
        "return self.scheduler.lr(t - self.warmup_steps, base_lr)",
        "return self.scheduler.lr(t, base_lr)",
    ),
    # the ramp forgets (1 - start_factor): it overshoots base_lr.
    (
        "schedulers_warmup",
        "(self.start_factor + (1 - self.start_factor) * t / self.warmup_steps)",
        "(self.start_factor + t / self.warmup_steps)",
    ),
    # the ramp runs through t = warmup_steps, dividing by zero when there is no warm-up.
    ("schedulers_warmup", "if t < self.warmup_steps:", "if t <= self.warmup_steps:"),
    # start_factor checked only from below: one above 1 overshoots the wrapped schedule.
    (
        "schedulers_warmup",
        'self.start_factor = _check_fraction("Warmup", "start_factor", start_factor)',
        'self.start_factor = _check_number("Warmup", "start_factor", start_factor)',
    ),
    # phase 1 of one-cycle ends a step late (PyTorch's boundary is pct_start * total_steps - 1).
    (
        "schedulers_onecycle",
        "(float(self.pct_start * self.total_steps) - 1, initial, base_lr)",
        "(float(self.pct_start * self.total_steps), initial, base_lr)",
    ),
    # the final rate divides the peak rather than the initial rate.
    (
        "schedulers_onecycle",
        "final = initial / self.final_div_factor",
        "final = base_lr / self.final_div_factor",
    ),
    # phase 2 measures its progress from step 0 instead of from the end of phase 1.
    ("schedulers_onecycle", "            start_step = end_step", "            start_step = 0.0"),
    # linear annealing runs the wrong way, from end to start.
    (
        "schedulers_onecycle",
        "return (end_lr - start_lr) * pct + start_lr",
        "return (start_lr - end_lr) * pct + end_lr",
    ),
    # triangular2 halves the amplitude already in the first cycle.
    ("schedulers_cyclic", "amplitude = 1 / (2.0 ** (cycle - 1))", "amplitude = 1 / (2.0 ** cycle)"),
    # the way down divided by the way up's share: wrong when the two differ.
    (
        "schedulers_cyclic",
        "scale = x / ratio if x <= ratio else (x - 1) / (ratio - 1)",
        "scale = x / ratio if x <= ratio else (1 - x) / ratio",
    ),
    # step_size_down ignored: the wave is always symmetric.
    (
        "schedulers_cyclic",
        "size = float(self.step_size_up + self.step_size_down)",
        "size = float(2 * self.step_size_up)",
    ),
    # exp_range shrinks once per cycle instead of once per step.
    ("schedulers_cyclic", "amplitude = self.gamma**t", "amplitude = self.gamma**cycle"),
    # the plateau cuts after `patience` bad epochs instead of more than `patience`.
    (
        "schedulers_plateau",
        "if self.num_bad_epochs > self.patience:",
        "if self.num_bad_epochs >= self.patience:",
    ),
    # bad epochs during the cooldown still count.
    (
        "schedulers_plateau",
        "self.cooldown_counter -= 1\n            self.num_bad_epochs = 0",
        "self.cooldown_counter -= 1",
    ),
    # mode="max" with an absolute threshold: the sign of the threshold copied from "min".
    (
        "schedulers_plateau",
        "return metric > self.best + self.threshold",
        "return metric > self.best - self.threshold",
    ),
    # min_lr ignored: the rate is cut below its floor.
    (
        "schedulers_plateau",
        "new_lr = max(rate * self.factor, self.min_lr)",
        "new_lr = rate * self.factor",
    ),
    # any cut is taken, however tiny (eps ignored).
    (
        "schedulers_plateau",
        "if rate - new_lr > self.eps:",
        "if new_lr < rate:",
    ),
    # the initial rate ignored: every group starts the one cycle at the same fixed rate.
    (
        "schedulers_onecycle",
        "initial = base_lr / self.div_factor",
        "initial = 1.0 / self.div_factor",
    ),
    # the top of the wave taken as an absolute rate, not as a multiple of the group's initial lr.
    ("schedulers_cyclic", "max_lr = self.max_factor * base_lr", "max_lr = self.max_factor"),
    # the plateau forgets the cuts: every group stays at its initial lr.
    ("schedulers_plateau", "            self.cuts += 1\n", "            self.cuts = 1\n"),
    # the cooldown is never started after a cut.
    (
        "schedulers_plateau",
        "            self.cooldown_counter = self.cooldown\n",
        "            self.cooldown_counter = 0\n",
    ),
    # the warm-up ignores start_factor: it always ramps up from 0.
    (
        "schedulers_warmup",
        "return base_lr * (self.start_factor + (1 - self.start_factor) * t / self.warmup_steps)",
        "return base_lr * t / self.warmup_steps",
    ),
    # phase 1 of one-cycle ends at a whole step: pct_start * total_steps rounded, where PyTorch keeps the fraction.
    (
        "schedulers_onecycle",
        "(float(self.pct_start * self.total_steps) - 1, initial, base_lr)",
        "(float(round(self.pct_start * self.total_steps)) - 1, initial, base_lr)",
    ),
    # "better" written as "not worse": a NaN metric counts as an improvement.
    (
        "schedulers_plateau",
        "return metric < self.best * (1.0 - self.threshold)",
        "return not metric >= self.best * (1.0 - self.threshold)",
    ),
]
