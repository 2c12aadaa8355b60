"""One training step of a ReLU MLP: tinyflo vs hand-written NumPy (or CuPy) vs PyTorch.

Run: ``python -m benchmarks.bench_mlp_step [--rounds N] [--device cuda:0]``.

A step is forward, cross-entropy (log-softmax written out with max, exp, sum,
log and indexing), backward, and plain SGD on the parameters. The NumPy
variant derives the backward by hand — the same math, no framework — so
"× numpy" is what tinyflo's tensors and graph cost on top of the arithmetic.
On a GPU the same hand-written step runs on CuPy, the large MLP trains on
batches of 4096, and PyTorch runs on CUDA in the same process; the target is
tinyflo's training loop within 1.3× of PyTorch's.
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
NUMPY = "numpy (hand-derived backward)"  # the baseline variant (CuPy's on a GPU: see hand_label)
GEMMS = "its matrix products alone (BLAS, no framework)"
OPS = "tinyflo (tensor ops)"
MODULES = "tinyflo (Linear, ReLU, cross_entropy)"
LOOP = "tinyflo (the same, as a training loop with optim.SGD)"
TORCH_OPS = "torch (tensor ops)"
TORCH_MODULES = "torch (nn.Linear, F.cross_entropy)"
TORCH_LOOP = "torch (the same loop with optim.SGD)"
TORCH_OF = {OPS: TORCH_OPS, MODULES: TORCH_MODULES, LOOP: TORCH_LOOP}  # each tinyflo variant's torch twin
GPU_TARGET = 1.3  # tinyflo's training loop at most this many times torch CUDA's, large MLP


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
GPU_SHAPES = [Shape("large", (784, 512, 512, 10), 4096), SHAPES[1]]
GPU_GRAD_TOLERANCE = 1e-2  # a gradient's error relative to its norm, against NumPy's, on a GPU (check_same_math)
SMOKE_SHAPES = [Shape("large", (32, 16, 16, 4), 8), Shape("small (dispatch-bound)", (8, 8, 8, 4), 4)]


def shapes_for(device: str, smoke: bool) -> list[Shape]:
    """The MLPs measured: a GPU gets a GPU-sized batch for the large one."""
    return SMOKE_SHAPES if smoke else GPU_SHAPES if common.is_gpu(device) else SHAPES


def hand_label(device: str) -> str:
    """The hand-written baseline's name: NumPy's on the CPU, CuPy's on a GPU."""
    return NUMPY.replace("numpy", "cupy") if common.is_gpu(device) else NUMPY


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


def tinyflo_loss(params: list[tinyflo.Tensor], x: tinyflo.Tensor, rows, y) -> tinyflo.Tensor:
    """Mean cross-entropy of the MLP's logits, from tinyflo ops (``rows``: 0..batch-1, on x's device)."""
    h = x
    for i in range(0, len(params), 2):
        h = h @ params[i] + params[i + 1]
        if i + 2 < len(params):
            h = h.relu()
    # Subtracting the row max keeps exp() finite; it is a constant, so it stays out of the graph.
    shifted = h - h.detach().max(axis=1, keepdims=True)
    log_probs = shifted - shifted.exp().sum(axis=1, keepdims=True).log()
    return -log_probs[rows, y].mean()


def tinyflo_step(params: list[tinyflo.Tensor], x: tinyflo.Tensor, rows, y) -> tinyflo.Tensor:
    """Forward, backward, SGD update; returns the loss."""
    loss = tinyflo_loss(params, x, rows, y)
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


def numpy_loss_and_grads(params: list, x, y, xp=np) -> tuple:
    """Mean cross-entropy (a 0-d array) and its gradient for every parameter, by hand, with NumPy or CuPy ``xp``."""
    rows = xp.arange(len(y))
    inputs, pre = [x], []  # each layer's input, and the pre-activations of the hidden layers
    h = x
    for i in range(0, len(params), 2):
        h = h @ params[i] + params[i + 1]
        if i + 2 < len(params):
            pre.append(h)
            h = xp.maximum(h, 0)
            inputs.append(h)
    shifted = h - h.max(axis=1, keepdims=True)
    e = xp.exp(shifted)
    total = e.sum(axis=1, keepdims=True)
    loss = -(shifted[rows, y] - xp.log(total[:, 0])).mean()

    grad = e / total  # d loss / d logits = (softmax - one_hot) / batch
    grad[rows, y] -= 1
    grad /= len(y)
    grads = [None] * len(params)
    for i in reversed(range(0, len(params), 2)):
        grads[i] = inputs[i // 2].T @ grad
        grads[i + 1] = grad.sum(axis=0)
        if i > 0:
            grad = (grad @ params[i].T) * (pre[i // 2 - 1] > 0)
    return loss, grads


def numpy_step(params: list, x, y, xp=np):
    """Forward, hand-derived backward, SGD update; returns the loss (a 0-d array: no read from a GPU)."""
    loss, grads = numpy_loss_and_grads(params, x, y, xp)
    for p, g in zip(params, grads):
        p -= LR * g
    return loss


def gemms_only(shape: Shape, xp=np) -> Callable[[], None]:
    """The matrix products of numpy_step, with its shapes and layouts, and nothing else.

    Its time is what this machine's BLAS needs for a step's matmul work, so a variant's
    "GEMM share" (this time / the variant's) is the fraction of the machine's measured
    GEMM throughput that the variant's step reaches.
    """
    weights, (x, _) = initial_weights(shape), batch_of(shape)
    rng = np.random.default_rng(2)
    inputs = [x] + [rng.standard_normal((shape.batch, n)).astype(np.float32) for n in shape.sizes[1:-1]]
    grads = [rng.standard_normal((shape.batch, n)).astype(np.float32) for n in shape.sizes[1:]]
    layers = [(xp.asarray(h), xp.asarray(w), xp.asarray(g)) for h, w, g in zip(inputs, weights[0::2], grads)]

    def step() -> None:
        for i, (h, w, g) in enumerate(layers):
            h @ w  # forward
            h.T @ g  # weight gradient
            if i > 0:
                g @ w.T  # gradient of the layer's input (the first layer's input is data)

    return step


# ----- (c) PyTorch: the same ops, eager, on the CPU or CUDA --------------------------


def torch_loss(torch, params: list, x, rows, y):
    """Mean cross-entropy of the MLP's logits, from the same torch ops as tinyflo_loss."""
    h = x
    for i in range(0, len(params), 2):
        h = h @ params[i] + params[i + 1]
        if i + 2 < len(params):
            h = h.relu()
    shifted = h - h.detach().max(dim=1, keepdim=True).values
    log_probs = shifted - shifted.exp().sum(dim=1, keepdim=True).log()
    return -log_probs[rows, y].mean()


def torch_step(torch, params: list, x, rows, y):
    """Forward, backward, SGD update; returns the loss."""
    loss = torch_loss(torch, params, x, rows, y)
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


def step_variants(shape: Shape, torch, device: str = "cpu", torch_on: str | None = "cpu") -> dict[str, Callable[[], object]]:
    """One step closure per library, each training its own copy of the same initial weights on ``device``.

    ``torch_on`` is torch's device (None leaves torch out).
    """
    weights, (x, y) = initial_weights(shape), batch_of(shape)
    xp = tinyflo.device(device).xp
    with tinyflo.device(device):
        hand_params, hand_x, hand_y = [xp.array(w) for w in weights], xp.array(x), xp.array(y)
    tf_params = [tinyflo.tensor(w, requires_grad=True, device=device) for w in weights]
    tf_x, tf_y = tinyflo.tensor(x, device=device), tinyflo.tensor(y, device=device)
    tf_rows = tinyflo.arange(shape.batch, device=device)
    tf_model = tinyflo_model(weights).to(device)
    variants = {
        hand_label(device): lambda: numpy_step(hand_params, hand_x, hand_y, xp),
        OPS: lambda: tinyflo_step(tf_params, tf_x, tf_rows, tf_y),
        MODULES: lambda: tinyflo_nn_step(tf_model, tf_x, tf_y),
    }
    loop_model = tinyflo_model(weights).to(device)
    loop_optimizer = SGD(loop_model.parameters(), lr=LR)
    variants[LOOP] = lambda: tinyflo_loop_step(loop_model, loop_optimizer, tf_x, tf_y)
    if torch is not None and torch_on is not None:
        t_params = [torch.tensor(w, requires_grad=True, device=torch_on) for w in weights]
        t_x, t_y = torch.from_numpy(x).to(torch_on), torch.from_numpy(y).to(torch_on)
        t_rows = torch.arange(shape.batch, device=torch_on)
        t_model = torch_model(torch, weights).to(torch_on)
        variants[TORCH_OPS] = lambda: torch_step(torch, t_params, t_x, t_rows, t_y)
        variants[TORCH_MODULES] = lambda: torch_nn_step(torch, t_model, t_x, t_y)
        t_loop_model = torch_model(torch, weights).to(torch_on)
        t_optimizer = torch.optim.SGD(t_loop_model.parameters(), lr=LR)
        variants[TORCH_LOOP] = lambda: torch_loop_step(torch, t_loop_model, t_optimizer, t_x, t_y)
    return variants


def check_same_math(shape: Shape, torch, device: str = "cpu", torch_on: str | None = "cpu") -> None:
    """All variants give the same loss and gradients from the same weights, or nothing is timed."""
    weights, (x, y) = initial_weights(shape), batch_of(shape)
    loss, grads = numpy_loss_and_grads(weights, x, y)

    params = [tinyflo.tensor(w, requires_grad=True, device=device) for w in weights]
    rows = tinyflo.arange(shape.batch, device=device)
    tf_loss = tinyflo_loss(params, tinyflo.tensor(x, device=device), rows, tinyflo.tensor(y, device=device))
    tf_loss.backward()
    results = {"tinyflo": (tf_loss.item(), [p.grad.numpy() for p in params])}
    assert all(p.grad.dtype == tinyflo.float32 for p in params), "a gradient drifted from float32"
    if torch is not None and torch_on is not None:
        tparams = [torch.tensor(w, requires_grad=True, device=torch_on) for w in weights]
        t_loss = torch_loss(torch, tparams, torch.from_numpy(x).to(torch_on),
                            torch.arange(shape.batch, device=torch_on), torch.from_numpy(y).to(torch_on))
        t_loss.backward()
        results["torch"] = (t_loss.item(), [p.grad.cpu().numpy() for p in tparams])
    gpu = common.is_gpu(device)
    loss_rtol = 1e-4 if gpu else 1e-5  # a GPU sums in another order
    for name, (other_loss, other_grads) in results.items():
        np.testing.assert_allclose(other_loss, loss, rtol=loss_rtol, err_msg=f"{name} loss differs from numpy's")
        for i, (g, expected) in enumerate(zip(other_grads, grads)):
            if gpu:
                # Summed in another order, a hidden unit within rounding of 0 can fall on the other side of its
                # ReLU and move a whole row of the first layer's gradient: at batch 4096, NumPy's own float32
                # gradient differs from float64's by 1e-3 of its norm. Wrong math differs by about 1.
                error = float(np.linalg.norm(g - expected) / np.linalg.norm(expected))
                assert error < GPU_GRAD_TOLERANCE, (f"{name} gradient {i} differs from numpy's by {error:.2e} of "
                                                    f"its norm (at most {GPU_GRAD_TOLERANCE:g} on a GPU)")
                continue
            scale = np.abs(expected).max()
            np.testing.assert_allclose(
                g, expected, rtol=1e-4, atol=1e-5 * scale, err_msg=f"{name} gradient {i} differs from numpy's"
            )
    # The timed step functions themselves (update included) must follow the same trajectory.
    trajectories = {
        name: [float(loss.item()) for loss in (step() for _ in range(5))]
        for name, step in step_variants(shape, torch, device, torch_on).items()
    }
    expected_losses = trajectories.pop(hand_label(device))
    for name, losses in trajectories.items():
        np.testing.assert_allclose(losses, expected_losses, rtol=1e-4, err_msg=f"{name} trains differently from numpy")


def main(rounds: int = 11, device: str = "cpu", smoke: bool = False, out: str | None = None) -> tuple[Path, Path]:
    """Measure, print and save ``results/mlp_step.{json,md}`` (``mlp_step_cuda`` on a GPU)."""
    torch = common.optional_torch()
    torch_on, torch_missing = common.torch_device(torch, device)
    sync = common.device_sync(device, torch_on)
    hand, gpu = hand_label(device), common.is_gpu(device)
    tables, all_timings, targets = [], {}, []
    for shape in shapes_for(device, smoke):
        check_same_math(shape, torch, device, torch_on)
        variants = step_variants(shape, torch, device, torch_on) | {GEMMS: gemms_only(shape, tinyflo.device(device).xp)}
        timings = common.compare(variants, baseline=hand, rounds=rounds, sync=sync)
        gemm_s = timings[GEMMS].median_s
        rows = [
            [name, t.median_s * 1e3, t.ratio,
             t.median_s / timings[TORCH_OF[name]].median_s if TORCH_OF.get(name) in timings else float("nan"),
             shape.flops / t.median_s / 1e9, f"{gemm_s / t.median_s:.0%}", f"{t.spread:.0%}"]
            for name, t in timings.items()
        ]
        sizes = "-".join(map(str, shape.sizes))
        tables.append(
            common.Table(
                f"{shape.name}: {sizes} MLP, batch {shape.batch} ({shape.flops / 1e9:.3g} GFLOP per step)",
                ["variant", "ms/step", f"× {hand.split()[0]}", "× torch", "GFLOP/s", "GEMM share", "IQR"],
                rows,
            )
        )
        all_timings |= {f"{shape.name}: {name}": t for name, t in timings.items()}
        if gpu and shape is shapes_for(device, smoke)[0]:
            ratio = timings[LOOP].median_s / timings[TORCH_LOOP].median_s if TORCH_LOOP in timings else None
            targets.append(common.Target(
                f"{sizes} MLP at batch {shape.batch}: tinyflo's training loop vs torch CUDA's (× torch)",
                ratio, GPU_TARGET, note=torch_missing or (common.SMOKE_NOTE if smoke else ""), judged=not smoke))
    notes = [
        "Each variant trains its own copy of the same initial weights on one fixed batch; "
        "before timing, the loss and all gradients of tinyflo and torch are checked against "
        "NumPy's (rtol 1e-4, atol 1e-5 × largest gradient; on a GPU, which sums in another order and so "
        f"can put a near-zero ReLU input on its other side, within {GPU_GRAD_TOLERANCE:g} of each gradient's norm), "
        "and so are the losses of five steps of the timed step functions themselves.",
        "GFLOP per step is the usual nominal count, matmuls only: 3 × the forward's "
        "2·batch·fan_in·fan_out summed over layers (6·batch·weights). It includes the gradient with "
        "respect to the input batch, which no variant computes (0.21 of the large step's 1.03 GFLOP at batch 256).",
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
        "× torch: the variant's time over its torch twin's (tensor ops, modules, training loop).",
        "IQR: interquartile range of the rounds relative to the median.",
    ]
    notes = common.run_notes(notes, device, smoke, torch_missing,
                             ", not how fast Python queues kernels; the hand-written step runs on CuPy")
    where = common.where(device)
    return common.save_result(
        common.result_name("mlp_step", device),
        "MLP training step" + (f" on {device}" if gpu else ""),
        "Milliseconds per training step (forward, cross-entropy, backward, SGD) of a ReLU MLP in "
        f"float32, tinyflo against a hand-written {hand.split()[0]} step and PyTorch, {where}.",
        tables,
        all_timings,
        {"rounds": rounds, "dtype": "float32", "learning_rate": LR, "optimizer": "plain SGD", "device": device,
         "smoke": smoke},
        notes,
        targets=targets,
        device=device,
        out=out,
    )


if __name__ == "__main__":
    main(**vars(common.parse_args(__doc__.splitlines()[0], devices=True)))
