"""Seeded mutants of 02_autograd: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # unbroadcast averages the broadcast leading axes instead of summing them.
    (
        "autograd_unbroadcast",
        "grad = grad.sum(axis=tuple(range(lead)))",
        "grad = grad.mean(axis=tuple(range(lead)))",
    ),
    # a second backward overwrites .grad instead of accumulating into it.
    ("autograd_backward", "leaf.grad.data += g", "leaf.grad.data = g"),
    # a one-sided difference divided as if it were central.
    (
        "autograd_gradcheck",
        "numeric[idx] = (plus - minus) / (2 * eps)",
        "numeric[idx] = (plus - original) / eps",
    ),
    # leaving no_grad() always switches recording on, even when it was off before.
    (
        "autograd_grad_mode",
        "GradMode.enabled = self._previous.pop()",
        "self._previous.pop()\n        GradMode.enabled = True",
    ),
]
