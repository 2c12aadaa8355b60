"""Seeded mutants of 04_losses: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # the reduction hard-coded to the mean.
    (
        "losses_regression",
        'return _reduce(d * d, reduction, "mse_loss")',
        'return _reduce(d * d, "mean", "mse_loss")',
    ),
    # the mean taken per sample (over the first axis) instead of over every element.
    (
        "losses_regression",
        'return _reduce(d * d, reduction, "mse_loss")',
        'return (d * d).sum() / d.shape[0] if reduction == "mean" else _reduce(d * d, reduction, "mse_loss")',
    ),
    # l1 without the absolute value: errors of opposite sign cancel.
    (
        "losses_regression",
        'return _reduce((input - target).abs(), reduction, "l1_loss")',
        'return _reduce(input - target, reduction, "l1_loss")',
    ),
    # smooth L1's quadratic branch not divided by beta.
    (
        "losses_huber",
        "where(size < beta, 0.5 * d * d / beta, size - 0.5 * beta)",
        "where(size < beta, 0.5 * d * d, size - 0.5 * beta)",
    ),
    # Huber's linear branch not scaled by delta.
    (
        "losses_huber",
        "where(size <= delta, 0.5 * d * d, delta * (size - 0.5 * delta))",
        "where(size <= delta, 0.5 * d * d, size - 0.5 * delta)",
    ),
    # smooth L1 and Huber confused: Huber's quadratic branch divided by delta.
    (
        "losses_huber",
        "where(size <= delta, 0.5 * d * d, delta",
        "where(size <= delta, 0.5 * d * d / delta, delta",
    ),
    # beta = 0 not special-cased: ½d²/0 in the discarded branch poisons the gradient.
    (
        "losses_huber",
        '    if beta == 0:\n        return _reduce(size, reduction, "smooth_l1_loss")\n',
        "",
    ),
    # the branch chosen on d instead of |d|: large negative errors stay quadratic.
    (
        "losses_huber",
        "loss = where(size < beta, 0.5 * d * d / beta",
        "loss = where(d < beta, 0.5 * d * d / beta",
    ),
    # ignored targets still count in the mean's denominator.
    (
        "losses_nll",
        "w_y = valid.astype(logp.dtype) if w is None else w.data[safe] * valid",
        "w_y = logp.device.xp.ones(safe.shape, logp.dtype) if w is None else w.data[safe]",
    ),
    # with class weights, ignored targets are not masked.
    (
        "losses_nll",
        "w_y = valid.astype(logp.dtype) if w is None else w.data[safe] * valid",
        "w_y = valid.astype(logp.dtype) if w is None else w.data[safe]",
    ),
    # the plain mean over elements instead of the weighted mean.
    (
        "losses_nll",
        '    loss, total_weight = _nll_parts(input, valid, safe, w)\n    if reduction == "mean":\n'
        "        return loss.sum() / total_weight",
        '    loss, total_weight = _nll_parts(input, valid, safe, w)\n    if reduction == "mean":\n'
        "        return loss.mean()",
    ),
    # no floor under the total weight: a batch of ignored targets gives 0/0.
    (
        "losses_nll",
        "return -picked * w_y, w_y.sum().clip(min=float(np.finfo(logp.dtype).tiny))",
        "return -picked * w_y, w_y.sum()",
    ),
    # the picked losses left flat instead of in the target's shape.
    (
        "losses_nll",
        "picked = rows[xp.arange(flat.shape[0]), flat].reshape(safe.shape)",
        "picked = rows[xp.arange(flat.shape[0]), flat]",
    ),
    # log-sum-exp without subtracting the max: exp overflows for large logits.
    (
        "losses_cross_entropy",
        "logp = log_softmax(input, axis=class_axis)",
        "logp = input - input.exp().sum(axis=class_axis, keepdims=True).log()",
    ),
    # the smoothing term not divided by the number of classes.
    (
        "losses_cross_entropy",
        "loss = (1 - label_smoothing) * loss + (label_smoothing / classes) * uniform",
        "loss = (1 - label_smoothing) * loss + label_smoothing * uniform",
    ),
    # class weights left out of the smoothing and soft-target terms.
    (
        "losses_cross_entropy",
        "weighted = logp if w is None else logp * _along_classes(w, input)",
        "weighted = logp",
    ),
    # soft targets scaled by 1 - ε but not mixed with ε/C.
    (
        "losses_cross_entropy",
        "target = target * (1 - label_smoothing) + label_smoothing / classes",
        "target = target * (1 - label_smoothing)",
    ),
    # the smoothing term of ignored targets still counts.
    (
        "losses_cross_entropy",
        "uniform = -weighted.sum(axis=class_axis) * Tensor._wrap(valid.astype(input.dtype), input.device)",
        "uniform = -weighted.sum(axis=class_axis)",
    ),
    # the backward without a floor under p(1 - p): infinite at p = 0 or 1.
    (
        "losses_binary",
        "denominator = self.xp.maximum(p * (1 - p), p.dtype.type(floor))",
        "denominator = p * (1 - p)",
    ),
    # the floor 1e-12 alone, which is 0 in float16: the gradient at p = 0 or 1 is infinite there.
    (
        "losses_binary",
        "floor = max(1e-12, float(np.finfo(p.dtype).tiny))",
        "floor = 1e-12",
    ),
    # the target's gradient with the wrong sign.
    ("losses_binary", "grad_t = grad * (log_q - log_p)", "grad_t = grad * (log_p - log_q)"),
    # log p not clamped at -100: p = 0 with t = 1 gives an infinite loss.
    ("losses_binary", "log_p = xp.maximum(xp.log(p), floor)", "log_p = xp.log(p)"),
    # the textbook log(1 + exp(-x)), which overflows for logits of -1e4.
    ("losses_bce_logits", "positive = softplus(-input)", "positive = (1 + (-input).exp()).log()"),
    # pos_weight multiplies the whole positive term, whatever the target.
    (
        "losses_bce_logits",
        "positive = positive * (1 + (pos_weight - 1) * target)",
        "positive = positive * pos_weight",
    ),
    # t and 1 - t swapped in the linear term.
    (
        "losses_bce_logits",
        "loss = (1 - target) * input + positive",
        "loss = target * input + positive",
    ),
    # −log σ(x) taken literally: log 0 for logits of -1e4.
    ("losses_bce_logits", "positive = softplus(-input)", "positive = -(input.sigmoid().log())"),
    # p_t taken as p: the factor ignores the target.
    ("losses_focal", "p_t = p * targets + (1 - p) * (1 - targets)", "p_t = p"),
    # α and 1 - α swapped between positives and negatives.
    (
        "losses_focal",
        "loss = (alpha * targets + (1 - alpha) * (1 - targets)) * loss",
        "loss = (alpha * (1 - targets) + (1 - alpha) * targets) * loss",
    ),
    # a negative alpha does not switch the weighting off.
    ("losses_focal", "if alpha >= 0:", "if alpha is not None:"),
    # the factor p_t^γ instead of (1 - p_t)^γ: easy examples weigh most.
    ("losses_focal", "loss = loss * (1 - p_t) ** gamma", "loss = loss * p_t**gamma"),
    # batchmean divides by every element, like mean.
    (
        "losses_divergence",
        "return loss.sum() / (input.shape[0] if input.ndim else 1)",
        "return loss.mean()",
    ),
    # the log taken of the raw target: NaN in the gradient where the target is 0.
    ("losses_divergence", "safe = where(positive, t, 1.0)", "safe = t"),
    # log_target=True without the exp: the log-target used as a probability.
    (
        "losses_divergence",
        "loss = target.exp() * (target - input)",
        "loss = target * (target - input)",
    ),
    # the definition written out: 0 · log 0 is NaN.
    (
        "losses_divergence",
        "loss = _xlogx(target) - target * input",
        "loss = target * (target.log() - input)",
    ),
    # log_input=False without eps: log 0 for a rate of 0.
    (
        "losses_poisson",
        "loss = input - target * (input + eps).log()",
        "loss = input - target * input.log()",
    ),
    # Stirling's term added for targets of 1 too.
    ("losses_poisson", "above = target > 1", "above = target > 0"),
    # Stirling without its ½ log(2π t).
    (
        "losses_poisson",
        "stirling = safe * safe.log() - safe + 0.5 * (safe * (2 * math.pi)).log()",
        "stirling = safe * safe.log() - safe",
    ),
    # log_input=True with the target multiplying e^input.
    (
        "losses_poisson",
        "loss = input.exp() - target * input",
        "loss = input.exp() - target * input.exp()",
    ),
    # eps added after the absolute value instead of to the difference.
    (
        "losses_triplet",
        "return ((x1 - x2 + eps).abs() ** p).sum(axis=-1) ** (1 / p)",
        "return (((x1 - x2).abs() + eps) ** p).sum(axis=-1) ** (1 / p)",
    ),
    # the p-th root forgotten.
    (
        "losses_triplet",
        "return ((x1 - x2 + eps).abs() ** p).sum(axis=-1) ** (1 / p)",
        "return ((x1 - x2 + eps).abs() ** p).sum(axis=-1)",
    ),
    # swap keeps the larger negative distance, the easier one.
    (
        "losses_triplet",
        "d_neg = where(d_swap < d_neg, d_swap, d_neg)",
        "d_neg = where(d_swap > d_neg, d_swap, d_neg)",
    ),
    # the positive and negative distances swapped.
    (
        "losses_triplet",
        "return _reduce((d_pos - d_neg + margin).relu()",
        "return _reduce((d_neg - d_pos + margin).relu()",
    ),
    # no ε in the norms: a zero vector gives 0/0.
    (
        "losses_cosine",
        "norms = ((input1 * input1).sum(axis=-1) + _COSINE_EPS) * ((input2 * input2).sum(axis=-1) + _COSINE_EPS)",
        "norms = (input1 * input1).sum(axis=-1) * (input2 * input2).sum(axis=-1)",
    ),
    # the margin subtracted the wrong way round.
    (
        "losses_cosine",
        "where(target == -1, (cos - margin).relu(), 0.0)",
        "where(target == -1, (margin - cos).relu(), 0.0)",
    ),
    # no hinge on the negative pairs: a negative cosine lowers the loss.
    (
        "losses_cosine",
        "where(target == -1, (cos - margin).relu(), 0.0)",
        "where(target == -1, cos - margin, 0.0)",
    ),
    # the product of the squared norms used without its square root.
    ("losses_cosine", "cos = dot / norms.sqrt()", "cos = dot / norms"),
    # the hinge of x - margin instead of margin - x.
    (
        "losses_margin",
        "where(target != 1, (margin - input).relu(), 0.0)",
        "where(target != 1, (input - margin).relu(), 0.0)",
    ),
    # ranking with the sign of the target flipped.
    (
        "losses_margin",
        "(-target * (input1 - input2) + margin).relu()",
        "(target * (input1 - input2) + margin).relu()",
    ),
    # the ranking margin subtracted.
    (
        "losses_margin",
        "(-target * (input1 - input2) + margin).relu()",
        "(-target * (input1 - input2) - margin).relu()",
    ),
    # hinge_embedding_loss drops the y = 1 branch: positive pairs cost nothing.
    (
        "losses_margin",
        "loss = where(target != 1, (margin - input).relu(), 0.0) + where(target != -1, input, 0.0)",
        "loss = where(target != 1, (margin - input).relu(), 0.0)",
    ),
    # CTC may skip the blank between two equal labels, so `l l` reads as `l`.
    (
        "losses_ctc",
        "skip[:, 2:] = (ext[:, 2:] != blank) & (ext[:, 2:] != ext[:, :-2])",
        "skip[:, 2:] = ext[:, 2:] != blank",
    ),
    # paths may only start with a blank, not with the first label.
    ("losses_ctc", "alpha[0, :, :2] = lp[0, :, :2]", "alpha[0, :, :1] = lp[0, :, :1]"),
    # every sample read at the last step of the batch, not at its own.
    ("losses_ctc", "last = alpha[input_lengths - 1, batch]", "last = alpha[-1, batch]"),
    # the best path (Viterbi) instead of the sum over paths.
    (
        "losses_ctc",
        "paths = xp.logaddexp(prev, _shift(prev, 1, neg_inf))",
        "paths = xp.maximum(prev, _shift(prev, 1, neg_inf))",
    ),
    # an empty target also reads position -1, which wraps around.
    (
        "losses_ctc",
        "before_end = xp.where(target_lengths > 0, last[batch, end - 1], neg_inf)",
        "before_end = last[batch, end - 1]",
    ),
    # CTC's occupancy without dividing by p_t(l'_s), counted twice in alpha · beta.
    (
        "losses_ctc_backward",
        "return xp.exp(alpha + beta - lp + safe_nll[None, :, None])",
        "return xp.exp(alpha + beta + safe_nll[None, :, None])",
    ),
    # beta starts only at the final blank, not at the last label too.
    (
        "losses_ctc_backward",
        "finals = (positions == end[:, None]) | (positions == end[:, None] - 1)",
        "finals = positions == end[:, None]",
    ),
    # the forward skip mask reused backwards: skips allowed out of s instead of into s + 2.
    ("losses_ctc_backward", "skip_into = _shift(skip, -2, False)", "skip_into = skip"),
    # beta moves the wrong way: from s to s - 1 instead of s + 1.
    (
        "losses_ctc_backward",
        "paths = xp.logaddexp(following, _shift(following, -1, neg_inf))",
        "paths = xp.logaddexp(following, _shift(following, 1, neg_inf))",
    ),
]
