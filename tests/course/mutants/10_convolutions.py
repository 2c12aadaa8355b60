"""Seeded mutants of 10_convolutions: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # col2im overwrites where windows overlap instead of adding their contributions.
    ('conv_im2col', "j * dw + sw * (ow - 1) + 1:sw] += windows[..., i, j]", "j * dw + sw * (ow - 1) + 1:sw] = windows[..., i, j]"),
    # the stride forgotten in backward: the column gradient folded back as if stride were 1.
    ('conv_conv2d', "grad_x = _fold(win, self.x_shape, *self.geometry)",
      "grad_x = _fold(win, self.x_shape, self.geometry[0], (1, 1), *self.geometry[2:])"),
    # BatchNorm2d reshapes NCHW as if it were channels-last: statistics over mixed-up channels.
    ('conv_batchnorm', "return super().forward(x.reshape(n, c, h * w)).reshape(n, c, h, w)",
      "return super().forward(x.reshape(n, h * w, c).transpose(1, 2)).transpose(1, 2).reshape(n, c, h, w)"),
    # max pooling sends the gradient to every element of the window, not to its maximum.
    ('conv_pool', "dx[:, :, rows, cols] += xp.where(first, grad, zero)", "dx[:, :, rows, cols] += grad"),
    # ties not broken: every maximum of a window gets the gradient (a hidden test catches it).
    ('conv_pool', "first = (win[..., i, j] == out) & ~taken", "first = win[..., i, j] == out"),
    # the running maximum starts from zero, not from the first offset: all-negative windows pool to 0.
    ('conv_pool', "out = win[..., 0, 0].copy()", "out = xp.zeros_like(win[..., 0, 0])"),
    # count_include_pad=False ignored (a hidden test catches it).
    ('conv_pool', "if count_include_pad or padding == (0, 0):", "if True:"),
]
