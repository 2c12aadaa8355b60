"""Seeded mutants of 08_training: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # small gradients scaled *up* to max_norm: the factor is not capped at 1.
    (
        "training_clip",
        "factor = xp.minimum(max_norm / (norm + 1e-6), 1.0)",
        "factor = max_norm / (norm + 1e-6)",
    ),
    # the inf-norm adds the per-parameter maxima instead of taking the largest (a hidden test catches it).
    ("training_clip", "norm = partial.max()", "norm = partial.sum()"),
    # a general p-norm without the p-th root (a hidden test with norm_type=3 catches it).
    ("training_clip", "norm = partial.sum() ** (1.0 / norm_type)", "norm = partial.sum()"),
    # clip_grad_value clamps a copy and throws it away: the gradients are unchanged.
    (
        "training_clip",
        "g.data.clip(-clip_value, clip_value, out=g.data)",
        "g.data.clip(-clip_value, clip_value)",
    ),
    # error_if_nonfinite looks for NaN only: an infinite norm passes (a hidden test catches it).
    (
        "training_clip",
        "if error_if_nonfinite and not bool(xp.isfinite(norm)):",
        "if error_if_nonfinite and bool(xp.isnan(norm)):",
    ),
    # the slope from the end points instead of least squares (a hidden test catches it).
    (
        "training_trend",
        "return float((i * (y - y.mean())).sum() / (i * i).sum())",
        "return float((y[-1] - y[0]) / (len(y) - 1))",
    ),
    # stalled with exactly n values: nothing came before them, and min() of nothing raises.
    ("training_trend", "if len(self.values) <= n:", "if len(self.values) < n:"),
    # improving ignores the mode: an accuracy going up is not "improving".
    ("training_trend", 'return s < 0 if self.mode == "min" else s > 0', "return s < 0"),
    # converged with an absolute tolerance instead of one relative to the mean (a hidden test catches it).
    (
        "training_trend",
        "return float(last.max() - last.min()) <= tol * abs(float(last.mean()))",
        "return float(last.max() - last.min()) <= tol",
    ),
    # every micro-batch weighted 1/k: wrong when the batches of a group differ in size.
    (
        "training_epoch",
        "trainer.backward(loss if n == group_samples else loss * (n / group_samples))",
        "trainer.backward(loss * (1 / len(group)))",
    ),
    # gradients cleared before every batch: only the group's last batch reaches the step.
    (
        "training_epoch",
        "trainer.zero_grad()\n            for j, (x, y) in enumerate(group):\n",
        "for j, (x, y) in enumerate(group):\n                trainer.zero_grad()\n",
    ),
    # the epoch loss is the mean of the batch means, not the mean per sample (a hidden test catches it).
    ("training_epoch", "state.add(loss.detach(), n)", "state.add(loss.detach(), 1)"),
    # nan_check='step' never checks: a NaN loss reaches the optimizer (a hidden test catches it).
    (
        "training_epoch",
        "                elif not bool(state.xp.isfinite(loss.data)):\n"
        "                    raise _nonfinite_error(trainer, trainer.step, first + j, rolled_back=False)\n",
        "",
    ),
    # the model is not put in training mode: after evaluate(), dropout stays off (a hidden test catches it).
    (
        "training_epoch",
        "    trainer.model.train()\n    state = _EpochState(trainer)",
        "    state = _EpochState(trainer)",
    ),
    # evaluation in training mode: dropout stays on (a hidden test catches it).
    (
        "training_evaluate",
        "    trainer.model.eval()\n    total = correct = None",
        "    total = correct = None",
    ),
    # the model is left in training mode, even if it was in eval mode before (a hidden test catches it).
    ("training_evaluate", "trainer.model.train(was_training)", "trainer.model.train()"),
    # evaluation builds a graph: no no_grad() around the forward passes (a hidden test catches it).
    (
        "training_evaluate",
        "        with no_grad():\n            for i, batch in enumerate(loader):",
        "        for i, batch in enumerate(loader):",
    ),
    # each batch's accuracy (a mean) added up, then divided by all the samples again.
    (
        "training_evaluate",
        "hits = (out.data.argmax(axis=-1) == y.data).sum()",
        "hits = (out.data.argmax(axis=-1) == y.data).mean()",
    ),
    # BestModel keeps views of the live weights, which go on changing.
    (
        "training_fit",
        "self.state = {k: Tensor._wrap(v.data.copy(), v.device) for k, v in trainer.model.state_dict().items()}",
        "self.state = trainer.model.state_dict()",
    ),
    # EarlyStopping waits one epoch longer than its patience (a hidden test catches it).
    ("training_fit", "if self.wait >= self.patience:", "if self.wait > self.patience:"),
    # CheckpointEvery counts epochs from 0: it fires after epochs 1, 3, ... instead of 2, 4, ...
    ("training_fit", "if trainer.epoch % self.k == 0:", "if (trainer.epoch - 1) % self.k == 0:"),
    # a plateau scheduler is shown the training loss even with a validation loader (a hidden test catches it).
    ("training_fit", "val_loss if val_loader is not None else train_loss)", "train_loss)"),
]
