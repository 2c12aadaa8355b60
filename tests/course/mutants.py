"""Seeded wrong implementations: each must lose points, or grading cannot tell right from wrong.

Per module (folder name), a list of `(exact text in the module source, wrong replacement)`.
Each pair is one mutant: applied alone to the reference notebook, it must match exactly once
(a mutant whose text no longer matches fails its test, so mutants cannot silently rot).
A module in modules/ without an entry here fails its grading proof: add one.
"""

MUTANTS: dict[str, list[tuple[str, str]]] = {
    # Only the hidden test catches this one: it proves hidden tests come back for grading.
    "00_demo": [("return np.maximum(x, 0)", "return np.maximum(x, -1)")],
    "01_tensor": [
        # d(a/b)/db = -a/b**2: the sign of the divisor's gradient flipped.
        ("return grad_a, -grad_a * out", "return grad_a, grad_a * out"),
        # NumPy's own promotion: float32 with int64 drifts to float64.
        ("    if is_floating(a):\n        return a\n    if is_floating(b):\n        return b\n", ""),
        # Python floats left as NumPy's float64.
        ("            array = array.astype(default_float)\n", "            pass\n"),
        # the node recorded even when no input needs a gradient.
        ("        if True in needs:", "        if needs:"),
        # repeated picks overwrite instead of adding up.
        ("            _scatter_add(full, self.index, grad)", "            full[self.index] = grad"),
        # ties at the maximum each take the whole gradient.
        ("return grad.reshape(out.shape) * winners / share", "return grad.reshape(out.shape) * winners"),
        # the textbook sigmoid, which overflows for large negative inputs.
        ("out = self.xp.where(a >= 0, 1 / (1 + e), e / (1 + e))", "out = 1 / (1 + self.xp.exp(-a))"),
    ],
    "02_autograd": [
        # unbroadcast averages the broadcast leading axes instead of summing them.
        ("grad = grad.sum(axis=tuple(range(lead)))", "grad = grad.mean(axis=tuple(range(lead)))"),
        # a second backward overwrites .grad instead of accumulating into it.
        ("leaf.grad.data += g", "leaf.grad.data = g"),
        # a one-sided difference divided as if it were central.
        ("numeric[idx] = (plus - minus) / (2 * eps)", "numeric[idx] = (plus - original) / eps"),
        # leaving no_grad() always switches recording on, even when it was off before.
        ("GradMode.enabled = self._previous.pop()", "self._previous.pop()\n        GradMode.enabled = True"),
    ],
    "05_data": [
        # every fork restarts from the parent's seed: forks are copies, not independent streams.
        ("child._start(self._sequence.spawn(1)[0])", "child._start(np.random.SeedSequence(self.seed))"),
        # NumPy's default normal draws: float64 sneaks into the data.
        ("draw = self._generator.standard_normal(size, dtype=np.float32)\n        return (draw * np.float32(std) + np.float32(mean)).astype(np.float32, copy=False)",
         "return self._generator.normal(mean, std, size)"),
        # the fractions' left-over samples all go to the last subset.
        ("counts[i % len(counts)] += 1", "counts[-1] += 1"),
        # Python floats collated as NumPy's float64.
        ("arrays = [_as_array(s) for s in samples]", "arrays = [np.asarray(s) for s in samples]"),
        # len() ignores drop_last.
        ("return n // self.batch_size if self.drop_last else -(-n // self.batch_size)", "return -(-n // self.batch_size)"),
        # the same shuffled order every epoch.
        ("order = self.rng.permutation(n) if self.shuffle", "order = Rng(self.rng.seed).permutation(n) if self.shuffle"),
        # the fast path forgets a Subset's rows and gathers from the start of the arrays.
        ("picked = indices if rows is None else rows[indices]", "picked = indices"),
        # a resumed loader starts the epoch over instead of skipping the batches already seen.
        ("start, self._skip = self._skip, 0", "start, self._skip = 0, 0"),
    ],
    "03_layers": [
        # BatchNorm's running variance left biased (PyTorch keeps the unbiased one).
        ("var.data * (n / (n - 1))", "var.data"),
        # log_softmax without subtracting the max: exp overflows for large logits.
        ("shifted = a - a.max(axis=axis, keepdims=True)", "shifted = a"),
        # dropout that is not inverted: the survivors are not scaled up.
        ("scale = mask.astype(x.dtype) * x.dtype.type(1 / keep)", "scale = mask.astype(x.dtype)"),
        # load_state_dict rebinds the detached view instead of writing into the parameter.
        ("target.data[...] = array", "target.data = array"),
        # Kaiming's uniform bound taken as the standard deviation (√3 too narrow).
        ("bound = math.sqrt(3.0) * std", "bound = std"),
        # tied weights listed (and so updated) twice.
        ("if t is None or id(t) in seen:", "if t is None:"),
        # exact GELU's derivative without the x·φ(x) term.
        ("return grad * (cdf + a * pdf)", "return grad * cdf"),
    ],
    "04_losses": [
        # ignored targets still count in the mean's denominator.
        ("w_y = valid.astype(logp.dtype) if w is None else w.data[safe] * valid",
         "w_y = logp.device.xp.ones(safe.shape, logp.dtype) if w is None else w.data[safe]"),
        # CTC may skip the blank between two equal labels, so `l l` reads as `l`.
        ("skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])", "skip[:, 2:] = ext[:, 2:] != blank"),
        # the textbook log(1 + exp(-x)), which overflows for logits of -1e4.
        ("positive = softplus(-input)", "positive = (1 + (-input).exp()).log()"),
        # CTC's occupancy without dividing by p_t(l'_s), counted twice in alpha · beta.
        ("gamma = xp.exp(alpha + beta - lp + safe_nll[None, :, None])",
         "gamma = xp.exp(alpha + beta + safe_nll[None, :, None])"),
        # smooth L1's quadratic branch not divided by beta.
        ("where(size < beta, 0.5 * d * d / beta, size - 0.5 * beta)", "where(size < beta, 0.5 * d * d, size - 0.5 * beta)"),
    ],
    "06_optimizers": [
        # frozen parameters with a stale gradient still get updated.
        ("                if not p.requires_grad or p.grad is None:", "                if p.grad is None:"),
        # Nesterov momentum forgotten: plain heavy-ball momentum instead.
        ('g = g + momentum * buf if group["nesterov"] else buf', "g = buf"),
        # Adam without the bias correction of the first moment.
        ("p -= (lr / bias1) * (m / denom)", "p -= lr * (m / denom)"),
        # AdamW's decay coupled to the gradient, as in Adam.
        ("p *= 1 - lr * decay", "g = g + decay * p"),
        # RAdam rectifies from the first step, however unreliable the variance estimate.
        ("        if rho_t > 5:\n", "        if rho_t > 0:\n"),
        # NAdam's look-ahead term uses this step's mu instead of the next one.
        ("p -= (lr * mu_next / (1 - product * mu_next)) * (m / denom)", "p -= (lr * mu / (1 - product * mu)) * (m / denom)"),
        # state_dict hands out the live state arrays, which the caller may then change.
        ("        return value.copy()\n", "        return value\n"),
        # the flat buffer is a copy: the model's parameters never see the steps.
        ("p.data = buffer[start:start + n].reshape(shape)", "p.data = buffer[start:start + n].reshape(shape).copy()"),
    ],
    "07_schedulers": [
        # phase 1 of one-cycle ends a step late (PyTorch's boundary is pct_start * total_steps - 1).
        ("(float(self.pct_start * self.total_steps) - 1, initial, self.max_lr)",
         "(float(self.pct_start * self.total_steps), initial, self.max_lr)"),
        # the wrapped schedule's clock does not restart after the warm-up.
        ("return self.scheduler.lr(t - self.warmup_steps)", "return self.scheduler.lr(t)"),
        # a milestone counted from the step after it.
        ("bisect.bisect_right(self.milestones, t)", "bisect.bisect_left(self.milestones, t)"),
        # triangular2 halves the amplitude already in the first cycle.
        ("amplitude = 1 / (2.0 ** (cycle - 1))", "amplitude = 1 / (2.0 ** cycle)"),
        # the plateau cuts after `patience` bad epochs instead of more than `patience`.
        ("if self.num_bad_epochs > self.patience:", "if self.num_bad_epochs >= self.patience:"),
        # bad epochs during the cooldown still count (a hidden test catches it).
        ("self.cooldown_counter -= 1\n            self.num_bad_epochs = 0", "self.cooldown_counter -= 1"),
        # Only a hidden test catches this one: the cosine clamped at total instead of going on like PyTorch's.
        ("math.cos(math.pi * t / self.total)", "math.cos(math.pi * min(t, self.total) / self.total)"),
    ],
    "08_training": [
        # small gradients scaled *up* to max_norm: the factor is not capped at 1.
        ("factor = xp.minimum(max_norm / (norm + 1e-6), 1.0)", "factor = max_norm / (norm + 1e-6)"),
        # every micro-batch weighted 1/k: wrong when the batches of a group differ in size.
        ("trainer.backward(loss if n == group_samples else loss * (n / group_samples))",
         "trainer.backward(loss * (1 / len(group)))"),
        # the slope from the end points instead of least squares (a hidden test catches it).
        ("return float((i * (y - y.mean())).sum() / (i * i).sum())", "return float((y[-1] - y[0]) / (len(y) - 1))"),
        # evaluation in training mode: dropout stays on (a hidden test catches it).
        ("    trainer.model.eval()\n    total = correct = None", "    total = correct = None"),
        # BestModel keeps views of the live weights, which go on changing.
        ("self.state = {k: Tensor._wrap(v.data.copy(), v.device) for k, v in trainer.model.state_dict().items()}",
         "self.state = trainer.model.state_dict()"),
    ],
    "10_convolutions": [
        # col2im overwrites where windows overlap instead of adding their contributions.
        ("j * dw + sw * (ow - 1) + 1:sw] += windows[..., i, j]", "j * dw + sw * (ow - 1) + 1:sw] = windows[..., i, j]"),
        # the stride forgotten in backward: the column gradient folded back as if stride were 1.
        ("grad_x = _fold(win, self.x_shape, *self.geometry)",
         "grad_x = _fold(win, self.x_shape, self.geometry[0], (1, 1), *self.geometry[2:])"),
        # BatchNorm2d reshapes NCHW as if it were channels-last: statistics over mixed-up channels.
        ("return super().forward(x.reshape(n, c, h * w)).reshape(n, c, h, w)",
         "return super().forward(x.reshape(n, h * w, c).transpose(1, 2)).transpose(1, 2).reshape(n, c, h, w)"),
        # max pooling sends the gradient to every element of the window, not to its maximum.
        ("dx[:, :, rows, cols] += xp.where(first, grad, zero)", "dx[:, :, rows, cols] += grad"),
        # ties not broken: every maximum of a window gets the gradient (a hidden test catches it).
        ("first = (win[..., i, j] == out) & ~taken", "first = win[..., i, j] == out"),
        # the running maximum starts from zero, not from the first offset: all-negative windows pool to 0.
        ("out = win[..., 0, 0].copy()", "out = xp.zeros_like(win[..., 0, 0])"),
        # count_include_pad=False ignored (a hidden test catches it).
        ("if count_include_pad or padding == (0, 0):", "if True:"),
    ],
    "09_checkpoints": [
        # the checksum is written but never checked: a flipped bit loads silently (a hidden test catches it).
        ("    if verify and CHECKSUM_KEY in metadata:\n        digest", "    if False:\n        digest"),
        # no fsync before the rename: after a power cut the new name may point to an empty file.
        ("            os.fsync(f.fileno())\n", ""),
        # a failed write leaves its temporary file behind.
        ("            os.unlink(temp)", "            pass"),
        # LoadReport with skipped and missing swapped (a hidden test catches it).
        ("LoadReport(tuple(loaded), tuple(skipped), tuple(missing))", "LoadReport(tuple(loaded), tuple(missing), tuple(skipped))"),
        # loading rebinds the parameter's array instead of writing into it: optimizers lose their views.
        ("target.data[...] = device.xp.asarray(values).astype(target.dtype, copy=False)",
         "target.data = device.xp.asarray(values).astype(target.dtype)"),
        # tinyflo's generator not restored: dropout draws other masks after a resume.
        ("    _Generators.numpy = generator\n", ""),
        # a second background save does not wait for the first (a hidden test catches it).
        ("        self.wait()\n        self._thread = threading.Thread", "        self._thread = threading.Thread"),
        # the job runs on the caller's thread: training waits for every save (a hidden test catches it).
        ("        self._thread = threading.Thread(target=self._run, args=(fn,), name=\"tinyflo-checkpoint\")\n"
         "        self._thread.start()\n", "        self._run(fn)\n"),
        # the folder is fsynced before the rename, not after: the rename itself may be lost (a hidden test catches it).
        ("        os.replace(temp, path)\n    except BaseException:\n        with contextlib.suppress(FileNotFoundError):\n"
         "            os.unlink(temp)\n        raise\n    _fsync_directory(path.parent)\n",
         "        _fsync_directory(path.parent)\n        os.replace(temp, path)\n    except BaseException:\n"
         "        with contextlib.suppress(FileNotFoundError):\n            os.unlink(temp)\n        raise\n"),
    ],
    "12_distributed": [
        # the all-gather adds the finished chunks instead of copying them: every rank ends with too much.
        ("                    target[...] = message\n", "                    target += message\n"),
        # the left-over samples go to the last ranks instead of the first.
        ("stop = start + base + (1 if r < extra else 0)", "stop = start + base + (1 if r >= world_size - extra else 0)"),
        # local SGD sums the replicas instead of averaging them: the weights are never applied.
        ("        flat *= flat.dtype.type(weight)\n", ""),
        # a replica without a gradient is skipped in the buffer, shifting every later gradient.
        ("reshape(-1)\n            offset += p.data.size\n        buffers.append(flat)",
         "reshape(-1)\n                offset += p.data.size\n        buffers.append(flat)"),
    ],
    "11_mixed_precision": [
        # an overflow halves the scale but keeps counting towards growth.
        ("        return scale * backoff_factor, 0\n", "        return scale * backoff_factor, growth_tracker\n"),
        # unscaling multiplies by the scale instead of dividing by it.
        ("xp.multiply(g, g.dtype.type(inv_scale), out=g)", "xp.multiply(g, g.dtype.type(1 / inv_scale), out=g)"),
        # float64 inputs cast down to float16 (a hidden test catches it).
        ("is_floating(t.dtype) and t.dtype != float64 and t.dtype != low", "is_floating(t.dtype) and t.dtype != low"),
    ],
}
