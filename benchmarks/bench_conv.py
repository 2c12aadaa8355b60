"""LeNet-5 forward + backward at batch 128 on 28×28 images: tinyflo vs PyTorch CPU.

Run: ``python -m benchmarks.bench_conv [--rounds N]``.

Three comparisons, each in one interleaved run: the whole LeNet-5 (module 10's ``LeNet5``:
conv 5×5 → 6 with padding 2, ReLU, max-pool, conv 5×5 → 16, ReLU, max-pool, 120, 84, 10),
forward, cross-entropy and backward (no optimizer step); and each of its two convolutions
alone, forward and backward (the first without an input gradient, as for a data batch).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

import tinyflo
from benchmarks import common
from tinyflo.core.conv import LeNet5, conv2d
from tinyflo.core.losses import cross_entropy

BATCH = 128

# name: (input shape, weight shape, padding, input needs a gradient)
CONVS = {
    "conv1 1→6 5×5 pad 2 on 28×28": ((BATCH, 1, 28, 28), (6, 1, 5, 5), 2, False),
    "conv2 6→16 5×5 on 14×14": ((BATCH, 6, 14, 14), (16, 6, 5, 5), 0, True),
}


def conv_flops(x_shape: tuple[int, ...], w_shape: tuple[int, ...], padding: int, input_grad: bool) -> float:
    """Nominal FLOPs of forward + backward: 2·N·OC·OH·OW·C·KH·KW per GEMM, 2 or 3 GEMMs."""
    n, c, h, w = x_shape
    oc, _, kh, kw = w_shape
    oh, ow = h + 2 * padding - kh + 1, w + 2 * padding - kw + 1
    return (3 if input_grad else 2) * 2 * n * oc * oh * ow * c * kh * kw


def lenet_flops() -> float:
    """Nominal FLOPs of the LeNet forward + backward: its convolutions and linear layers."""
    convs = sum(conv_flops(*spec) for spec in CONVS.values())
    return convs + 3 * 2 * BATCH * (400 * 120 + 120 * 84 + 84 * 10)


def batch(seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((BATCH, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, BATCH)


def torch_lenet(torch, model: LeNet5):
    """The same network in torch.nn, holding copies of ``model``'s weights."""
    nn, F = torch.nn, torch.nn.functional

    class TorchLeNet5(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1, self.conv2 = nn.Conv2d(1, 6, 5, padding=2), nn.Conv2d(6, 16, 5)
            self.fc1, self.fc2, self.fc3 = nn.Linear(400, 120), nn.Linear(120, 84), nn.Linear(84, 10)

        def forward(self, x):
            x = F.max_pool2d(F.relu(self.conv1(x)), 2)
            x = F.max_pool2d(F.relu(self.conv2(x)), 2)
            return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x.flatten(1))))))

    net = TorchLeNet5()
    state = {k: torch.from_numpy(v.numpy().copy()) for k, v in model.state_dict().items()}
    net.load_state_dict(state)
    return net


def lenet_variants(torch) -> tuple[dict[str, Callable[[], object]], Callable[[], dict], Callable[[], dict]]:
    """The timed steps, and for checking: functions returning (loss, gradients) of each library."""
    tinyflo.manual_seed(0)
    model = LeNet5()
    x, y = batch()
    tx, ty = tinyflo.tensor(x), tinyflo.tensor(y)

    def tinyflo_step():
        model.zero_grad()
        loss = cross_entropy(model(tx), ty)
        loss.backward()
        return loss

    def tinyflo_result():
        loss = tinyflo_step()
        return {"loss": loss.item()} | {k: p.grad.numpy() for k, p in model.named_parameters()}

    variants = {"tinyflo": tinyflo_step}
    torch_result = None
    if torch is not None:
        net = torch_lenet(torch, model)
        px, py = torch.from_numpy(x), torch.from_numpy(y)

        def torch_step():
            net.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(net(px), py)
            loss.backward()
            return loss

        def torch_result():
            loss = torch_step()
            return {"loss": loss.item()} | {k: p.grad.numpy() for k, p in net.named_parameters()}

        variants["torch"] = torch_step
    return variants, tinyflo_result, torch_result


def conv_variants(torch, spec) -> dict[str, Callable[[], object]]:
    """Forward + backward of one convolution (sum of the output as the loss) in each library."""
    x_shape, w_shape, padding, input_grad = spec
    rng = np.random.default_rng(1)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in (x_shape, w_shape, w_shape[:1]))
    tx = tinyflo.tensor(x, requires_grad=input_grad)
    tw, tb = tinyflo.tensor(w, requires_grad=True), tinyflo.tensor(b, requires_grad=True)

    def tinyflo_step():
        tw.grad = tb.grad = tx.grad = None
        conv2d(tx, tw, tb, padding=padding).sum().backward()
        return tw.grad

    variants = {"tinyflo": tinyflo_step}
    if torch is not None:
        px = torch.tensor(x, requires_grad=input_grad)
        pw, pb = torch.tensor(w, requires_grad=True), torch.tensor(b, requires_grad=True)

        def torch_step():
            pw.grad = pb.grad = px.grad = None
            torch.nn.functional.conv2d(px, pw, pb, padding=padding).sum().backward()
            return pw.grad

        variants["torch"] = torch_step
        np.testing.assert_allclose(tinyflo_step().numpy(), torch_step().numpy(), rtol=1e-3,
                                   atol=1e-3 * float(np.abs(torch_step().numpy()).max()))
    return variants


def check_same_math(tinyflo_result, torch_result) -> None:
    """Loss and every gradient of the LeNet step agree with torch's, or nothing is timed."""
    ours = tinyflo_result()
    assert all(v.dtype == np.float32 for k, v in ours.items() if k != "loss"), "a gradient drifted from float32"
    if torch_result is None:
        return
    theirs = torch_result()
    np.testing.assert_allclose(ours.pop("loss"), theirs.pop("loss"), rtol=1e-5)
    for key, grad in ours.items():
        scale = np.abs(theirs[key]).max()
        np.testing.assert_allclose(grad, theirs[key], rtol=1e-3, atol=1e-4 * scale, err_msg=key)


def main(rounds: int = 11) -> tuple[Path, Path]:
    """Measure, print and save ``results/conv.{json,md}``."""
    torch = common.optional_torch()
    variants, tinyflo_result, torch_result = lenet_variants(torch)
    check_same_math(tinyflo_result, torch_result)
    comparisons = {"LeNet-5 forward + cross-entropy + backward": (variants, lenet_flops())}
    for name, spec in CONVS.items():
        comparisons[f"{name}: forward + backward"] = (conv_variants(torch, spec), conv_flops(*spec))
    tables, all_timings = [], {}
    for title, (steps, flops) in comparisons.items():
        timings = common.compare(steps, baseline="torch" if torch is not None else "tinyflo", rounds=rounds)
        rows = [[name, t.median_s * 1e3, t.ratio, flops / t.median_s / 1e9, f"{t.spread:.0%}"]
                for name, t in timings.items()]
        tables.append(common.Table(f"{title}, batch {BATCH}, float32 ({flops / 1e9:.3g} GFLOP)",
                                   ["variant", "ms", "× torch", "GFLOP/s", "IQR"], rows))
        all_timings |= {f"{title}: {name}": t for name, t in timings.items()}
    notes = [
        "Before timing, the LeNet loss and every parameter gradient of tinyflo are checked against "
        "torch's from the same weights and batch (rtol 1e-3, atol 1e-4 × largest gradient), and each "
        "convolution's weight gradient likewise.",
        "tinyflo convolves by unfolding each image's windows (a strided view copied into an (N, C·KH·KW, "
        "OH·OW) array) and one GEMM per image in a single broadcast matmul, whose result is already NCHW; "
        "its backward folds the column gradient back with KH·KW strided additions.",
        "GFLOP counts only the nominal GEMM work: 2·N·OC·OH·OW·C·KH·KW per convolution GEMM (forward, "
        "weight gradient, and the input gradient where one is needed), 6·batch·weights for the linear layers.",
        "IQR: interquartile range of the rounds relative to the median.",
    ]
    if torch is None:
        notes.append("PyTorch is not installed: its variant is left out.")
    return common.save_result(
        "conv",
        "LeNet-5 and convolution forward + backward",
        "Milliseconds per forward + backward of LeNet-5 and of its convolutions alone at batch 128 on "
        "28×28 float32 images, tinyflo against PyTorch on the CPU.",
        tables,
        all_timings,
        {"rounds": rounds, "dtype": "float32", "batch": BATCH},
        notes,
    )


if __name__ == "__main__":
    main(common.parse_args(__doc__.splitlines()[0]).rounds)
