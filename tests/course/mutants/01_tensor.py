"""Seeded mutants of 01_tensor: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # NumPy's own promotion: float32 with int64 drifts to float64.
    (
        "tensor_dtypes",
        "    if is_floating(a):\n        return a\n    if is_floating(b):\n        return b\n",
        "",
    ),
    # two floats: the first one wins instead of the wider one.
    (
        "tensor_dtypes",
        "    if is_floating(a) and is_floating(b):\n        return np.promote_types(a, b)",
        "    if is_floating(a) and is_floating(b):\n        return a",
    ),
    # two integers: the first one wins instead of the wider one.
    (
        "tensor_dtypes",
        "        return b\n    return np.promote_types(a, b)",
        "        return b\n    return a",
    ),
    # only the first operand is checked for being floating: int64 with float16 drifts to float64.
    ("tensor_dtypes", "    if is_floating(b):\n        return b\n", ""),
    # integers compared by width alone: bool with uint8 (one byte each) stays bool.
    (
        "tensor_dtypes",
        "        return b\n    return np.promote_types(a, b)",
        "        return b\n    return a if a.itemsize >= b.itemsize else b",
    ),
    # Python floats left as NumPy's float64.
    (
        "tensor_python_data",
        '    if array.dtype.kind == "f":\n        return array.astype(default_float)\n',
        "",
    ),
    # bools turned into int64 along with the integers.
    ("tensor_python_data", '    if array.dtype.kind in "iu":', '    if array.dtype.kind in "biu":'),
    # a requested dtype converted from the float32 default: float64 data loses digits.
    (
        "tensor_python_data",
        '    if dtype is not None:\n        return array.astype(dtype)\n    if array.dtype.kind == "f":\n        return array.astype(default_float)\n',
        '    if array.dtype.kind == "f":\n        array = array.astype(default_float)\n    if dtype is not None:\n        return array.astype(dtype)\n',
    ),
    # a ragged list escapes as NumPy's ValueError instead of a TypeError.
    (
        "tensor_python_data",
        "    except ValueError as err:  # NumPy refuses ragged lists",
        "    except TypeError as err:  # NumPy refuses ragged lists",
    ),
    # the error for data that is not numbers shows the data but not its type.
    (
        "tensor_python_data",
        'f"got {type(data).__name__} {data!r:.60}"',
        'f"got {data!r:.60}"',
    ),
    # a NumPy array shared instead of copied.
    ("tensor_creation", 'np.array(data, order="K")', "np.asarray(data)"),
    # a tensor's array shared instead of copied.
    (
        "tensor_creation",
        "array, src = data.data.copy(), data._device",
        "array, src = data.data, data._device",
    ),
    # only the kind is checked: int8 and uint16 arrays slip through.
    (
        "tensor_creation",
        "if dtype is None and array.dtype not in SUPPORTED_DTYPES:",
        'if dtype is None and array.dtype.kind not in "biuf":',
    ),
    # converted only when the kind differs: float64 asked to be float32 stays float64.
    (
        "tensor_creation",
        "if dtype is not None and array.dtype != dtype:",
        "if dtype is not None and array.dtype.kind != dtype.kind:",
    ),
    # NumPy scalars treated as Python data: np.float64(2.5) becomes float32.
    (
        "tensor_creation",
        "elif isinstance(data, np.ndarray | np.generic):",
        "elif isinstance(data, np.ndarray):",
    ),
    # the node recorded even when no input needs a gradient.
    ("tensor_function", "        if True in needs:", "        if needs:"),
    # grad mode ignored: no_grad() would still record the graph.
    ("tensor_function", "needs = tuple(needs) if GradMode.enabled else ()", "needs = tuple(needs)"),
    # 0-d results left as NumPy scalars.
    (
        "tensor_function",
        "        if isinstance(data, np.generic):  # NumPy hands back scalars for 0-d results\n            data = np.asarray(data)\n",
        "",
    ),
    # every ValueError becomes a ShapeError, shapes or not.
    (
        "tensor_function",
        '            if "shape" not in str(err):  # not a shape problem: let it through unchanged\n                raise\n',
        "",
    ),
    # an op's own ShapeError rewrapped with the generic message.
    ("tensor_function", "        except ShapeError:\n            raise\n", ""),
    # the node keeps its inputs in a list, not the tuple the engine expects.
    (
        "tensor_function",
        "fn.inputs, fn.needs_input_grad = inputs, needs",
        "fn.inputs, fn.needs_input_grad = list(inputs), needs",
    ),
    # every error that mentions shapes rewrapped as a ShapeError, a TypeError too.
    ("tensor_function", "        except ValueError as err:\n            if", "        except Exception as err:\n            if"),
    # keyword parameters dropped on the way to forward.
    ("tensor_function", "data = fn.forward(*arrays, **params)", "data = fn.forward(*arrays)"),
    # the device an op declares for its output ignored: To's result would claim the old device.
    ("tensor_function", "out = Tensor._wrap(data, fn.out_device or device)", "out = Tensor._wrap(data, device)"),
    # d(a - b)/db = -1: the sign of the second gradient lost.
    ("tensor_arithmetic", "return grad, -grad", "return grad, grad"),
    # a - b computed as b - a.
    ("tensor_arithmetic", "return a - b", "return b - a"),
    # d(-a)/da = -1: the gradient passed through unchanged.
    ("tensor_arithmetic", "return -grad", "return grad"),
    # Add sums b's gradient down itself, over the first axis, as if b were always broadcast that way.
    ("tensor_arithmetic", "        return grad, grad\n", "        return grad, grad.sum(axis=0)\n"),
    # d(a/b)/db = -a/b**2: the sign of the divisor's gradient flipped.
    ("tensor_mul_div", "return grad_a, -grad_a * out", "return grad_a, grad_a * out"),
    # d(a*b): each input gets its own value instead of the other's.
    ("tensor_mul_div", "return grad * b, grad * a", "return grad * a, grad * b"),
    # d(a/b)/da = 1/b, written as a product.
    ("tensor_mul_div", "grad_a = grad / b", "grad_a = grad * b"),
    # the power rule off by one: b * a**b instead of b * a**(b-1).
    ("tensor_pow", "b * a ** (b - 1) if", "b * a ** b if"),
    # d(a**b)/db without the ln a.
    ("tensor_pow", "grad_b = grad * out * self.xp.log(a)", "grad_b = grad * out"),
    # the exponent's gradient always computed (NaN for negative bases, wasted work).
    (
        "tensor_pow",
        "grad * out * self.xp.log(a) if self.needs_input_grad[1] else None",
        "grad * out * self.xp.log(a)",
    ),
    # the incoming gradient forgotten: the chain rule's factor alone.
    ("tensor_pow", "grad_a = grad * b * a ** (b - 1)", "grad_a = b * a ** (b - 1)"),
    # the base's gradient always computed, even for a constant base (2 ** x).
    (
        "tensor_pow",
        "grad * b * a ** (b - 1) if self.needs_input_grad[0] else None",
        "grad * b * a ** (b - 1)",
    ),
    # d log(a) = 1/a, written as a product.
    ("tensor_exp_log", "return grad / a", "return grad * a"),
    # d sqrt(a) = 1/(2 sqrt a): the 2 forgotten.
    ("tensor_exp_log", "return grad / (out + out)", "return grad / out"),
    # exp saves its input, so backward multiplies by a instead of exp(a).
    (
        "tensor_exp_log",
        "out = self.xp.exp(a)\n        self.save_for_backward(out)",
        "out = self.xp.exp(a)\n        self.save_for_backward(a)",
    ),
    # the textbook sigmoid, which overflows for large negative inputs.
    (
        "tensor_tanh_sigmoid",
        "out = self.xp.where(a >= 0, 1 / (1 + e), e / (1 + e))",
        "out = 1 / (1 + self.xp.exp(-a))",
    ),
    # the two branches of the stable sigmoid swapped.
    (
        "tensor_tanh_sigmoid",
        "self.xp.where(a >= 0, 1 / (1 + e), e / (1 + e))",
        "self.xp.where(a >= 0, e / (1 + e), 1 / (1 + e))",
    ),
    # d tanh = 1 - tanh**2, with the square forgotten.
    ("tensor_tanh_sigmoid", "return grad * (1 - out * out)", "return grad * (1 - out)"),
    # the incoming gradient forgotten in sigmoid's backward.
    ("tensor_tanh_sigmoid", "return grad * out * (1 - out)", "return out * (1 - out)"),
    # relu lets the gradient through at 0.
    ("tensor_relu_abs", "return grad * (a > 0)", "return grad * (a >= 0)"),
    # abs: sign taken as +1 at 0, and counted in float64.
    (
        "tensor_relu_abs",
        "return grad * self.xp.sign(a)",
        "return grad * self.xp.where(a >= 0, 1.0, -1.0)",
    ),
    # abs: the incoming gradient forgotten.
    ("tensor_relu_abs", "return grad * self.xp.sign(a)", "return self.xp.sign(a)"),
    # dA = grad @ B, without the transpose.
    ("tensor_matmul", "grad_a = grad @ b2.swapaxes(-1, -2)", "grad_a = grad @ b2"),
    # the first input's gradient gated on the second input's flag.
    (
        "tensor_matmul",
        "        if self.needs_input_grad[0]:  # skip",
        "        if self.needs_input_grad[1]:  # skip",
    ),
    # the inner size of a batched second operand read from its first axis.
    ("tensor_matmul", "k_b = b.shape[0] if b.ndim == 1 else b.shape[-2]", "k_b = b.shape[0]"),
    # a vector's gradient left as the (k, 1) column of its matrix shape.
    ("tensor_matmul", "            grad_b = grad_b[..., 0] if b.ndim == 1 else grad_b\n", ""),
    # a 0-d operand not refused: it reaches the shape test, whose IndexError is not a ShapeError.
    (
        "tensor_matmul",
        '        if a.ndim == 0 or b.ndim == 0:\n            raise ShapeError(f"matmul: both operands need at least one axis; got shapes {a.shape} and {b.shape}")\n',
        "",
    ),
    # float16 summed in float16: stalls at 2048.
    (
        "tensor_sum",
        "        if is_floating(a.dtype) and a.dtype.itemsize < 4:\n            return a.sum(axis=axis, keepdims=keepdims, dtype=np.float32).astype(a.dtype)\n",
        "",
    ),
    # the gradient broadcast without its reduced axes put back.
    ("tensor_sum", "        grad = grad.reshape(_keepdims_shape(self.shape, self.axis))\n", ""),
    # keepdims ignored.
    ("tensor_sum", "return a.sum(axis=axis, keepdims=keepdims)\n", "return a.sum(axis=axis)\n"),
    # var divides by n whatever the correction.
    ("tensor_mean_var", "/ (count - correction)", "/ count"),
    # mean over an axis divides by every element of the tensor.
    (
        "tensor_mean_var",
        "return x.sum(axes, keepdims) / count",
        "return x.sum(axes, keepdims) / x.numel()",
    ),
    # var centres on a mean without keepdims: wrong broadcast over axis 1.
    (
        "tensor_mean_var",
        "centered = x - x.mean(axes, keepdims=True)",
        "centered = x - x.mean(axes)",
    ),
    # mean computed on the raw array: right values, but no graph for the gradient to flow through.
    (
        "tensor_mean_var",
        "return x.sum(axes, keepdims) / count",
        "return Tensor._wrap(x.data.sum(axis=axes, keepdims=keepdims) / count, x._device)",
    ),
    # ties at the maximum each take the whole gradient.
    (
        "tensor_max",
        "return grad.reshape(out.shape) * winners / share",
        "return grad.reshape(out.shape) * winners",
    ),
    # ties counted in int64: the gradient drifts to float64.
    (
        "tensor_max",
        "share = winners.sum(axis=self.axis, keepdims=True, dtype=a.dtype)",
        "share = winners.sum(axis=self.axis, keepdims=True)",
    ),
    # ties counted over the whole tensor instead of per reduced slice.
    (
        "tensor_max",
        "share = winners.sum(axis=self.axis, keepdims=True, dtype=a.dtype)",
        "share = winners.sum(dtype=a.dtype)",
    ),
    # keepdims ignored.
    ("tensor_max", "return out if keepdims else out.squeeze(axis)", "return out.squeeze(axis)"),
    # an empty tensor reaches NumPy, whose error is not a ShapeError.
    (
        "tensor_max",
        '        if a.size == 0:\n            raise ShapeError(f"max: cannot reduce an empty tensor of shape {a.shape}")\n',
        "",
    ),
    # permute's backward applies the permutation again instead of its inverse.
    ("tensor_views", "grad.transpose(np.argsort(self.axes))", "grad.transpose(self.axes)"),
    # reshape remembers the target shape instead of the input's.
    (
        "tensor_views",
        "        self.shape = a.shape\n        try:\n            return a.reshape(shape)",
        "        self.shape = shape\n        try:\n            return a.reshape(shape)",
    ),
    # expand sums its gradient itself, over the wrong axis (the engine does it right).
    ("tensor_views", "        return grad\n", "        return grad.sum(axis=0)\n"),
    # a shape that does not fit escapes as NumPy's ValueError.
    (
        "tensor_views",
        '        try:\n            return a.reshape(shape)\n        except ValueError:\n            raise ShapeError(f"reshape: cannot reshape shape {tuple(a.shape)} ({a.size} elements) into {shape}") from None\n',
        "        return a.reshape(shape)\n",
    ),
    # the expand error names only the target shape.
    (
        "tensor_views",
        'raise ShapeError(f"expand: cannot expand shape {tuple(a.shape)} to {shape}") from None',
        'raise ShapeError(f"expand: cannot expand to {shape}") from None',
    ),
    # repeated picks overwrite instead of adding up.
    (
        "tensor_indexing",
        "            _scatter_add(full, self.index, grad)",
        "            full[self.index] = grad",
    ),
    # the zero gradient made in float64.
    (
        "tensor_indexing",
        "full = self.xp.zeros(self.shape, self.dtype)",
        "full = self.xp.zeros(self.shape)",
    ),
    # an index out of range escapes as NumPy's IndexError.
    (
        "tensor_indexing",
        '        try:\n            return a[index]\n        except IndexError as err:\n            raise ShapeError(f"getitem: index {index!r} does not fit shape {tuple(a.shape)}: {err}") from None\n',
        "        return a[index]\n",
    ),
    # cat splits at the pieces' sizes instead of where they end.
    (
        "tensor_cat_stack",
        "self.ends = np.cumsum([a.shape[axis] for a in arrays])[:-1]",
        "self.ends = [a.shape[axis] for a in arrays][:-1]",
    ),
    # cat's gradient always cut along axis 0.
    (
        "tensor_cat_stack",
        "self.xp.split(grad, self.ends, axis=self.axis)",
        "self.xp.split(grad, self.ends)",
    ),
    # stack's gradient always cut along axis 0.
    ("tensor_cat_stack", "tuple(self.xp.moveaxis(grad, self.axis, 0))", "tuple(grad)"),
    # stack's gradient cut into slices that keep the stacked axis, of size 1.
    (
        "tensor_cat_stack",
        "tuple(self.xp.moveaxis(grad, self.axis, 0))",
        "tuple(self.xp.split(grad, grad.shape[self.axis], axis=self.axis))",
    ),
    # where's gradients sent to the wrong inputs.
    (
        "tensor_where",
        "return grad * self.cond, grad * ~self.cond",
        "return grad * ~self.cond, grad * self.cond",
    ),
    # where picks from b where the condition holds.
    ("tensor_where", "return self.xp.where(cond, a, b)", "return self.xp.where(cond, b, a)"),
    # the complement as 1 - mask: an int64 mask turns the gradient into float64.
    ("tensor_where", "grad * ~self.cond", "grad * (1 - self.cond)"),
    # a value exactly at the lower limit gets no gradient.
    ("tensor_clip", "inside &= a >= self.low", "inside &= a > self.low"),
    # a value exactly at the upper limit gets no gradient.
    ("tensor_clip", "inside &= a <= self.high", "inside &= a < self.high"),
    # a missing upper limit compared against anyway.
    (
        "tensor_clip",
        "        if self.high is not None:\n            inside &= a <= self.high\n",
        "        inside &= a <= self.high\n",
    ),
    # the limits used as they come: NumPy float64 limits turn a float32 tensor into float64.
    (
        "tensor_clip",
        "        low = None if low is None else a.dtype.type(low)\n        high = None if high is None else a.dtype.type(high)\n",
        "",
    ),
]
