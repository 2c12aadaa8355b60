"""Seeded mutants of 02_autograd: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # unbroadcast averages the broadcast leading axes instead of summing them.
    (
        "autograd_unbroadcast",
        "grad = grad.sum(axis=tuple(range(lead)))",
        "grad = grad.mean(axis=tuple(range(lead)))",
    ),
    # the added axes taken from the end instead of the front.
    (
        "autograd_unbroadcast",
        "grad = grad.sum(axis=tuple(range(lead)))",
        "grad = grad.sum(axis=tuple(range(grad.ndim - lead, grad.ndim)))",
    ),
    # axes where the input had size 1 are not summed: only leading axes handled.
    (
        "autograd_unbroadcast",
        "stretched = tuple(i for i, n in enumerate(shape) if n == 1 and grad.shape[i] != 1)",
        "stretched = ()",
    ),
    # size-1 axes summed away instead of kept as size 1.
    (
        "autograd_unbroadcast",
        "grad = grad.sum(axis=stretched, keepdims=True)",
        "grad = grad.sum(axis=stretched)",
    ),
    # a gradient whose shape cannot belong to the input handed back as it is, without a ShapeError.
    (
        "autograd_unbroadcast",
        "    if grad.shape != shape:\n        raise ShapeError(",
        "    if False:\n        raise ShapeError(",
    ),
    # constants walked as if they were part of the graph.
    (
        "autograd_toposort",
        "            if x.requires_grad:\n                stack.append((x, False))",
        "            stack.append((x, False))",
    ),
    # no visited set: a tensor reached along two paths is listed twice.
    ("autograd_toposort", "        if id(t) in visited:\n            continue\n", ""),
    # the node pushed after its inputs, so it is finished before them.
    (
        "autograd_toposort",
        "        stack.append((t, True))\n        for x in ctx.inputs:  # an input visited already is skipped when it comes off the stack\n            if x.requires_grad:\n                stack.append((x, False))",
        "        for x in ctx.inputs:  # an input visited already is skipped when it comes off the stack\n            if x.requires_grad:\n                stack.append((x, False))\n        stack.append((t, True))",
    ),
    # a freed node walked through without the freed-graph error.
    (
        "autograd_toposort",
        "        if ctx.inputs is None:\n            raise _freed_graph_error(t)\n",
        "        if ctx.inputs is None:\n            continue\n",
    ),
    # a second backward overwrites .grad instead of accumulating into it.
    ("autograd_accumulate", "leaf.grad.data += g", "leaf.grad.data = g"),
    # an array handed to two leaves in one pass is stored into both.
    (
        "autograd_accumulate",
        "if g.base is not None or id(g) in stored or not isinstance(g, xp.ndarray):",
        "if g.base is not None or not isinstance(g, xp.ndarray):",
    ),
    # a view of another array stored as it is.
    (
        "autograd_accumulate",
        "if g.base is not None or id(g) in stored or not isinstance(g, xp.ndarray):",
        "if id(g) in stored or not isinstance(g, xp.ndarray):",
    ),
    # a NumPy scalar stored as it is: later gradients cannot be added into it.
    (
        "autograd_accumulate",
        "if g.base is not None or id(g) in stored or not isinstance(g, xp.ndarray):",
        "if getattr(g, 'base', None) is not None or id(g) in stored:",
    ),
    # the walk runs in topological order instead of reverse: outputs before their gradient is complete.
    (
        "autograd_backward",
        "for t in reversed(topological_order(root)):",
        "for t in topological_order(root):",
    ),
    # a second path into a tensor overwrites the first one's gradient instead of adding.
    (
        "autograd_backward",
        "grads[key] = gx if key not in grads else grads[key] + gx",
        "grads[key] = gx",
    ),
    # a broadcast input's gradient not summed back to its shape.
    (
        "autograd_backward",
        "            if gx.shape != x.data.shape:\n                gx = unbroadcast(gx, x.data.shape)\n",
        "",
    ),
    # an input's gradient kept in whatever dtype the op's backward returned.
    (
        "autograd_backward",
        "            if gx.dtype != x.data.dtype:\n                gx = gx.astype(x.data.dtype)\n",
        "",
    ),
    # the graph never freed: a second backward silently runs again.
    (
        "autograd_backward",
        "        if not retain_graph:\n            fn.saved, fn.inputs = None, None",
        "        if not retain_graph:\n            fn.saved = None",
    ),
    # retain_graph ignored: the graph is always freed.
    (
        "autograd_backward",
        "        if not retain_graph:\n            fn.saved, fn.inputs = None, None",
        "        fn.saved, fn.inputs = None, None",
    ),
    # leaving no_grad() always switches recording on, even when it was off before.
    (
        "autograd_grad_mode",
        "GradMode.enabled = self._previous.pop()",
        "self._previous.pop()\n        GradMode.enabled = True",
    ),
    # one saved mode instead of a stack: a decorated function that calls itself loses the outer mode.
    (
        "autograd_grad_mode",
        "self._previous.append(GradMode.enabled)",
        "self._previous[:] = [GradMode.enabled]",
    ),
    # the oldest saved mode restored instead of the latest.
    (
        "autograd_grad_mode",
        "GradMode.enabled = self._previous.pop()",
        "GradMode.enabled = self._previous.pop(0)",
    ),
    # __enter__ forgets to return the context manager.
    (
        "autograd_grad_mode",
        "        GradMode.enabled = self.mode\n        return self\n",
        "        GradMode.enabled = self.mode\n",
    ),
    # a one-sided difference divided as if it were central.
    (
        "autograd_gradcheck",
        "numeric[idx] = (plus - minus) / (2 * eps)",
        "numeric[idx] = (plus - original) / eps",
    ),
    # the element is not put back after its two evaluations.
    (
        "autograd_gradcheck",
        "                x.data[idx] = original\n                numeric",
        "                numeric",
    ),
    # the outputs summed instead of weighted by a random v: per-element mix-ups cancel.
    (
        "autograd_gradcheck",
        "v = xp.asarray(np.random.default_rng(seed).standard_normal(out.shape))",
        "v = xp.ones(out.shape)",
    ),
    # inputs that do not require grad checked too: a constant has no gradient to compare.
    (
        "autograd_gradcheck",
        "checked = [i for i, x in enumerate(inputs) if isinstance(x, Tensor) and x.requires_grad]",
        "checked = [i for i, x in enumerate(inputs) if isinstance(x, Tensor)]",
    ),
    # any floating dtype accepted: float32 differences are too coarse to judge a gradient.
    (
        "autograd_gradcheck",
        "        if inputs[i].dtype != float64:\n            raise",
        "        if not is_floating(inputs[i].dtype):\n            raise",
    ),
]
