"""Seeded mutants of 06_optimizers: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # frozen parameters with a stale gradient still get updated.
    ('optim_optimizer', "                if not p.requires_grad or p.grad is None:", "                if p.grad is None:"),
    # Nesterov momentum forgotten: plain heavy-ball momentum instead.
    ('optim_sgd', 'g = g + momentum * buf if group["nesterov"] else buf', "g = buf"),
    # Adam without the bias correction of the first moment.
    ('optim_adam', "p -= (lr / bias1) * (m / denom)", "p -= lr * (m / denom)"),
    # AdamW's decay coupled to the gradient, as in Adam.
    ('optim_adam', "p *= 1 - lr * decay", "g = g + decay * p"),
    # RAdam rectifies from the first step, however unreliable the variance estimate.
    ('optim_radam', "        if rho_t > 5:\n", "        if rho_t > 0:\n"),
    # NAdam's look-ahead term uses this step's mu instead of the next one.
    ('optim_nadam', "p -= (lr * mu_next / (1 - product * mu_next)) * (m / denom)", "p -= (lr * mu / (1 - product * mu)) * (m / denom)"),
    # state_dict hands out the live state arrays, which the caller may then change.
    ('optim_state_dict', "        return value.copy()\n", "        return value\n"),
    # the flat buffer is a copy: the model's parameters never see the steps.
    ('optim_flat', "p.data = buffer[start:start + n].reshape(shape)", "p.data = buffer[start:start + n].reshape(shape).copy()"),
]
