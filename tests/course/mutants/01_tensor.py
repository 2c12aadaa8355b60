"""Seeded mutants of 01_tensor: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # d(a/b)/db = -a/b**2: the sign of the divisor's gradient flipped.
    ("tensor_arithmetic", "return grad_a, -grad_a * out", "return grad_a, grad_a * out"),
    # NumPy's own promotion: float32 with int64 drifts to float64.
    (
        "tensor_dtypes",
        "    if is_floating(a):\n        return a\n    if is_floating(b):\n        return b\n",
        "",
    ),
    # Python floats left as NumPy's float64.
    ("tensor_creation", "            array = array.astype(default_float)\n", "            pass\n"),
    # the node recorded even when no input needs a gradient.
    ("tensor_function", "        if True in needs:", "        if needs:"),
    # repeated picks overwrite instead of adding up.
    (
        "tensor_shapes",
        "            _scatter_add(full, self.index, grad)",
        "            full[self.index] = grad",
    ),
    # ties at the maximum each take the whole gradient.
    (
        "tensor_reductions",
        "return grad.reshape(out.shape) * winners / share",
        "return grad.reshape(out.shape) * winners",
    ),
    # the textbook sigmoid, which overflows for large negative inputs.
    (
        "tensor_elementwise",
        "out = self.xp.where(a >= 0, 1 / (1 + e), e / (1 + e))",
        "out = 1 / (1 + self.xp.exp(-a))",
    ),
]
