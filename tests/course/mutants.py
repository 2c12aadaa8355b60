"""Seeded wrong implementations: each must lose points, or grading cannot tell right from wrong.

Per module (folder name), a list of `(exact text in the module source, wrong replacement)`.
Each pair is one mutant: applied alone to the reference notebook, it must match exactly once
(a mutant whose text no longer matches fails its test, so mutants cannot silently rot).
A module in modules/ without an entry here fails its grading proof: add one.
"""

MUTANTS: dict[str, list[tuple[str, str]]] = {
    # Only the hidden test catches this one: it proves hidden tests come back for grading.
    "00_demo": [("return np.maximum(x, 0)", "return np.maximum(x, -1)")],
    # d(a/b)/db = -a/b**2: the sign of the divisor's gradient flipped.
    "01_tensor": [("return grad_a, -grad_a * out", "return grad_a, grad_a * out")],
    "02_autograd": [
        # unbroadcast averages the broadcast leading axes instead of summing them.
        ("grad = grad.sum(axis=tuple(range(lead)))", "grad = grad.mean(axis=tuple(range(lead)))"),
        # a second backward overwrites .grad instead of accumulating into it.
        ("leaf.grad.data += g", "leaf.grad.data = g"),
    ],
}
