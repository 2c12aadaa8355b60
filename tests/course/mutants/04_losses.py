"""Seeded mutants of 04_losses: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # ignored targets still count in the mean's denominator.
    ('losses_cross_entropy', "w_y = valid.astype(logp.dtype) if w is None else w.data[safe] * valid",
      "w_y = logp.device.xp.ones(safe.shape, logp.dtype) if w is None else w.data[safe]"),
    # CTC may skip the blank between two equal labels, so `l l` reads as `l`.
    ('losses_ctc', "skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])", "skip[:, 2:] = ext[:, 2:] != blank"),
    # the textbook log(1 + exp(-x)), which overflows for logits of -1e4.
    ('losses_binary', "positive = softplus(-input)", "positive = (1 + (-input).exp()).log()"),
    # CTC's occupancy without dividing by p_t(l'_s), counted twice in alpha · beta.
    ('losses_ctc', "gamma = xp.exp(alpha + beta - lp + safe_nll[None, :, None])",
      "gamma = xp.exp(alpha + beta + safe_nll[None, :, None])"),
    # smooth L1's quadratic branch not divided by beta.
    ('losses_regression', "where(size < beta, 0.5 * d * d / beta, size - 0.5 * beta)", "where(size < beta, 0.5 * d * d, size - 0.5 * beta)"),
]
