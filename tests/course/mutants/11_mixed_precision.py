"""Seeded mutants of 11_mixed_precision: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # an overflow halves the scale but keeps counting towards growth.
    ('amp_grad_scaler_update', "        return scale * backoff_factor, 0\n", "        return scale * backoff_factor, growth_tracker\n"),
    # unscaling multiplies by the scale instead of dividing by it.
    ('amp_grad_scaler_unscale', "xp.multiply(g, g.dtype.type(inv_scale), out=g)", "xp.multiply(g, g.dtype.type(1 / inv_scale), out=g)"),
    # float64 inputs cast down to float16 (a hidden test catches it).
    ('amp_autocast', "is_floating(t.dtype) and t.dtype != float64 and t.dtype != low", "is_floating(t.dtype) and t.dtype != low"),
]
