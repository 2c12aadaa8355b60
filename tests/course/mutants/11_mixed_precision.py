"""Seeded mutants of 11_mixed_precision: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # float64 inputs cast down to float16 (a hidden test catches it).
    (
        "amp_policy",
        "is_floating(t.dtype) and t.dtype != float64 and t.dtype != low",
        "is_floating(t.dtype) and t.dtype != low",
    ),
    # integer inputs cast too: class indices become float16.
    (
        "amp_policy",
        "is_floating(t.dtype) and t.dtype != float64 and t.dtype != low",
        "t.dtype != float64 and t.dtype != low",
    ),
    # 'float32' casts every float that is not float32, float64 included (a hidden test catches it).
    (
        "amp_policy",
        "wanted = [is_floating(t.dtype) and t.dtype.itemsize < 4 for t in inputs]",
        "wanted = [is_floating(t.dtype) and t.dtype != float32 for t in inputs]",
    ),
    # every result of a low op cast down, float64 included (a hidden test catches it).
    (
        "amp_policy",
        'if data.dtype == float32 and self.table.get(op) == "low":',
        'if self.table.get(op) == "low":',
    ),
    # the output never cast: a low op hands on float32 after all.
    ("amp_policy", "return data.astype(self.dtype)", "return data"),
    # 'float32' casts float16 up but leaves bfloat16 as it is (a hidden test catches it).
    (
        "amp_policy",
        "wanted = [is_floating(t.dtype) and t.dtype.itemsize < 4 for t in inputs]",
        "wanted = [t.dtype == float16 for t in inputs]",
    ),
    # leaving a context switches autocast off, even inside an outer one (a hidden test catches it).
    (
        "amp_autocast",
        "AutocastMode.policy = self._previous.pop()",
        "self._previous.pop()\n        AutocastMode.policy = None",
    ),
    # enabled=False ignored: the policy is put in force anyway (a hidden test catches it).
    (
        "amp_autocast",
        "self._policy = AutocastPolicy(self.dtype) if self.enabled else None",
        "self._policy = AutocastPolicy(self.dtype)",
    ),
    # one remembered policy instead of a stack: the same object entered twice fails (a hidden test catches it).
    (
        "amp_autocast",
        "self._previous.append(AutocastMode.policy)",
        "self._previous = [AutocastMode.policy]",
    ),
    # the decorator without functools.wraps: the function loses its name.
    ("amp_autocast", "        @functools.wraps(fn)\n        def wrapper", "        def wrapper"),
    # the decorator forgets enabled=False: the function runs under autocast anyway (a hidden test catches it).
    (
        "amp_autocast",
        "with autocast(self.dtype, self.enabled):",
        "with autocast(self.dtype):",
    ),
    # only strings accepted: autocast(np.float16) is refused (a hidden test catches it).
    (
        "amp_autocast",
        "name = dtype if isinstance(dtype, str) else np.dtype(dtype).name",
        "name = dtype",
    ),
    # unscaling multiplies by the scale instead of dividing by it.
    (
        "amp_grad_scaler_unscale",
        "xp.multiply(g, g.dtype.type(inv_scale), out=g)",
        "xp.multiply(g, g.dtype.type(1 / inv_scale), out=g)",
    ),
    # the flag read into a Python bool: one device-to-host sync per call.
    (
        "amp_grad_scaler_unscale",
        "return np.zeros((), bool) if found is None else found",
        "return bool(found)",
    ),
    # only the last gradient decides: an inf in an earlier one is forgotten (a hidden test catches it).
    (
        "amp_grad_scaler_unscale",
        "xp.logical_or(found, ~xp.isfinite(g).all(), out=found)",
        "found = ~xp.isfinite(g).all()",
    ),
    # inf found, NaN not (a hidden test catches it).
    (
        "amp_grad_scaler_unscale",
        "xp.logical_or(found, ~xp.isfinite(g).all(), out=found)",
        "xp.logical_or(found, xp.isinf(g).any(), out=found)",
    ),
    # the loop stops at the first inf/NaN: the gradients after it stay scaled (a hidden test catches it).
    (
        "amp_grad_scaler_unscale",
        "xp.logical_or(found, ~xp.isfinite(g).all(), out=found)",
        "xp.logical_or(found, ~xp.isfinite(g).all(), out=found)\n        if found:\n            break",
    ),
    # an overflow halves the scale but keeps counting towards growth.
    (
        "amp_grad_scaler_update",
        "        return scale * backoff_factor, 0\n",
        "        return scale * backoff_factor, growth_tracker\n",
    ),
    # growth one clean step late.
    (
        "amp_grad_scaler_update",
        "if growth_tracker == growth_interval:",
        "if growth_tracker > growth_interval:",
    ),
    # growth one clean step early (a hidden test catches it).
    (
        "amp_grad_scaler_update",
        "if growth_tracker == growth_interval:",
        "if growth_tracker + 1 >= growth_interval:",
    ),
    # the tracker not reset after growing: the next growth comes at once.
    (
        "amp_grad_scaler_update",
        "        return scale * growth_factor, 0\n",
        "        return scale * growth_factor, growth_tracker\n",
    ),
    # the back-off divides by the growth factor (the same only for the defaults; a hidden test catches it).
    (
        "amp_grad_scaler_update",
        "        return scale * backoff_factor, 0\n",
        "        return scale / growth_factor, 0\n",
    ),
]
