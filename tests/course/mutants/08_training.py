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
    # clip_grad_value clamps from above only: large negative gradients pass.
    (
        "training_clip",
        "g.data.clip(-clip_value, clip_value, out=g.data)",
        "np.minimum(g.data, clip_value, out=g.data)",
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
    # stalled with an absolute tolerance for mode='max' (a hidden test catches it).
    ("training_trend", "return not new > best + tol * abs(best)", "return not new > best + tol"),
    # converged against the mean itself: a negative curve never converges (a hidden test catches it).
    (
        "training_trend",
        "return float(last.max() - last.min()) <= tol * abs(float(last.mean()))",
        "return float(last.max() - last.min()) <= tol * float(last.mean())",
    ),
    # the step's loss without the accumulation weight: k batches step on k times the mean gradient.
    (
        "training_step",
        "self.backward(loss if n == samples else loss * (n / samples))",
        "self.backward(loss)",
    ),
    # gradients of the previous group kept: zero_grad forgotten.
    ("training_step", "    self.zero_grad()\n    total = None", "    total = None"),
    # the loss sum counts each batch once, not once per sample.
    (
        "training_step",
        "        total = loss.data * n if total is None else total + loss.data * n\n    self.schedule()",
        "        total = loss.data if total is None else total + loss.data\n    self.schedule()",
    ),
    # the step count never moves: an epoch schedule by steps stays at t = 0.
    ("training_step", "    self.step += 1\n    return total", "    return total"),
    # the schedule applied after the step: each step runs at the previous step's rate.
    (
        "training_step",
        "    self.schedule()\n    self.optimizer_step(total)",
        "    self.optimizer_step(total)\n    self.schedule()",
    ),
    # the optimizer stepped directly: no guard, no clipping (hidden tests catch it).
    ("training_step", "    self.optimizer_step(total)\n    self.step += 1", "    self.optimizer.step()\n    self.step += 1"),
    # every add overwrites the sum: the mean is of the last group only.
    (
        "training_running",
        "self.total = total if self.total is None else self.total + total",
        "self.total = total",
    ),
    # batches not counted: a resumed epoch numbers its batches from 0 again.
    ("training_running", "        self.batches += batches", "        self.batches += 1"),
    # the mean per group instead of per sample.
    (
        "training_running",
        "return trainer.read(self.total / self.samples)",
        "return trainer.read(self.total / self.batches)",
    ),
    # samples not counted: the mean divides by zero.
    ("training_running", "        self.samples += samples\n", ""),
    # only the loss is checked: a finite loss with NaN gradients reaches the weights.
    (
        "training_guard",
        "            finite = finite & xp.isfinite(norm.to(self.device).data)",
        "            pass",
    ),
    # step mode checks nothing: the NaN step is taken.
    (
        "training_guard",
        "        if not bool(finite):\n            raise _nonfinite_error(self, self.step, rolled_back=False)\n",
        "",
    ),
    # interval mode overwrites the first bad step with every later one.
    (
        "training_guard",
        "xp.where((self.first_bad < 0) & ~finite, self.step, self.first_bad)",
        "xp.where(~finite, self.step, self.first_bad)",
    ),
    # interval mode marks the step but lets its NaN gradients through.
    (
        "training_guard",
        "    for params in self.strategy.param_lists:\n        zero_grads_unless(params, finite)\n",
        "",
    ),
    # the mask inverted: finite steps lose their gradients, bad ones keep their NaN (a hidden test catches it).
    ("training_guard", "        zero_grads_unless(params, finite)\n", "        zero_grads_unless(params, ~finite)\n"),
    # the scaler's skip is ignored: overflowed float16 gradients raise instead of being skipped.
    ("training_guard", "    if not self.precision.skips_nonfinite:\n", "    if True:\n"),
    # a bad step is found but nothing is rolled back.
    ("training_rollback", "            self.restore_snapshot()\n", ""),
    # a clean check keeps the old snapshot: a later rollback goes back too far.
    ("training_rollback", "    self.take_snapshot()\n    ### END SOLUTION", "    ### END SOLUTION"),
    # a bad step is never reported: the rollback happens silently.
    (
        "training_rollback",
        "            raise _nonfinite_error(self, bad, rolled_back=True)",
        "            pass",
    ),
    # the check only fires on step 0 (reads the flag as a truth value).
    ("training_rollback", "        if bad >= 0:", "        if bad > 0:"),
    # the last short group is dropped.
    (
        "training_epoch",
        "while group := list(itertools.islice(batches, k)):",
        "while len(group := list(itertools.islice(batches, k))) == k:",
    ),
    # the epoch is not counted: TinyTorch's loop by hand never moves its schedule.
    ("training_epoch", "    self.epoch += 1\n    self.history.record", "    self.history.record"),
    # the history gets no row.
    (
        "training_epoch",
        """    self.history.record(self.epoch, {"train_loss": loss, "time": time.perf_counter() - self._started,
                                     **self.epoch_columns()})
""",
        "",
    ),
    # batches counted as samples: the epoch's loss is the mean of the groups' sums over the batches.
    (
        "training_epoch",
        "running.add(total, sum(y.shape[0] for _, y in group), len(group))",
        "running.add(total, len(group), len(group))",
    ),
    # no check at the end of the epoch: a bad step after the last log interval goes unreported (a hidden test catches it).
    (
        "training_epoch",
        '        raise ValueError("train_epoch: the loader yielded no batches; there is nothing to train on")\n'
        '    if self.nan_check == "interval":\n        self.check_guard()\n',
        '        raise ValueError("train_epoch: the loader yielded no batches; there is nothing to train on")\n',
    ),
    # the bookkeeping is skipped when a batch raises: the progress bar and the running loss stay open.
    (
        "training_epoch",
        "    finally:\n        self.end_epoch()",
        "    except BaseException:\n        raise\n    self.end_epoch()",
    ),
    # the model is left in whatever mode it was in.
    (
        "training_epoch",
        "    self.strategy.train(True)\n    running = self.start_epoch(loader)",
        "    running = self.start_epoch(loader)",
    ),
    # evaluation in training mode: dropout stays on.
    (
        "training_evaluate",
        "    self.strategy.train(False)\n    total = correct = None",
        "    total = correct = None",
    ),
    # the model is left in eval mode after evaluating.
    (
        "training_evaluate",
        "        self.strategy.train(was_training)",
        "        self.strategy.train(False)",
    ),
    # the model always put back into training mode, even one that was in eval mode (a hidden test catches it).
    ("training_evaluate", "        self.strategy.train(was_training)", "        self.strategy.train(True)"),
    # evaluation builds a graph: no no_grad() around the forward passes.
    (
        "training_evaluate",
        "        with no_grad():\n            for i, batch in enumerate(loader):",
        "        if True:\n            for i, batch in enumerate(loader):",
    ),
    # the loss of each batch counted once, not per sample.
    (
        "training_evaluate",
        "                total = loss.data * n if total is None else total + loss.data * n\n                samples",
        "                total = loss.data if total is None else total + loss.data\n                samples",
    ),
    # nothing is recorded in the history.
    (
        "training_evaluate",
        "        self.history.record(self.epoch, columns)",
        "        pass",
    ),
    # BestModel keeps views of the live weights, which go on changing.
    (
        "training_callbacks",
        "self.state = {k: Tensor(v) for k, v in trainer.model.state_dict().items()}",
        "self.state = trainer.model.state_dict()",
    ),
    # EarlyStopping waits one epoch longer than its patience.
    ("training_callbacks", "if self.wait >= self.patience:", "if self.wait > self.patience:"),
    # CheckpointEvery counts epochs from 0: it fires after epochs 1, 3, ... instead of 2, 4, ...
    (
        "training_callbacks",
        "if trainer.epoch % self.k == 0:",
        "if (trainer.epoch - 1) % self.k == 0:",
    ),
    # EarlyStopping never resets its wait after an improvement.
    (
        "training_callbacks",
        "            self.best, self.wait = value, 0",
        "            self.best = value",
    ),
    # min_delta ignored: any improvement, however small, starts the wait again (a hidden test catches it).
    (
        "training_callbacks",
        "if _better(value, self.best, self.mode, self.min_delta):",
        "if _better(value, self.best, self.mode):",
    ),
    # fit never validates.
    (
        "training_fit",
        "        if val_loader is not None:\n            self.evaluate(val_loader)\n",
        "",
    ),
    # the callbacks' epoch hook is never called.
    ("training_fit", "        for cb in callbacks:\n            cb.on_epoch_end(self)\n", ""),
    # stop_training is ignored: fit always runs every epoch.
    (
        "training_fit",
        "        if self.stop_training:\n            if self.verbosity",
        "        if False:\n            if self.verbosity",
    ),
    # every fit() numbers its epochs from 1: a second fit (or a resumed run) reads as starting over.
    (
        "training_fit",
        "    for e in range(self.epoch + 1, last + 1):",
        "    for e in range(1, epochs + 1):",
    ),
    # the epoch line counts to this call's epochs, not to the epoch the run ends at: epoch 4/3.
    (
        "training_fit",
        "print(self.epoch_line(e, last, sum(durations) / len(durations) * (last - e)))",
        "print(self.epoch_line(e, epochs, sum(durations) / len(durations) * (last - e)))",
    ),
    # a second fit() keeps the stop flag of the first one.
    (
        "training_fit",
        "    self.stop_training = False\n    for cb in callbacks:",
        "    for cb in callbacks:",
    ),
]
