"""Seeded mutants of 03_layers: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # ELU's derivative on the negative side without + alpha.
    (
        "layers_elu",
        "return self.xp.where(a > 0, grad, grad * (out + self.alpha))",
        "return self.xp.where(a > 0, grad, grad * out)",
    ),
    # alpha forgotten in ELU's forward.
    (
        "layers_elu",
        "out = self.xp.where(a > 0, a, alpha * self.xp.expm1(self.xp.minimum(a, 0)))",
        "out = self.xp.where(a > 0, a, self.xp.expm1(self.xp.minimum(a, 0)))",
    ),
    # an integer input handed to EluFn as it is: the result drifts to float64.
    (
        "layers_elu",
        "return EluFn.apply(x._floating(), alpha=alpha)",
        "return EluFn.apply(x, alpha=alpha)",
    ),
    # softplus's threshold compared with x instead of beta * x.
    ("layers_softplus", "self.linear = scaled > threshold", "self.linear = a > threshold"),
    # the textbook log(1 + exp(beta * x)), which overflows once the threshold is out of reach.
    (
        "layers_softplus",
        "soft = (xp.maximum(scaled, 0) + xp.log1p(e)) / a.dtype.type(beta)",
        "soft = xp.log1p(xp.exp(scaled)) / a.dtype.type(beta)",
    ),
    # the two branches of the stable sigmoid swapped: the derivative is σ(−βx).
    (
        "layers_softplus",
        "self.sig = xp.where(scaled >= 0, 1 / (1 + e), e / (1 + e))",
        "self.sig = xp.where(scaled >= 0, e / (1 + e), 1 / (1 + e))",
    ),
    # exact GELU's derivative without the x·φ(x) term.
    ("layers_gelu", "return grad * (cdf + a * pdf)", "return grad * cdf"),
    # Φ(x) computed as ½(1 + erf(x)), without dividing by √2.
    ("layers_gelu", "cdf = 0.5 * (1 + erf(a * (1 / math.sqrt(2))))", "cdf = 0.5 * (1 + erf(a))"),
    # the tanh form's derivative without the 3·0.044715x² term of du/dx.
    ("layers_gelu", "du = _SQRT_2_OVER_PI * (1 + 3 * 0.044715 * a * a)", "du = _SQRT_2_OVER_PI"),
    # leaky_relu ignores the slope it is given.
    (
        "layers_activations",
        "return where(x > 0, x, x * negative_slope)",
        "return where(x > 0, x, x * 0.01)",
    ),
    # selu with ELU's default alpha instead of SELU's.
    (
        "layers_activations",
        "return elu(x, _SELU_ALPHA) * _SELU_SCALE",
        "return elu(x) * _SELU_SCALE",
    ),
    # hardswish without the division by 6.
    (
        "layers_activations",
        "return x * (x + 3).clip(0.0, 6.0) / 6",
        "return x * (x + 3).clip(0.0, 6.0)",
    ),
    # prelu's per-channel weight not reshaped to broadcast along axis 1.
    (
        "layers_activations",
        "        weight = weight.reshape((n,) + (1,) * (x.ndim - 2)) if x.ndim >= 2 else weight\n",
        "",
    ),
    # log_softmax without subtracting the max: exp overflows for large logits.
    ("layers_softmax", "shifted = a - a.max(axis=axis, keepdims=True)", "shifted = a"),
    # softmax's backward forgets the output in the sum: s · (g − Σ g).
    (
        "layers_softmax",
        "return out * (grad - (grad * out).sum(axis=self.axis, keepdims=True))",
        "return out * (grad - grad.sum(axis=self.axis, keepdims=True))",
    ),
    # log_softmax's backward without the sum of the incoming gradient.
    (
        "layers_softmax",
        "return grad - self.xp.exp(out) * grad.sum(axis=self.axis, keepdims=True)",
        "return grad - self.xp.exp(out)",
    ),
    # the axis passed to NumPy unchecked: an axis the input lacks is not a ShapeError.
    (
        "layers_softmax",
        'return SoftmaxFn.apply(x._floating(), axis=normalize_axis(axis, max(x.ndim, 1), "softmax"))',
        "return SoftmaxFn.apply(x._floating(), axis=axis)",
    ),
    # a Parameter filed without forgetting the name elsewhere: a name lives in two places.
    (
        "layers_module",
        "            self.register_parameter(name, value)",
        "            self._parameters[name] = value",
    ),
    # a Module assigned as a plain attribute: sub-modules are not registered.
    (
        "layers_module",
        "            self.add_module(name, value)",
        "            object.__setattr__(self, name, value)",
    ),
    # a plain tensor silently replaces a parameter.
    (
        "layers_module",
        '        elif "_parameters" in self.__dict__ and name in self._parameters:\n            if value is not None:',
        '        elif "_parameters" in self.__dict__ and name in self._parameters:\n            if value is not None and not isinstance(value, Tensor):',
    ),
    # no early check: forgetting super().__init__() gives a confusing AttributeError.
    (
        "layers_module",
        '        if isinstance(value, Parameter | Module) and "_parameters" not in self.__dict__:',
        "        if False:",
    ),
    # tied weights listed (and so updated) twice.
    ("layers_module_walk", "if t is None or id(t) in seen:", "if t is None:"),
    # children pushed in registration order onto the stack: the walk visits them last-first.
    ("layers_module_walk", "stack.extend(reversed(children))", "stack.extend(children)"),
    # sub-modules named without their parent's prefix.
    (
        "layers_module_walk",
        'children = [(f"{name}.{n}" if name else n, m) for n, m in current._modules.items() if m is not None]',
        "children = [(n, m) for n, m in current._modules.items() if m is not None]",
    ),
    # recurse=False ignored.
    (
        "layers_module_walk",
        "modules = _named_modules(module, prefix) if recurse else [(prefix, module)]",
        "modules = _named_modules(module, prefix)",
    ),
    # train() sets the flag on this module only.
    (
        "layers_module_train",
        "    for m in module.modules():\n        m.training = bool(mode)",
        "    module.training = bool(mode)",
    ),
    # train() reaches the direct children but not their sub-modules.
    (
        "layers_module_train",
        "    for m in module.modules():\n        m.training = bool(mode)",
        "    for m in [module, *module.children()]:\n        m.training = bool(mode)",
    ),
    # train() returns nothing, so model.eval() cannot be chained.
    (
        "layers_module_train",
        "        m.training = bool(mode)\n    return module",
        "        m.training = bool(mode)\n    return None",
    ),
    # training stored as given: train(1) leaves the flag 1, not True.
    ("layers_module_train", "m.training = bool(mode)", "m.training = mode"),
    # integer buffers cast to the new dtype too.
    (
        "layers_module_to",
        "target = dt if dt is not None and is_floating(t.dtype) else t.dtype",
        "target = dt if dt is not None else t.dtype",
    ),
    # gradients left behind on the old device and dtype.
    ("layers_module_to", "for held in (t, t.grad):", "for held in (t,):"),
    # the array moved but the tensor still says it lives on the old device.
    (
        "layers_module_to",
        "held.set_(held.to(device=dev or held.device, dtype=target))",
        "held.data = held.to(device=dev or held.device, dtype=target).data",
    ),
    # only a dtype given as a string is recognised as the first argument: model.to(float32) fails.
    (
        "layers_module_to",
        "    if device is not None and not _is_device_spec(device):",
        "    if isinstance(device, str) and not _is_device_spec(device):",
    ),
    # a module shared under two names saved under its first name only.
    (
        "layers_state_dict",
        "for module_name, module in self.named_modules(remove_duplicate=False):",
        "for module_name, module in self.named_modules():",
    ),
    # non-persistent buffers saved too.
    (
        "layers_state_dict",
        "entries += [(n, b) for n, b in module._buffers.items() if n not in module._non_persistent]",
        "entries += [*module._buffers.items()]",
    ),
    # the live tensors handed out, with their graph.
    ("layers_state_dict", "= t.detach()", "= t"),
    # load_state_dict rebinds the detached view instead of writing into the parameter.
    ("layers_load_state_dict", "target.data[...] = array", "target.data = array"),
    # missing keys refused even with strict=False.
    ("layers_load_state_dict", "if strict and missing:", "if missing:"),
    # unexpected keys never reported.
    (
        "layers_load_state_dict",
        "    if strict and unexpected:\n        problems.append",
        "    if False:\n        problems.append",
    ),
    # IncompatibleKeys filled the wrong way round.
    (
        "layers_load_state_dict",
        "return IncompatibleKeys(missing, unexpected)",
        "return IncompatibleKeys(unexpected, missing)",
    ),
    # the receptive field forgotten: a convolution's fans are in and out.
    (
        "layers_init_fans",
        "return tensor.shape[1] * receptive, tensor.shape[0] * receptive",
        "return tensor.shape[1], tensor.shape[0]",
    ),
    # leaky_relu's default slope taken as 0.
    (
        "layers_init_fans",
        "slope = 0.01 if param is None else param",
        "slope = 0.0 if param is None else param",
    ),
    # a one-axis tensor not refused: it fails later with an IndexError.
    (
        "layers_init_fans",
        '    if tensor.ndim < 2:\n        raise ValueError(f"fan in',
        '    if tensor.ndim < 1:\n        raise ValueError(f"fan in',
    ),
    # Kaiming's uniform bound taken as the standard deviation (√3 too narrow).
    ("layers_init", "bound = math.sqrt(3.0) * std", "bound = std"),
    # uniform_ draws from [0, b − a) instead of [a, b).
    (
        "layers_init",
        'return _fill_(tensor, a + (b - a) * _draw("uniform", tensor))',
        'return _fill_(tensor, (b - a) * _draw("uniform", tensor))',
    ),
    # xavier_uniform_ ignores its gain.
    (
        "layers_init",
        "bound = math.sqrt(3.0) * gain * math.sqrt(2.0 / (fan_in + fan_out))",
        "bound = math.sqrt(3.0) * math.sqrt(2.0 / (fan_in + fan_out))",
    ),
    # fan_in_uniform_'s bound 1/fan_in instead of 1/√fan_in.
    (
        "layers_init",
        "bound = 1 / math.sqrt(fan_in) if fan_in > 0 else 0.0",
        "bound = 1 / fan_in if fan_in > 0 else 0.0",
    ),
    # Q without the sign fix: its entries are biased.
    ("layers_orthogonal", "    q = q * xp.sign(xp.diagonal(r))\n", ""),
    # a wide matrix decomposed as it is: Q is square and does not fit the tensor.
    ("layers_orthogonal", "    if rows < cols:\n        flat = flat.T\n", ""),
    # the gain forgotten.
    ("layers_orthogonal", "(gain * q).reshape(tensor.shape)", "q.reshape(tensor.shape)"),
    # the normal matrix drawn from a generator of its own: manual_seed does not reproduce it.
    (
        "layers_orthogonal",
        'flat = _draw("normal", tensor, (rows, cols))',
        "flat = np.random.default_rng().standard_normal((rows, cols)).astype(tensor.dtype)",
    ),
    # samples outside [a, b] clamped onto the edges instead of drawn again.
    (
        "layers_trunc_normal",
        'values[outside] = mean + std * _draw("normal", tensor, (count,))',
        "values[outside] = values[outside].clip(a, b)",
    ),
    # a and b read in standard deviations around the mean, not as absolute bounds.
    (
        "layers_trunc_normal",
        "outside = (values < a) | (values > b)",
        "outside = (values < mean + a * std) | (values > mean + b * std)",
    ),
    # redrawn samples forget the mean.
    (
        "layers_trunc_normal",
        'values[outside] = mean + std * _draw("normal", tensor, (count,))',
        'values[outside] = std * _draw("normal", tensor, (count,))',
    ),
    # the weight's gradient computed as xᵀg, (in, out) instead of (out, in).
    (
        "layers_linear",
        "grad_w = rows.T @ x_rows if needs[1] else None",
        "grad_w = x_rows.T @ rows if needs[1] else None",
    ),
    # the bias gradient averaged over the rows instead of summed.
    (
        "layers_linear",
        "grad_b = rows.sum(axis=0) if len(needs) > 2 and needs[2] else None",
        "grad_b = rows.mean(axis=0) if len(needs) > 2 and needs[2] else None",
    ),
    # Kaiming's default a = 0: the weight starts √6 times too wide.
    (
        "layers_linear",
        "kaiming_uniform_(self.weight, a=math.sqrt(5))",
        "kaiming_uniform_(self.weight)",
    ),
    # only the first axis taken as rows: a 3-D input cannot be flattened.
    (
        "layers_linear",
        "rows = math.prod(x.shape[:-1])  # explicit",
        "rows = x.shape[0]  # explicit",
    ),
    # negative indices not refused: they wrap around to the last rows.
    (
        "layers_embedding",
        "if low < 0 or high >= self.num_embeddings:",
        "if high >= self.num_embeddings:",
    ),
    # off by one: index num_embeddings slips past the check.
    (
        "layers_embedding",
        "if low < 0 or high >= self.num_embeddings:",
        "if low < 0 or high > self.num_embeddings:",
    ),
    # floating indices not refused.
    (
        "layers_embedding",
        '        if indices.dtype.kind not in "iu":\n            raise TypeError(f"{name}: indices must be integers; got {indices.dtype}")\n        if indices.numel():',
        "        if indices.numel():",
    ),
    # dropout that is not inverted: the survivors are not scaled up.
    (
        "layers_dropout",
        "scale = mask.astype(x.dtype) * x.dtype.type(1 / keep)",
        "scale = mask.astype(x.dtype)",
    ),
    # dropout stays on in evaluation mode.
    (
        "layers_dropout",
        "    if not training or p == 0:\n        return x",
        "    if p == 0:\n        return x",
    ),
    # the mask drawn from NumPy's global generator: manual_seed does not reproduce it.
    (
        "layers_dropout",
        "mask = rand(x.shape, device=x.device).data < keep",
        "mask = np.random.random_sample(x.shape) < keep",
    ),
    # the mask kept where u >= p: a fair coin too, but not the draw the task states, so manual_seed
    # gives another mask than the reference's.
    (
        "layers_dropout",
        "mask = rand(x.shape, device=x.device).data < keep",
        "mask = rand(x.shape, device=x.device).data >= p",
    ),
    # LayerNorm's variance unbiased (÷ (n − 1)).
    (
        "layers_layer_norm",
        "var = (centered * centered).mean(axis=axes, keepdims=True)",
        "var = (centered * centered).sum(axis=axes, keepdims=True) / (x.shape[-1] - 1)",
    ),
    # LayerNorm over the last axis only, whatever normalized_shape says.
    ("layers_layer_norm", "axes = tuple(range(x.ndim - k, x.ndim))", "axes = (-1,)"),
    # eps added to the standard deviation instead of the variance.
    (
        "layers_layer_norm",
        "out = centered / (var + self.eps).sqrt()",
        "out = centered / (var.sqrt() + self.eps)",
    ),
    # float16 normalised in float16: the squares overflow.
    (
        "layers_layer_norm",
        "dtype, x = x.dtype, x._accurate()  # float16 squares",
        "dtype = x.dtype  # float16 squares",
    ),
    # BatchNorm's running variance left biased (PyTorch keeps the unbiased one).
    ("layers_batch_norm", "var.data * (n / (n - 1))", "var.data"),
    # the running statistics weighted the wrong way round.
    (
        "layers_batch_norm",
        "running.data[...] = (1 - factor) * running.data + factor * stat",
        "running.data[...] = factor * running.data + (1 - factor) * stat",
    ),
    # evaluation still uses (and updates) the batch statistics.
    (
        "layers_batch_norm",
        "        if self.training:\n            n = x.numel()",
        "        if True:\n            n = x.numel()",
    ),
    # momentum=None treated as PyTorch's default 0.1 instead of a plain average.
    (
        "layers_batch_norm",
        "factor = self.momentum if self.momentum is not None else 1 / int(self.num_batches_tracked.item())",
        "factor = self.momentum if self.momentum is not None else 0.1",
    ),
]
