"""One training step of a ReLU MLP: tinyflo vs hand-written NumPy vs PyTorch.

Run: ``python -m benchmarks.bench_mlp_step [--rounds N]``.

A step is forward, cross-entropy (log-softmax written out with max, exp, sum,
log and indexing), backward, and plain SGD on the parameters. The NumPy
variant derives the backward by hand — the same math, no framework — so
"× numpy" is what tinyflo's tensors and graph cost on top of the arithmetic.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import tinyflo
from benchmarks import common
from tinyflo.core.layers import Linear, ReLU, Sequential
from tinyflo.core.losses import cross_entropy
from tinyflo.core.optim import SGD

LR = 0.01
NUMPY = "numpy (hand-derived backward)"  # the baseline variant
GEMMS = "its matrix products alone (BLAS, no framework)"
OPS = "tinyflo (tensor ops)"
MODULES = "tinyflo (Linear, ReLU, cross_entropy)"
LOOP = "tinyflo (the same, as a training loop with optim.SGD)"


@dataclass(frozen=True)
class Shape:
    """An MLP ``sizes[0] - ... - sizes[-1]`` trained on batches of ``batch`` rows."""

    name: str
    sizes: tuple[int, ...]
    batch: int

    @property
    def flops(self) -> float:
        """Matmul FLOPs of one step: 3 × forward (backward = gradient of weights + of inputs)."""
        return 3 * sum(2 * self.batch * m * n for m, n in zip(self.sizes, self.sizes[1:]))


SHAPES = [Shape("large", (784, 512, 512, 10), 256), Shape("small (dispatch-bound)", (64, 64, 64, 10), 32)]


def initial_weights(shape: Shape, seed: int = 0) -> list[np.ndarray]:
    """He-initialised weights and zero biases, float32: [W1, b1, W2, b2, ...]."""
    rng = np.random.default_rng(seed)
    params = []
    for m, n in zip(shape.sizes, shape.sizes[1:]):
        params.append((rng.standard_normal((m, n)) * np.sqrt(2 / m)).astype(np.float32))
        params.append(np.zeros(n, np.float32))
    return params


def batch_of(shape: Shape, seed: int = 1) -> tuple[np.ndarray, np.ndarray]:
    """A random float32 input batch and int64 class labels."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((shape.batch, shape.sizes[0])).astype(np.float32)
    return x, rng.integers(0, shape.sizes[-1], shape.batch)


# ----- (a) tinyflo: tensor ops and autograd -------------------------------------------


def tinyflo_loss(params: list[tinyflo.Tensor], x: tinyflo.Tensor, y: np.ndarray) -> tinyflo.Tensor:
    """Mean cross-entropy of the MLP's logits, from tinyflo ops."""
    h = x
    for i in range(0, len(params), 2):
        h = h @ params[i] + params[i + 1]
        if i + 2 < len(params):
            h = h.relu()
    # Subtracting the row max keeps exp() finite; it is a constant, so it stays out of the graph.
    shifted = h - h.detach().max(axis=1, keepdims=True)
    log_probs = shifted - shifted.exp().sum(axis=1, keepdims=True).log()
    return -log_probs[np.arange(len(y)), y].mean()


def tinyflo_step(params: list[tinyflo.Tensor], x: tinyflo.Tensor, y: np.ndarray) -> tinyflo.Tensor:
    """Forward, backward, SGD update; returns the loss."""
    loss = tinyflo_loss(params, x, y)
    loss.backward()
    with tinyflo.no_grad():
        for p in params:
            p.data -= LR * p.grad.data
            p.grad = None
    return loss


# ----- (a') tinyflo modules: Linear, ReLU and cross_entropy ---------------------------


def tinyflo_model(weights: list[np.ndarray]):
    """A Sequential of Linear/ReLU layers holding ``weights`` (Linear keeps W as (out, in))."""
    layers = []
    for i in range(0, len(weights), 2):
        linear = Linear(*weights[i].shape)
        linear.weight.data[...] = weights[i].T
        linear.bias.data[...] = weights[i + 1]
        layers += [linear, ReLU()]
    return Sequential(*layers[:-1])


def tinyflo_nn_step(model, x: tinyflo.Tensor, y: tinyflo.Tensor) -> tinyflo.Tensor:
    """Forward through the modules, cross_entropy, backward, SGD update; returns the loss."""
    loss = cross_entropy(model(x), y)
    model.zero_grad()
    loss.backward()
    with tinyflo.no_grad():
        for p in model.parameters():
            p.data -= LR * p.grad.data
    return loss


def tinyflo_loop_step(model, optimizer, x: tinyflo.Tensor, y: tinyflo.Tensor) -> tinyflo.Tensor:
    """The training loop as a user writes it: zero_grad, forward, cross_entropy, backward, step."""
    optimizer.zero_grad()
    loss = cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


# ----- (b) NumPy by hand: the same forward, the backward derived on paper --------------


def numpy_loss_and_grads(params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> tuple[float, list[np.ndarray]]:
    """Mean cross-entropy and its gradient for every parameter, by hand."""
    rows = np.arange(len(y))
    inputs, pre = [x], []  # each layer's input, and the pre-activations of the hidden layers
    h = x
    for i in range(0, len(params), 2):
        h = h @ params[i] + params[i + 1]
        if i + 2 < len(params):
            pre.append(h)
            h = np.maximum(h, 0)
            inputs.append(h)
    shifted = h - h.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    total = e.sum(axis=1, keepdims=True)
    loss = -(shifted[rows, y] - np.log(total[:, 0])).mean()

    grad = e / total  # d loss / d logits = (softmax - one_hot) / batch
    grad[rows, y] -= 1
    grad /= len(y)
    grads = [None] * len(params)
    for i in reversed(range(0, len(params), 2)):
        grads[i] = inputs[i // 2].T @ grad
        grads[i + 1] = grad.sum(axis=0)
        if i > 0:
            grad = (grad @ params[i].T) * (pre[i // 2 - 1] > 0)
    return float(loss), grads


def numpy_step(params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    """Forward, hand-derived backward, SGD update; returns the loss."""
    loss, grads = numpy_loss_and_grads(params, x, y)
    for p, g in zip(params, grads):
        p -= LR * g
    return loss


def gemms_only(shape: Shape) -> Callable[[], None]:
    """The matrix products of numpy_step, with its shapes and layouts, and nothing else.

    Its time is what this machine's BLAS needs for a step's matmul work, so a variant's
    "GEMM share" (this time / the variant's) is the fraction of the machine's measured
    GEMM throughput that the variant's step reaches.
    """
    weights, (x, _) = initial_weights(shape), batch_of(shape)
    rng = np.random.default_rng(2)
    inputs = [x] + [rng.standard_normal((shape.batch, n)).astype(np.float32) for n in shape.sizes[1:-1]]
    grads = [rng.standard_normal((shape.batch, n)).astype(np.float32) for n in shape.sizes[1:]]
    layers = list(zip(inputs, weights[0::2], grads))

    def step() -> None:
        for i, (h, w, g) in enumerate(layers):
            h @ w  # forward
            h.T @ g  # weight gradient
            if i > 0:
                g @ w.T  # gradient of the layer's input (the first layer's input is data)

    return step


# ----- (c) PyTorch: the same ops, eager, CPU -----------------------------------------


def torch_loss(torch, params: list, x, y):
    """Mean cross-entropy of the MLP's logits, from the same torch ops as tinyflo_loss."""
    h = x
    for i in range(0, len(params), 2):
        h = h @ params[i] + params[i + 1]
        if i + 2 < len(params):
            h = h.relu()
    shifted = h - h.detach().max(dim=1, keepdim=True).values
    log_probs = shifted - shifted.exp().sum(dim=1, keepdim=True).log()
    return -log_probs[torch.arange(len(y)), y].mean()


def torch_step(torch, params: list, x, y):
    """Forward, backward, SGD update; returns the loss."""
    loss = torch_loss(torch, params, x, y)
    loss.backward()
    with torch.no_grad():
        for p in params:
            p -= LR * p.grad
            p.grad = None
    return loss


def torch_model(torch, weights: list[np.ndarray]):
    """torch.nn.Sequential of Linear/ReLU holding ``weights``."""
    layers = []
    for i in range(0, len(weights), 2):
        linear = torch.nn.Linear(*weights[i].shape)
        with torch.no_grad():
            linear.weight.copy_(torch.from_numpy(weights[i].T.copy()))
            linear.bias.copy_(torch.from_numpy(weights[i + 1]))
        layers += [linear, torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def torch_nn_step(torch, model, x, y):
    """Forward, F.cross_entropy, backward, SGD update; returns the loss."""
    loss = torch.nn.functional.cross_entropy(model(x), y)
    model.zero_grad(set_to_none=True)
    loss.backward()
    with torch.no_grad():
        for p in model.parameters():
            p -= LR * p.grad
    return loss


def torch_loop_step(torch, model, optimizer, x, y):
    """zero_grad, forward, F.cross_entropy, backward, optimizer.step(); returns the loss."""
    optimizer.zero_grad(set_to_none=True)
    loss = torch.nn.functional.cross_entropy(model(x), y)
    loss.backward()
    optimizer.step()
    return loss


# ----- checking, then timing ------------------------------------------------------------


def step_variants(shape: Shape, torch) -> dict[str, Callable[[], object]]:
    """One step closure per library, each training its own copy of the same initial weights."""
    weights, (x, y) = initial_weights(shape), batch_of(shape)
    numpy_params = [w.copy() for w in weights]
    tf_params = [tinyflo.tensor(w, requires_grad=True) for w in weights]
    tf_x = tinyflo.tensor(x)
    tf_model, tf_y = tinyflo_model(weights), tinyflo.tensor(y)
    variants = {
        NUMPY: lambda: numpy_step(numpy_params, x, y),
        OPS: lambda: tinyflo_step(tf_params, tf_x, y),
        MODULES: lambda: tinyflo_nn_step(tf_model, tf_x, tf_y),
    }
    loop_model = tinyflo_model(weights)
    loop_optimizer = SGD(loop_model.parameters(), lr=LR)
    variants[LOOP] = lambda: tinyflo_loop_step(loop_model, loop_optimizer, tf_x, tf_y)
    if torch is not None:
        t_params = [torch.tensor(w, requires_grad=True) for w in weights]
        t_x, t_y = torch.from_numpy(x), torch.from_numpy(y)
        t_model = torch_model(torch, weights)
        variants["torch (tensor ops)"] = lambda: torch_step(torch, t_params, t_x, t_y)
        variants["torch (nn.Linear, F.cross_entropy)"] = lambda: torch_nn_step(torch, t_model, t_x, t_y)
        t_loop_model = torch_model(torch, weights)
        t_optimizer = torch.optim.SGD(t_loop_model.parameters(), lr=LR)
        variants["torch (the same loop with optim.SGD)"] = lambda: torch_loop_step(
            torch, t_loop_model, t_optimizer, t_x, t_y)
    return variants


def check_same_math(shape: Shape, torch) -> None:
    """All variants give the same loss and gradients from the same weights, or nothing is timed."""
    weights, (x, y) = initial_weights(shape), batch_of(shape)
    loss, grads = numpy_loss_and_grads(weights, x, y)

    params = [tinyflo.tensor(w, requires_grad=True) for w in weights]
    tf_loss = tinyflo_loss(params, tinyflo.tensor(x), y)
    tf_loss.backward()
    results = {"tinyflo": (tf_loss.item(), [p.grad.numpy() for p in params])}
    assert all(p.grad.dtype == tinyflo.float32 for p in params), "a gradient drifted from float32"
    if torch is not None:
        tparams = [torch.tensor(w, requires_grad=True) for w in weights]
        t_loss = torch_loss(torch, tparams, torch.from_numpy(x), torch.from_numpy(y))
        t_loss.backward()
        results["torch"] = (t_loss.item(), [p.grad.numpy() for p in tparams])
    for name, (other_loss, other_grads) in results.items():
        np.testing.assert_allclose(other_loss, loss, rtol=1e-5, err_msg=f"{name} loss differs from numpy's")
        for i, (g, expected) in enumerate(zip(other_grads, grads)):
            scale = np.abs(expected).max()
            np.testing.assert_allclose(
                g, expected, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{name} gradient {i} differs from numpy's"
            )
    # The timed step functions themselves (update included) must follow the same trajectory.
    trajectories = {
        name: [loss if isinstance(loss, float) else loss.item() for loss in (step() for _ in range(5))]
        for name, step in step_variants(shape, torch).items()
    }
    expected_losses = trajectories.pop(NUMPY)
    for name, losses in trajectories.items():
        np.testing.assert_allclose(losses, expected_losses, rtol=1e-4, err_msg=f"{name} trains differently from numpy")


def main(rounds: int = 11) -> tuple[Path, Path]:
    """Measure, print and save ``results/mlp_step.{json,md}``."""
    torch = common.optional_torch()
    tables, all_timings = [], {}
    for shape in SHAPES:
        check_same_math(shape, torch)
        variants = step_variants(shape, torch) | {GEMMS: gemms_only(shape)}
        timings = common.compare(variants, baseline=NUMPY, rounds=rounds)
        gemm_s = timings[GEMMS].median_s
        rows = [
            [name, t.median_s * 1e3, t.ratio, shape.flops / t.median_s / 1e9, f"{gemm_s / t.median_s:.0%}",
             f"{t.spread:.0%}"]
            for name, t in timings.items()
        ]
        sizes = "-".join(map(str, shape.sizes))
        tables.append(
            common.Table(
                f"{shape.name}: {sizes} MLP, batch {shape.batch} ({shape.flops / 1e9:.3g} GFLOP per step)",
                ["variant", "ms/step", "× numpy", "GFLOP/s", "GEMM share", "IQR"],
                rows,
            )
        )
        all_timings |= {f"{shape.name}: {name}": t for name, t in timings.items()}
    notes = [
        "Each variant trains its own copy of the same initial weights on one fixed batch; "
        "before timing, the loss and all gradients of tinyflo and torch are checked against "
        "NumPy's (rtol 1e-4, atol 1e-5 × largest gradient), and so are the losses of five steps "
        "of the timed step functions themselves.",
        "GFLOP per step is the usual nominal count, matmuls only: 3 × the forward's "
        "2·batch·fan_in·fan_out summed over layers (6·batch·weights). It includes the gradient with "
        "respect to the input batch, which no variant computes (0.21 of the large step's 1.03 GFLOP).",
        "'tensor ops' variants write log-softmax out: x - max (a detached constant), exp, sum, log, "
        "then the label entries picked by integer indexing and averaged; torch uses the same ops. "
        "The module variants use tinyflo's Linear/ReLU/Sequential and cross_entropy (module 03/04) "
        "and torch.nn.Linear/ReLU with F.cross_entropy. The module variants update the parameters "
        "in a loop over model.parameters(); the training-loop variants do what a training loop "
        "does: optimizer.zero_grad(), forward, loss, backward, optimizer.step() with plain SGD.",
        f"GEMM share: the time of '{GEMMS}' — numpy_step's eight matrix products with the same "
        "shapes and layouts, timed in the same rounds — over the variant's time: the fraction of "
        "this machine's measured GEMM throughput that the whole step reaches (100% would be a step "
        "that costs nothing but its matmuls).",
        "IQR: interquartile range of the rounds relative to the median.",
    ]
    if torch is None:
        notes.append("PyTorch is not installed: its variant is left out.")
    paths = common.save_result(
        "mlp_step",
        "MLP training step",
        "Milliseconds per training step (forward, cross-entropy, backward, SGD) of a ReLU MLP in "
        "float32, tinyflo against a hand-written NumPy step and PyTorch on the CPU.",
        tables,
        all_timings,
        {"rounds": rounds, "dtype": "float32", "learning_rate": LR, "optimizer": "plain SGD"},
        notes,
    )
    return paths


if __name__ == "__main__":
    main(common.parse_args(__doc__.splitlines()[0]).rounds)
