"""Seeded mutants of 10_convolutions: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # dilation forgotten in the view: the kernel's taps are always neighbours (a hidden test catches it).
    (
        "conv_im2col",
        "(s0, s1, s2 * sh, s3 * sw, s2 * dh, s3 * dw)",
        "(s0, s1, s2 * sh, s3 * sw, s2, s3)",
    ),
    # columns ordered (kh, kw, c), channels last, instead of (c, kh, kw).
    (
        "conv_im2col",
        "return win.transpose(0, 2, 3, 1, 4, 5).reshape(n * oh * ow, c * kh * kw)",
        "return win.transpose(0, 2, 3, 4, 5, 1).reshape(n * oh * ow, c * kh * kw)",
    ),
    # padding only when the height is padded: padding (0, 1) is ignored (a hidden test catches it).
    ("conv_im2col", "    if ph or pw:\n        x = xp.pad(", "    if ph:\n        x = xp.pad("),
    # col2im overwrites where windows overlap instead of adding their contributions.
    (
        "conv_col2im",
        "j * dw + sw * (ow - 1) + 1:sw] += windows[..., i, j]",
        "j * dw + sw * (ow - 1) + 1:sw] = windows[..., i, j]",
    ),
    # the padding cut off at the wrong end: the first rows and columns are kept instead.
    (
        "conv_col2im",
        "+= windows[..., i, j]\n    return out[:, :, ph:ph + h, pw:pw + w] if ph or pw else out",
        "+= windows[..., i, j]\n    return out[:, :, :h, :w]",
    ),
    # tiling windows laid out without interleaving the kernel rows (a hidden test with stride == kernel catches it).
    (
        "conv_col2im",
        "tiles = windows.transpose(0, 1, 2, 4, 3, 5).reshape(n, c, oh * kh, ow * kw)",
        "tiles = windows.reshape(n, c, oh * kh, ow * kw)",
    ),
    # the columns read as if the channel came before the output position.
    (
        "conv_col2im",
        "win = cols.reshape(n, oh, ow, c, *kernel).transpose(0, 3, 1, 2, 4, 5)",
        "win = cols.reshape(n, c, oh, ow, *kernel)",
    ),
    # the stride forgotten in backward: the column gradient folded back as if stride were 1.
    (
        "conv_conv2d",
        "grad_x = _fold(win, self.x_shape, *self.geometry)",
        "grad_x = _fold(win, self.x_shape, self.geometry[0], (1, 1), *self.geometry[2:])",
    ),
    # the weight gradient of the first image only, not summed over the batch (a hidden test catches it).
    (
        "conv_conv2d",
        "grad_w = (gl @ cols.transpose(0, 1, 3, 2)).sum(axis=0).reshape(weight.shape)",
        "grad_w = (gl @ cols.transpose(0, 1, 3, 2))[0].reshape(weight.shape)",
    ),
    # the bias gradient averaged over the batch instead of summed (a hidden test catches it).
    (
        "conv_conv2d",
        "grad_b = grad.sum(axis=(0, 2, 3))",
        "grad_b = grad.sum(axis=(2, 3)).mean(axis=0)",
    ),
    # the unfolded columns keep the output position before the kernel offset: rows mix up.
    (
        "conv_conv2d",
        "cols = win.transpose(0, 1, 4, 5, 2, 3).reshape(n, groups, k, oh * ow)",
        "cols = win.reshape(n, groups, k, oh * ow)",
    ),
    # backward folds the input's gradient even for a data batch that needs none (a hidden test catches it).
    (
        "conv_conv2d",
        "        if needs[0]:\n            (kh, kw), c = self.geometry[0], self.x_shape[1]",
        "        if True:\n            (kh, kw), c = self.geometry[0], self.x_shape[1]",
    ),
    # the bias's dtype not checked: a float32 bias is silently mixed with float64 weights (a hidden test catches it).
    (
        "conv_conv2d",
        "if bias is not None and bias.dtype != weight.dtype:",
        "if False:",
    ),
    # groups that do not divide the output channels not checked: NumPy's reshape error, which names no groups.
    ("conv_conv2d", "if groups < 1 or weight.shape[0] % groups:", "if groups < 1:"),
    # kaiming_uniform_ with its default a=0: weights √15 times too wide for PyTorch's default.
    (
        "conv_conv2d_layer",
        "kaiming_uniform_(self.weight, a=math.sqrt(5))",
        "kaiming_uniform_(self.weight)",
    ),
    # the bias bound from the input channels alone, without the kernel's area (a hidden test catches it).
    (
        "conv_conv2d_layer",
        "fan_in_uniform_(self.bias, calculate_fan_in_and_fan_out(self.weight)[0])",
        "fan_in_uniform_(self.bias, self.in_channels)",
    ),
    # the weight holds every input channel even with groups (a hidden test catches it).
    (
        "conv_conv2d_layer",
        "shape = (out_channels, in_channels // groups, *self.kernel_size)",
        "shape = (out_channels, in_channels, *self.kernel_size)",
    ),
    # the layer does not pass its dilation on (a hidden test catches it).
    (
        "conv_conv2d_layer",
        "return conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)",
        "return conv2d(x, self.weight, self.bias, self.stride, self.padding, groups=self.groups)",
    ),
    # an integer input not converted: it reaches conv2d as integers, a dtype mismatch (a hidden test catches it).
    ("conv_conv2d_layer", "            if not is_floating(x.dtype):\n                x = x.to(dtype=self.weight.dtype)\n            elif",
     "            if False:\n                pass\n            elif"),
    # bias=False ignored: the layer always makes a bias (a hidden test catches it).
    ("conv_conv2d_layer", "        if bias:\n            self.bias = Parameter(", "        if True:\n            self.bias = Parameter("),
    # max pooling sends the gradient to every element of the window, not to its maximum.
    (
        "conv_max_pool",
        "dx[:, :, rows, cols] += xp.where(first, grad, zero)",
        "dx[:, :, rows, cols] += grad",
    ),
    # ties not broken: every maximum of a window gets the gradient (a hidden test catches it).
    ("conv_max_pool", "first = (win[..., i, j] == out) & ~taken", "first = win[..., i, j] == out"),
    # the running maximum starts from zero, not from the first offset: all-negative windows pool to 0.
    ("conv_max_pool", "out = win[..., 0, 0].copy()", "out = xp.zeros_like(win[..., 0, 0])"),
    # padding with zeros: a window of negative numbers pools to the padding (a hidden test catches it).
    (
        "conv_max_pool",
        "fill = -xp.inf if is_floating(x.dtype) else xp.iinfo(x.dtype).min",
        "fill = 0",
    ),
    # backward walks the kernel rows bottom up: a tie goes to a later maximum (a hidden test with ties catches it).
    (
        "conv_max_pool",
        "        for i in range(kh):  # in window order, so a tie goes to the first maximum\n            for j in range(kw):\n"
        "                first = (win[..., i, j] == out) & ~taken",
        "        for i in reversed(range(kh)):\n            for j in range(kw):\n"
        "                first = (win[..., i, j] == out) & ~taken",
    ),
    # the dilation forgotten in backward's columns: a dilated window's gradient lands on its neighbours.
    (
        "conv_max_pool",
        "cols = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)",
        "cols = slice(j, j + sw * (ow - 1) + 1, sw)",
    ),
    # integers padded with -inf too: NumPy cannot put -inf in an integer array (a hidden test catches it).
    (
        "conv_max_pool",
        "fill = -xp.inf if is_floating(x.dtype) else xp.iinfo(x.dtype).min",
        "fill = -xp.inf",
    ),
    # a bool input not refused: it pools as if it were numbers (a hidden test catches it).
    ("conv_max_pool", "if x.dtype == np.bool_:", "if False:"),
    # count_include_pad=False ignored (a hidden test catches it).
    ("conv_avg_pool", "if count_include_pad or padding == (0, 0):", "if True:"),
    # float16 windows summed in float16: large sums overflow to inf (a hidden test catches it).
    ("conv_avg_pool", "acc = float32 if x.dtype.itemsize < 4 else x.dtype", "acc = x.dtype"),
    # backward spreads the whole gradient over the window, without dividing by the divisor.
    (
        "conv_avg_pool",
        "share = (grad / self.divisor).astype(grad.dtype, copy=False)",
        "share = grad",
    ),
    # an integer input averaged as integers: truncated means, an integer result (a hidden test catches it).
    ("conv_avg_pool", "AvgPool2dFn.apply(x._floating(),", "AvgPool2dFn.apply(x,"),
    # backward divides by the kernel's area even where padding does not count (a hidden test catches it).
    (
        "conv_avg_pool",
        "share = (grad / self.divisor).astype(grad.dtype, copy=False)",
        "share = (grad / (self.geometry[0][0] * self.geometry[0][1])).astype(grad.dtype, copy=False)",
    ),
    # conv2d's geometry check instead of pooling's: padding above half the kernel goes through (a hidden test catches it).
    (
        "conv_avg_pool",
        'kernel, stride, padding, _ = _pool_geometry("avg_pool2d", x, kernel_size, stride, padding)',
        'kernel, stride, padding, _ = _geometry("avg_pool2d", x.shape, kernel_size, '
        "kernel_size if stride is None else stride, padding, 1)",
    ),
    # the window ends rounded down instead of up: overlapping windows lose their last row.
    (
        "conv_adaptive_avg_pool",
        "start, end = (i * size) // out, -((-(i + 1) * size) // out)",
        "start, end = (i * size) // out, ((i + 1) * size) // out",
    ),
    # the rows normalised over the wrong axis: each input pixel's weights sum to 1 instead of each window's.
    (
        "conv_adaptive_avg_pool",
        "return inside / (end - start)[:, None]",
        "return inside / inside.sum(axis=0)",
    ),
    # sizes that divide: the output size used as the kernel size.
    (
        "conv_adaptive_avg_pool",
        "return avg_pool2d(x, (h // oh, w // ow))",
        "return avg_pool2d(x, (oh, ow))",
    ),
    # the window starts rounded up instead of down: overlapping windows lose their first row (a hidden test catches it).
    (
        "conv_adaptive_avg_pool",
        "start, end = (i * size) // out, -((-(i + 1) * size) // out)",
        "start, end = -((-i * size) // out), -((-(i + 1) * size) // out)",
    ),
    # avg_pool2d when either axis divides: the other axis's window is cut short (a hidden test with None catches it).
    ("conv_adaptive_avg_pool", "if h % oh == 0 and w % ow == 0:", "if h % oh == 0 or w % ow == 0:"),
    # BatchNorm2d reshapes NCHW as if it were channels-last: statistics over mixed-up channels.
    (
        "conv_batchnorm",
        "return super().forward(x.reshape(n, c, h * w)).reshape(n, c, h, w)",
        "return super().forward(x.reshape(n, h * w, c).transpose(1, 2)).transpose(1, 2).reshape(n, c, h, w)",
    ),
    # one value per channel refused in evaluation too (a hidden test catches it).
    ("conv_batchnorm", "if self.training and n * h * w < 2:", "if n * h * w < 2:"),
    # BatchNorm1d's rule copied: a batch of one image is refused though it has H·W values per channel.
    ("conv_batchnorm", "if self.training and n * h * w < 2:", "if self.training and n < 2:"),
    # the channel count not checked: BatchNorm1d's error, which names neither BatchNorm2d nor (N, C, H, W).
    ("conv_batchnorm", "if x.ndim != 4 or x.shape[1] != c:", "if x.ndim != 4:"),
    # only the channels checked: a 2-d or 3-d input fails on unpacking its shape, not with a ShapeError.
    ("conv_batchnorm", "if x.ndim != 4 or x.shape[1] != c:", "if x.shape[1] != c:"),
]
