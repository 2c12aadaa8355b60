"""Seeded mutants of 06_optimizers: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # frozen parameters with a stale gradient still get updated.
    (
        "optim_optimizer",
        "                if not p.requires_grad or p.grad is None:",
        "                if p.grad is None:",
    ),
    # the step count is set instead of counted: every step looks like the first.
    (
        "optim_optimizer",
        '                state["step"] += 1\n                self._update(',
        '                state["step"] = 1\n                self._update(',
    ),
    # set_lr changes only the first group.
    (
        "optim_optimizer",
        '        for group in self.param_groups:\n            group["lr"] = float(lr)',
        '        self.param_groups[0]["lr"] = float(lr)',
    ),
    # the defaults overwrite what a group sets for itself.
    (
        "optim_optimizer",
        "            group.setdefault(key, value)",
        "            group[key] = value",
    ),
    # Nesterov momentum forgotten: plain heavy-ball momentum instead.
    ("optim_sgd", 'g = g + momentum * buf if group["nesterov"] else buf', "g = buf"),
    # the first momentum buffer is dampened too (PyTorch starts it at the gradient itself).
    (
        "optim_sgd",
        "                buf[...] = g\n",
        "                buf[...] = (1 - dampening) * g\n",
    ),
    # weight decay added into the user's gradient array.
    (
        "optim_sgd",
        "        if decay != 0:\n            g = g + decay * p\n        if momentum != 0:",
        "        if decay != 0:\n            g += decay * p\n        if momentum != 0:",
    ),
    # dampening applied as the weight of the new gradient instead of one minus it.
    (
        "optim_sgd",
        "                buf += g if dampening == 0 else (1 - dampening) * g",
        "                buf += g if dampening == 0 else dampening * g",
    ),
    # Adam without the bias correction of the first moment.
    ("optim_adam", "        tmp *= lr / bias1\n", "        tmp *= lr\n"),
    # AdamW's decay coupled to the gradient, as in Adam.
    ("optim_adam", "                p *= 1 - lr * decay\n", "                g = g + decay * p\n"),
    # eps added before dividing by sqrt(1 - beta2^t), not after.
    (
        "optim_adam",
        "        tmp /= math.sqrt(bias2)\n        tmp += eps\n",
        "        tmp += eps\n        tmp /= math.sqrt(bias2)\n",
    ),
    # AMSGrad's running maximum is never stored: it is plain Adam.
    (
        "optim_adam",
        'v = np.maximum(state["max_exp_avg_sq"], v, out=state["max_exp_avg_sq"])',
        'v = np.maximum(state["max_exp_avg_sq"], v)',
    ),
    # Adam's weight decay written into the user's gradient.
    (
        "optim_adam",
        "np.multiply(p, decay, out=tmp), out=self._spare(p, 1))",
        "np.multiply(p, decay, out=tmp), out=g)",
    ),
    # the plain form: a temporary array per step for (1 - beta1) * g.
    (
        "optim_adam",
        "        m += np.multiply(g, 1 - beta1, out=tmp)\n",
        "        m += (1 - beta1) * g\n",
    ),
    # centered RMSprop forgets to subtract the squared mean gradient.
    (
        "optim_rmsprop",
        "            avg = xp.sqrt(square_avg - grad_avg * grad_avg)",
        "            avg = xp.sqrt(square_avg)",
    ),
    # eps under the square root instead of added to it.
    (
        "optim_rmsprop",
        "            avg = xp.sqrt(square_avg)\n        avg += eps\n",
        "            avg = xp.sqrt(square_avg + eps)\n",
    ),
    # the momentum buffer is applied without the learning rate.
    ("optim_rmsprop", "            p -= lr * buf\n", "            p -= buf\n"),
    # alpha and 1 - alpha swapped in the running average.
    (
        "optim_rmsprop",
        "        square_avg += (1 - alpha) * (g * g)",
        "        square_avg += alpha * (g * g)",
    ),
    # lr decay counted from step 1 instead of step 0 (off by one).
    (
        "optim_adagrad",
        '(1 + (state["step"] - 1) * group["lr_decay"])',
        '(1 + state["step"] * group["lr_decay"])',
    ),
    # the sum of squares is replaced each step instead of accumulated.
    ("optim_adagrad", "        total += g * g\n", "        total[...] = g * g\n"),
    # eps under the square root instead of added to it.
    (
        "optim_adagrad",
        '        std = xp.sqrt(total)\n        std += group["eps"]\n',
        '        std = xp.sqrt(total + group["eps"])\n',
    ),
    # weight decay with the wrong sign.
    (
        "optim_adagrad",
        '            g = g + group["weight_decay"] * p',
        '            g = g - group["weight_decay"] * p',
    ),
    # RAdam rectifies from the first step, however unreliable the variance estimate.
    ("optim_radam", "        if rho_t > 5:\n", "        if rho_t > 0:\n"),
    # the momentum steps without the bias correction.
    ("optim_radam", "            p -= (lr / bias1) * m\n", "            p -= lr * m\n"),
    # the rectification term with rho_t where rho_inf belongs.
    ("optim_radam", "(rho_t - 4) * (rho_t - 2) * rho_inf /", "(rho_t - 4) * (rho_t - 2) * rho_t /"),
    # eps added after the bias correction, as in Adam.
    (
        "optim_radam",
        "            denom = xp.sqrt(v)\n            denom += eps\n            p -= (lr * rect * math.sqrt(bias2) / bias1) * (m / denom)",
        "            denom = xp.sqrt(v / bias2)\n            denom += eps\n            p -= (lr * rect / bias1) * (m / denom)",
    ),
    # NAdam's look-ahead term uses this step's mu instead of the next one.
    (
        "optim_nadam",
        "p -= (lr * mu_next / (1 - product * mu_next)) * (m / denom)",
        "p -= (lr * mu / (1 - product * mu)) * (m / denom)",
    ),
    # the product of the mu's is not kept: only this step's mu.
    ("optim_nadam", '        state["mu_product"] *= mu\n', '        state["mu_product"] = mu\n'),
    # the second moment without its bias correction.
    (
        "optim_nadam",
        "        denom = xp.sqrt(v / (1 - beta2**t))\n",
        "        denom = xp.sqrt(v)\n",
    ),
    # state_dict hands out the live state arrays, which the caller may then change.
    (
        "optim_state_dict",
        "                state[index] = {k: _host(v) for k, v in opt.state[p].items()}",
        "                state[index] = dict(opt.state[p])",
    ),
    # parameters numbered from 0 again in every group.
    (
        "optim_state_dict",
        "    index = 0\n    for group in opt.param_groups:\n        numbers = []\n",
        "    for group in opt.param_groups:\n        index = 0\n        numbers = []\n",
    ),
    # every parameter is assumed to have state, even one never updated.
    (
        "optim_state_dict",
        "            if p in opt.state:\n                state[index] =",
        "            if True:\n                state[index] =",
    ),
    # the loaded hyper-parameters never replace the optimizer's own.
    (
        "optim_load_state_dict",
        '            if key not in ("params", "flat"):\n                mine[key]',
        "            if key not in mine:\n                mine[key]",
    ),
    # the given arrays are kept, not copied into the state: training changes the caller's dict.
    (
        "optim_load_state_dict",
        "                    state[key][...] = p.device.xp.asarray(value, dtype=p.dtype)",
        "                    state[key] = p.device.xp.asarray(value, dtype=p.dtype)",
    ),
    # scalar state (the step count) is not restored.
    (
        "optim_load_state_dict",
        "                else:\n                    state[key] = value\n",
        "                else:\n                    pass\n",
    ),
    # JSON's list of betas is kept as a list.
    (
        "optim_load_state_dict",
        "                mine[key] = tuple(value) if isinstance(value, list) else value",
        "                mine[key] = value",
    ),
    # the flat buffer is a copy: the model's parameters never see the steps.
    (
        "optim_flat",
        "p.data = buffer[start:start + n].reshape(shape)",
        "p.data = buffer[start:start + n].reshape(shape).copy()",
    ),
    # the values are never copied into the buffer: the parameters start from garbage.
    ("optim_flat", "        buffer[start:start + n] = p.data.reshape(-1)\n", ""),
    # only the device is checked: float32 and float64 parameters share one buffer.
    (
        "optim_flat",
        "        if p.dtype != first.dtype or p.device != first.device:",
        "        if p.device != first.device:",
    ),
    # each parameter's state is a copy of its slice, not a view of the flat state.
    (
        "optim_flat_step",
        "            opt.state[p] = {k: v[start:start + n].reshape(shape) if is_array(v) else v",
        "            opt.state[p] = {k: v[start:start + n].reshape(shape).copy() if is_array(v) else v",
    ),
    # the fallback loop forgets to count the step.
    (
        "optim_flat_step",
        '            if p.requires_grad and p.grad is not None:\n                state["step"] += 1\n                opt._update(p.data',
        "            if p.requires_grad and p.grad is not None:\n                opt._update(p.data",
    ),
    # the blocks run one after another on the same scalars: NAdam's mu_product is multiplied once per block.
    (
        "optim_flat_step",
        "        block_state.update(scalars)  # every block starts from the same scalars (NAdam changes one)\n",
        "",
    ),
    # the per-parameter states never learn the new step count.
    ("optim_flat_step", "    for state in states:\n        state.update(scalars)\n", ""),
    # initial_lr not recorded from the group's own lr: every group keeps the default's.
    (
        "optim_optimizer",
        '        group.setdefault("initial_lr", group["lr"])',
        '        group.setdefault("initial_lr", self.defaults["lr"])',
    ),
    # zero_grad(set_to_none=False) puts new zero arrays in place of the gradients the model holds.
    (
        "optim_optimizer",
        "                    p.grad.data[...] = 0\n",
        "                    p.grad = Tensor(np.zeros_like(p.grad.data))\n",
    ),
    # the flat step is never taken: every step runs the per-parameter loop on the views.
    ("optim_flat_step", "    if not together:\n", "    if True:\n"),
    # a flat group's state is loaded into arrays of its own: the first flat step starts from zeros again.
    ("optim_load_state_dict", "        if i in opt._flat:\n            _flat_state(opt, i)\n", ""),
    # nothing is validated: a state that does not fit is half loaded before something breaks, or not at all.
    (
        "optim_load_state_dict",
        '    _validate_state_dict(opt, state_dict)\n    groups = state_dict["param_groups"]\n',
        '    groups = state_dict["param_groups"]\n',
    ),
]
