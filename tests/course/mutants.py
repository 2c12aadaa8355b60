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
}
