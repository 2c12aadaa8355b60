"""Seeded mutants of 03_layers: (task, exact text in the module, wrong replacement)."""

MUTANTS = [
    # BatchNorm's running variance left biased (PyTorch keeps the unbiased one).
    ("layers_norm", "var.data * (n / (n - 1))", "var.data"),
    # log_softmax without subtracting the max: exp overflows for large logits.
    ("layers_softmax", "shifted = a - a.max(axis=axis, keepdims=True)", "shifted = a"),
    # dropout that is not inverted: the survivors are not scaled up.
    (
        "layers_dropout",
        "scale = mask.astype(x.dtype) * x.dtype.type(1 / keep)",
        "scale = mask.astype(x.dtype)",
    ),
    # load_state_dict rebinds the detached view instead of writing into the parameter.
    ("layers_state_dict", "target.data[...] = array", "target.data = array"),
    # Kaiming's uniform bound taken as the standard deviation (√3 too narrow).
    ("layers_init", "bound = math.sqrt(3.0) * std", "bound = std"),
    # tied weights listed (and so updated) twice.
    ("layers_module", "if t is None or id(t) in seen:", "if t is None:"),
    # exact GELU's derivative without the x·φ(x) term.
    ("layers_activations", "return grad * (cdf + a * pdf)", "return grad * cdf"),
]
