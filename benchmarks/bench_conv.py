"""LeNet-5 forward + backward and training step at batch 128 on 28×28 images: tinyflo vs PyTorch.

Run: ``python -m benchmarks.bench_conv [--rounds N] [--device cuda:0]``.

Four comparisons, each in one interleaved run: the whole LeNet-5 (module 10's ``LeNet5``:
conv 5×5 → 6 with padding 2, ReLU, max-pool, conv 5×5 → 16, ReLU, max-pool, 120, 84, 10),
forward, cross-entropy and backward (no optimizer step); its training step (the same, then
SGD with momentum); and each of its two convolutions alone, forward and backward (the first
without an input gradient, as for a data batch). Each table also times the same GEMM
shapes alone and gives every variant's share of that GEMM throughput. On a GPU, PyTorch
runs on CUDA in the same process, the training step is also measured at batch 1024, and the
target is tinyflo's training step at batch 128 within 1.5× of PyTorch's.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

import tinyflo
from benchmarks import common
from tinyflo.core.conv import BATCH_LAST_POSITIONS, LeNet5, conv2d
from tinyflo.core.losses import cross_entropy
from tinyflo.core.optim import SGD

BATCH = 128
GPU_BATCH = 1024  # a GPU-sized batch, measured beside BATCH on a GPU
SMOKE_BATCH = 4
GPU_TARGET = 1.5  # tinyflo's LeNet-5 training step at most this many times torch CUDA's, batch BATCH
LR, MOMENTUM = 0.01, 0.9

# name: (input shape, weight shape, padding, input needs a gradient)
CONVS = {
    "conv1 1→6 5×5 pad 2 on 28×28": ((BATCH, 1, 28, 28), (6, 1, 5, 5), 2, False),
    "conv2 6→16 5×5 on 14×14": ((BATCH, 6, 14, 14), (16, 6, 5, 5), 0, True),
}


def convs(batch: int) -> dict[str, tuple]:
    """CONVS at another batch size."""
    return {name: ((batch, *x[1:]), w, pad, grad) for name, (x, w, pad, grad) in CONVS.items()}


def conv_flops(x_shape: tuple[int, ...], w_shape: tuple[int, ...], padding: int, input_grad: bool) -> float:
    """Nominal FLOPs of forward + backward: 2·N·OC·OH·OW·C·KH·KW per GEMM, 2 or 3 GEMMs."""
    n, c, h, w = x_shape
    oc, _, kh, kw = w_shape
    oh, ow = h + 2 * padding - kh + 1, w + 2 * padding - kw + 1
    return (3 if input_grad else 2) * 2 * n * oc * oh * ow * c * kh * kw


def lenet_flops(batch_size: int = BATCH) -> float:
    """Nominal FLOPs of the LeNet forward + backward: its convolutions and linear layers."""
    conv = sum(conv_flops(*spec) for spec in convs(batch_size).values())
    return conv + 3 * 2 * batch_size * (400 * 120 + 120 * 84 + 84 * 10)


def conv_gemm_shapes(x_shape, w_shape, padding, input_grad) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The (a, b) shapes of the GEMMs tinyflo's conv2d runs, in the layout it picks for this output size.

    Batch last (up to BATCH_LAST_POSITIONS output positions per image): one GEMM each over the whole
    batch, forward (OC, K) @ (K, L·N), weight gradient (K, L·N) @ (L·N, OC), and the column gradient
    (K, OC) @ (OC, L·N) when the input needs one. Per image: the same three as N broadcast GEMMs,
    (OC, K) @ (N, K, L), (N, OC, L) @ (N, L, K) and (K, OC) @ (N, OC, L).
    """
    n, c, h, w = x_shape
    oc, _, kh, kw = w_shape
    k, positions = c * kh * kw, (h + 2 * padding - kh + 1) * (w + 2 * padding - kw + 1)
    if positions <= BATCH_LAST_POSITIONS:
        ln = n * positions
        shapes = [((oc, k), (k, ln)), ((k, ln), (ln, oc)), ((k, oc), (oc, ln))]
    else:
        shapes = [((oc, k), (n, k, positions)), ((n, oc, positions), (n, positions, k)), ((k, oc), (n, oc, positions))]
    return shapes[:3 if input_grad else 2]


def lenet_gemm_shapes(batch_size: int = BATCH) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """The GEMMs of LeNet's forward + backward: its convolutions', then each linear layer's forward,
    weight gradient and input gradient (the first linear layer's input comes from conv2, so it needs one)."""
    shapes = [s for spec in convs(batch_size).values() for s in conv_gemm_shapes(*spec)]
    for fan_in, fan_out in ((400, 120), (120, 84), (84, 10)):
        shapes += [((batch_size, fan_in), (fan_in, fan_out)), ((fan_in, batch_size), (batch_size, fan_out)),
                   ((batch_size, fan_out), (fan_out, fan_in))]
    return shapes


def batch(seed: int = 0, size: int = BATCH) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return rng.standard_normal((size, 1, 28, 28)).astype(np.float32), rng.integers(0, 10, size)


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


def lenet_variants(torch, device: str = "cpu", torch_on: str | None = "cpu", batch_size: int = BATCH):
    """The timed forward + backward steps and training steps of each library on ``device``, and for
    checking, functions returning (loss, gradients) of each library."""
    tinyflo.manual_seed(0)
    model, trained = LeNet5(), LeNet5()
    trained.load_state_dict(model.state_dict())
    torch_on = torch_on if torch is not None else None
    net, trained_net = ((torch_lenet(torch, model).to(torch_on), torch_lenet(torch, model).to(torch_on))
                        if torch_on is not None else (None, None))
    model.to(device)
    trained.to(device)
    x, y = batch(size=batch_size)
    tx, ty = tinyflo.tensor(x, device=device), tinyflo.tensor(y, device=device)

    def tinyflo_step():
        model.zero_grad()
        loss = cross_entropy(model(tx), ty)
        loss.backward()
        return loss

    def tinyflo_result():
        loss = tinyflo_step()
        return {"loss": loss.item()} | {k: p.grad.numpy() for k, p in model.named_parameters()}

    optimizer = SGD(trained.parameters(), lr=LR, momentum=MOMENTUM)

    def tinyflo_train():
        optimizer.zero_grad()
        loss = cross_entropy(trained(tx), ty)
        loss.backward()
        optimizer.step()
        return loss

    variants, training = {"tinyflo": tinyflo_step}, {"tinyflo": tinyflo_train}
    torch_result = None
    if net is not None:
        px, py = torch.from_numpy(x).to(torch_on), torch.from_numpy(y).to(torch_on)

        def torch_step():
            net.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(net(px), py)
            loss.backward()
            return loss

        def torch_result():
            loss = torch_step()
            return {"loss": loss.item()} | {k: p.grad.cpu().numpy() for k, p in net.named_parameters()}

        torch_optimizer = torch.optim.SGD(trained_net.parameters(), lr=LR, momentum=MOMENTUM)

        def torch_train():
            torch_optimizer.zero_grad(set_to_none=True)
            loss = torch.nn.functional.cross_entropy(trained_net(px), py)
            loss.backward()
            torch_optimizer.step()
            return loss

        variants["torch"], training["torch"] = torch_step, torch_train
    return variants, training, tinyflo_result, torch_result


def conv_variants(torch, spec, device: str = "cpu", torch_on: str | None = "cpu") -> dict[str, Callable[[], object]]:
    """Forward + backward of one convolution (sum of the output as the loss) in each library."""
    x_shape, w_shape, padding, input_grad = spec
    rng = np.random.default_rng(1)
    x, w, b = (rng.standard_normal(s).astype(np.float32) for s in (x_shape, w_shape, w_shape[:1]))
    tx = tinyflo.tensor(x, requires_grad=input_grad, device=device)
    tw, tb = (tinyflo.tensor(a, requires_grad=True, device=device) for a in (w, b))

    def tinyflo_step():
        tw.grad = tb.grad = tx.grad = None
        conv2d(tx, tw, tb, padding=padding).sum().backward()
        return tw.grad

    variants = {"tinyflo": tinyflo_step}
    if torch is not None and torch_on is not None:
        px = torch.tensor(x, requires_grad=input_grad, device=torch_on)
        pw, pb = (torch.tensor(a, requires_grad=True, device=torch_on) for a in (w, b))

        def torch_step():
            pw.grad = pb.grad = px.grad = None
            torch.nn.functional.conv2d(px, pw, pb, padding=padding).sum().backward()
            return pw.grad

        variants["torch"] = torch_step
        expected = torch_step().cpu().numpy()
        np.testing.assert_allclose(tinyflo_step().numpy(), expected, rtol=1e-3, atol=1e-3 * float(np.abs(expected).max()))
    return variants


def check_same_math(tinyflo_result, torch_result) -> None:
    """Loss and every gradient of the LeNet step agree with torch's, or nothing is timed."""
    ours = tinyflo_result()
    assert all(v.dtype == np.float32 for k, v in ours.items() if k != "loss"), "a gradient drifted from float32"
    if torch_result is None:
        return
    theirs = torch_result()
    np.testing.assert_allclose(ours.pop("loss"), theirs.pop("loss"), rtol=1e-4)
    for key, grad in ours.items():
        scale = np.abs(theirs[key]).max()
        np.testing.assert_allclose(grad, theirs[key], rtol=1e-3, atol=1e-4 * scale, err_msg=key)


def main(rounds: int = 11, device: str = "cpu", smoke: bool = False, out: str | None = None) -> tuple[Path, Path]:
    """Measure, print and save ``results/conv.{json,md}`` (``conv_cuda`` on a GPU)."""
    torch = common.optional_torch()
    torch_on, torch_missing = common.torch_device(torch, device)
    gpu = common.is_gpu(device)
    size = SMOKE_BATCH if smoke else BATCH
    variants, training, tinyflo_result, torch_result = lenet_variants(torch, device, torch_on, size)
    check_same_math(tinyflo_result, torch_result)
    xp = tinyflo.device(device).xp
    lenet_gemms = {common.GEMMS: common.gemms_only(lenet_gemm_shapes(size), xp)}
    comparisons = {
        f"LeNet-5 forward + cross-entropy + backward, batch {size}": (variants | lenet_gemms, lenet_flops(size)),
        f"LeNet-5 training step (the same, then SGD with momentum), batch {size}": (training | lenet_gemms,
                                                                                    lenet_flops(size)),
    }
    if gpu and not smoke:
        large = lenet_variants(torch, device, torch_on, GPU_BATCH)[1]
        comparisons[f"LeNet-5 training step, batch {GPU_BATCH}"] = (
            large | {common.GEMMS: common.gemms_only(lenet_gemm_shapes(GPU_BATCH), xp)}, lenet_flops(GPU_BATCH))
    for name, spec in convs(size).items():
        steps = conv_variants(torch, spec, device, torch_on) | {common.GEMMS: common.gemms_only(conv_gemm_shapes(*spec), xp)}
        comparisons[f"{name}: forward + backward, batch {size}"] = (steps, conv_flops(*spec))
    sync = common.device_sync(device, torch_on)
    tables, all_timings, targets = [], {}, []
    for title, (steps, flops) in comparisons.items():
        timings = common.compare(steps, baseline="torch" if "torch" in steps else "tinyflo", rounds=rounds, sync=sync)
        gemm_s = timings[common.GEMMS].median_s
        rows = [[name, t.median_s * 1e3, t.ratio, flops / t.median_s / 1e9, f"{gemm_s / t.median_s:.0%}",
                 f"{t.spread:.0%}"] for name, t in timings.items()]
        tables.append(common.Table(f"{title}, float32 ({flops / 1e9:.3g} GFLOP)",
                                   ["variant", "ms", "× torch", "GFLOP/s", "GEMM share", "IQR"], rows))
        all_timings |= {f"{title}: {name}": t for name, t in timings.items()}
        if gpu and title.startswith("LeNet-5 training step") and title.endswith(f"batch {size}"):
            targets.append(common.Target(
                f"LeNet-5 training step at batch {size}: tinyflo vs torch CUDA (× torch)",
                timings["tinyflo"].ratio if "torch" in timings else None, GPU_TARGET,
                note=torch_missing or (common.SMOKE_NOTE if smoke else ""), judged=not smoke))
    notes = [
        "Before timing, the LeNet loss and every parameter gradient of tinyflo are checked against "
        "torch's from the same weights and batch (loss rtol 1e-4; gradients rtol 1e-3, atol 1e-4 × largest "
        "gradient), and each convolution's weight gradient likewise.",
        "tinyflo's conv2d picks its layout by output size. Up to 256 output positions per image (conv2: "
        "10×10) it puts the batch last: the input is copied to (C, H, W, N), its windows into one (C·KH·KW, "
        "OH·OW·N) column matrix, and forward, weight gradient and column gradient are one GEMM each over the "
        "whole batch; the fold adds KH·KW slices of OW·N-long runs. Larger outputs per image (conv1: 28×28) "
        "keep module 10's graded layout, one (OC, K) @ (K, OH·OW) GEMM per image in one broadcast matmul, "
        "whose result is already NCHW. Max pooling with stride = kernel writes its backward in place into "
        "a (N, C, OH, KH, OW, KW) view of the input gradient.",
        f"GEMM share: the time of '{common.GEMMS}' — the GEMM shapes tinyflo runs, as contiguous float32 products: "
        "each convolution's forward, weight gradient and (where needed) column gradient, one product over "
        "the batch for conv2 and N broadcast per-image products for conv1, plus the linear layers' three "
        "products each for LeNet, timed in the same rounds — over the "
        "variant's time: the fraction of this machine's measured GEMM throughput the step reaches.",
        f"The training step is zero_grad, forward, cross-entropy, backward and an SGD step (lr {LR}, momentum "
        f"{MOMENTUM}) with tinyflo's optim.SGD and torch.optim.SGD.",
        "GFLOP counts only the nominal GEMM work: 2·N·OC·OH·OW·C·KH·KW per convolution GEMM (forward, "
        "weight gradient, and the input gradient where one is needed), 6·batch·weights for the linear layers.",
        "IQR: interquartile range of the rounds relative to the median.",
    ]
    notes = common.run_notes(notes, device, smoke, torch_missing,
                             "; torch's TF32 is off (cuDNN and cuBLAS), so both compute in float32")
    where = common.where(device)
    return common.save_result(
        common.result_name("conv", device),
        "LeNet-5 and convolution forward + backward" + (f" on {device}" if gpu else ""),
        f"Milliseconds per forward + backward and per training step of LeNet-5, and per forward + backward of "
        f"its convolutions alone, at batch {size} on 28×28 float32 images, tinyflo against PyTorch {where}.",
        tables,
        all_timings,
        {"rounds": rounds, "dtype": "float32", "batch": size, "device": device, "smoke": smoke},
        notes,
        targets=targets,
        device=device,
        out=out,
    )


if __name__ == "__main__":
    main(**vars(common.parse_args(__doc__.splitlines()[0], devices=True)))
