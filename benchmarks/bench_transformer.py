"""Milestone 6's character GPT, trained step by step: tinyflo vs the same model in PyTorch.

Run: ``python -m benchmarks.bench_transformer [--device cuda:0] [--steps N | --full] [--rounds N]``.

The model is the milestone's own: this benchmark runs the notebook's model cell
(``GPTConfig``, ``GPT``, ``lm_loss`` in ``milestones/06_transformer/transformer.py``), so it
times exactly what the milestone trains, at its full configuration (nanoGPT's baby GPT: 4
layers, 4 heads, 128 channels, context 64, batches of 12). A step is the milestone's loop
body: set the learning rate (warm-up + cosine), draw a batch, forward, cross-entropy,
backward, clip the gradient norm at 1, AdamW. PyTorch trains the same network twice, from
copies of tinyflo's initial weights, on the same batches: as nanoGPT writes it
(``F.scaled_dot_product_attention``, "torch SDPA") and with the attention written out of a
matmul, a causal mask and a softmax ("torch written out"). Before any timing, the first
step's loss and every gradient of tinyflo and of both torch models agree.

**Both forms of the loop.** Beside the milestone's loop, the loop a user writes first, in both
libraries ("tinyflo, obvious loop" and "torch SDPA, obvious loop"): the same model from the same
initial weights, ``AdamW(model.parameters())`` (one group, its default weight decay on every
parameter), ``F.cross_entropy(logits.reshape(-1, V), y.reshape(-1))``, random tokens made tensors
from NumPy in the step, no schedule and no clipping. The two forms are timed in the same rounds,
so a difference between them is the loop's and not the machine's.

Two measurements. **One training step**: ``--rounds`` (default 11) interleaved rounds, each
timing one step of every variant in rotating order (benchmarks/common.py), with tokens per
second and the peak memory of a step. **Training**: ``--steps`` (default 200) steps of each,
timed in chunks of 20, the variants' chunks alternating, the GPU synchronised around each;
``--full`` times all 2000 steps the milestone trains. On the CPU the target is tinyflo's step
within 1.3× of torch SDPA's; on a GPU, tinyflo's training within 1.5× of PyTorch CUDA.
"""

from __future__ import annotations

import math
import re
import tracemalloc
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

import tinyflo
from benchmarks import common
from tinyflo import milestones, nn
from tinyflo.nn import functional as F
from tinyflo.optim.lr_scheduler import CosineAnnealing, Warmup

NOTEBOOK = common.REPO_ROOT / "milestones" / "06_transformer" / "transformer.py"
STEPS, FULL_STEPS, CHUNK = 200, 2000, 20
SMOKE_STEPS, SMOKE_CHUNK = 6, 2
GPU_TARGET = 1.5  # tinyflo's training steps at most this many times torch CUDA's
CPU_TARGET = 1.3  # tinyflo's training step at most this many times torch SDPA's, on the CPU
SDPA, WRITTEN = "torch SDPA", "torch"  # the twins' names; "torch" (written out) as in earlier records
OBVIOUS, SDPA_OBVIOUS = "tinyflo, obvious loop", "torch SDPA, obvious loop"  # ObviousLoops' names
VOCAB = 65  # Tiny Shakespeare's characters


def milestone_model() -> dict[str, Any]:
    """``GPTConfig``, ``GPT`` and ``lm_loss`` from the milestone notebook's own cells (run, not copied)."""
    cells = re.split(r"^# %%.*$", NOTEBOOK.read_text(), flags=re.MULTILINE)
    wanted = [cell for cell in cells if "class GPT(" in cell or "def lm_loss(" in cell]
    if len(wanted) != 2:
        raise RuntimeError(f"{NOTEBOOK}: expected one cell defining GPT and one defining lm_loss; "
                           f"found {len(wanted)} — update bench_transformer.milestone_model")
    namespace = {"__name__": "milestone_06_transformer", "math": math, "np": np, "tinyflo": tinyflo, "nn": nn,
                 "F": F, "dataclass": dataclass, "replace": replace}
    for cell in wanted:
        exec(compile(cell, str(NOTEBOOK), "exec", dont_inherit=True), namespace)  # the notebook's own semantics
    return namespace


def token_ids() -> tuple[np.ndarray, str]:
    """The training split of Tiny Shakespeare when its file is found, else random characters (same speed)."""
    root = milestones.find_data("tinyshakespeare", "input.txt")
    if root is None:
        return np.random.default_rng(0).integers(0, VOCAB, 1_000_000), "random characters (Tiny Shakespeare not found)"
    corpus = tinyflo.datasets.tiny_shakespeare(root)
    return corpus.split(0.9)[0], f"Tiny Shakespeare's training split ({root})"


def windows(ids_len: int, config: Any, steps: int, seed: int) -> list[np.ndarray]:
    """The start-of-window indices of ``steps`` batches, as the milestone draws them."""
    rng = np.random.default_rng(seed)
    window = np.arange(config.block_size)
    return [rng.integers(0, ids_len - config.block_size, size=config.batch_size)[:, None] + window
            for _ in range(steps)]


def torch_gpt(torch, config: Any, vocab: int, sdpa: bool = False):
    """The milestone's GPT in torch.nn: attention written out, or (``sdpa``) as nanoGPT's flash path."""
    tnn, TF = torch.nn, torch.nn.functional

    class Attention(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_attn = tnn.Linear(config.n_embd, 3 * config.n_embd, bias=False)
            self.c_proj = tnn.Linear(config.n_embd, config.n_embd, bias=False)
            self.register_buffer("causal", torch.tril(torch.ones(config.block_size, config.block_size, dtype=torch.bool)),
                                 persistent=False)

        def forward(self, x, T):
            head_size = config.n_embd // config.n_head
            qkv = self.c_attn(x).reshape(-1, T, 3, config.n_head, head_size).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            if sdpa:
                y = TF.scaled_dot_product_attention(q, k, v, is_causal=True)
            else:
                scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(head_size))
                scores = scores.masked_fill(~self.causal[:T, :T], float("-inf"))
                y = TF.softmax(scores, dim=-1) @ v
            return self.c_proj(y.transpose(1, 2).reshape(-1, config.n_embd))

    class MLP(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.c_fc = tnn.Linear(config.n_embd, 4 * config.n_embd, bias=False)
            self.gelu = tnn.GELU(approximate="tanh")
            self.c_proj = tnn.Linear(4 * config.n_embd, config.n_embd, bias=False)

        def forward(self, x):
            return self.c_proj(self.gelu(self.c_fc(x)))

    class Block(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.ln_1, self.attn = tnn.LayerNorm(config.n_embd, bias=False), Attention()
            self.ln_2, self.mlp = tnn.LayerNorm(config.n_embd, bias=False), MLP()

        def forward(self, x, T):
            x = x + self.attn(self.ln_1(x), T)
            return x + self.mlp(self.ln_2(x))

    class GPT(tnn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.wte, self.wpe = tnn.Embedding(vocab, config.n_embd), tnn.Embedding(config.block_size, config.n_embd)
            self.h = tnn.ModuleList([Block() for _ in range(config.n_layer)])
            self.ln_f = tnn.LayerNorm(config.n_embd, bias=False)

        def forward(self, idx):
            B, T = idx.shape
            x = (self.wte(idx) + self.wpe(torch.arange(T, device=idx.device))).reshape(B * T, config.n_embd)
            for block in self.h:
                x = block(x, T)
            return (self.ln_f(x) @ self.wte.weight.T).reshape(B, T, -1)

    return GPT()


def gpt_gemm_shapes(config: Any, vocab: int = VOCAB) -> list[tuple[tuple[int, ...], tuple[int, ...]]]:
    """The matrix products of one training step of the GPT: each linear layer's forward, input gradient and
    weight gradient, the tied head's three, and attention's two products forward and four backward per layer
    (stacked over batch × heads)."""
    rows, c, t = config.batch_size * config.block_size, config.n_embd, config.block_size
    stack, size = config.batch_size * config.n_head, config.n_embd // config.n_head
    layers = [(c, 3 * c), (c, c), (c, 4 * c), (4 * c, c)] * config.n_layer + [(c, vocab)]
    shapes = []
    for fan_in, fan_out in layers:
        shapes += [((rows, fan_in), (fan_in, fan_out)), ((rows, fan_out), (fan_out, fan_in)),
                   ((fan_in, rows), (rows, fan_out))]
    scores, values = ((stack, t, size), (stack, size, t)), ((stack, t, t), (stack, t, size))
    return shapes + [scores, values, scores, values, values, values] * config.n_layer


def copy_weights(torch, model: Any, net: Any) -> None:
    """Give ``net`` (torch) ``model``'s (tinyflo) weights; tinyflo's frozen zero LayerNorm biases have no twin."""
    state = model.state_dict()
    theirs = net.state_dict()
    left_out = [k for k in state if k not in theirs]
    assert all(k.endswith(".bias") and not state[k].numpy().any() for k in left_out), left_out
    net.load_state_dict({k: torch.from_numpy(state[k].numpy().copy()) for k in theirs})


def optimizer_groups(params: list, config: Any) -> list[dict[str, Any]]:
    """The milestone's AdamW groups: weight decay on the matrices only."""
    return [{"params": [p for p in params if p.ndim >= 2], "weight_decay": config.weight_decay},
            {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0}]


class TorchTwin:
    """One torch GPT with its AdamW, trained on the trainers' batches with the same schedule object."""

    def __init__(self, torch, net: Any, config: Any, data: Any, device: str) -> None:
        self.torch, self.net, self.config, self.data, self.device = torch, net.to(device), config, data, device
        self.optimizer = torch.optim.AdamW(optimizer_groups(list(net.parameters()), config),
                                           lr=config.learning_rate, betas=config.betas)
        for group in self.optimizer.param_groups:  # the same schedule object sets every optimizer's rate
            group["initial_lr"] = group["lr"]
        self.step_of, self.last_loss = 0, None

    def loss(self, index: np.ndarray) -> Any:
        index = self.torch.from_numpy(index).to(self.device)
        logits = self.net(self.data[index])
        return self.torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]),
                                                      self.data[index + 1].reshape(-1))


class Trainers:
    """tinyflo's GPT and its torch twins, each with its optimizer, trained on the same batches; steps as closures."""

    def __init__(self, torch, config: Any, ids: np.ndarray, steps: int, device: str, torch_on: str | None) -> None:
        cells = milestone_model()
        self.config, self.lm_loss, self.torch, self.torch_on = config, cells["lm_loss"], torch, torch_on
        tinyflo.manual_seed(config.seed)
        self.model = cells["GPT"](config, VOCAB)
        self.twins: dict[str, TorchTwin] = {}
        if torch_on is not None:
            tdata = torch.from_numpy(np.asarray(ids)).to(torch_on)
            for name, sdpa in ((SDPA, True), (WRITTEN, False)):
                net = torch_gpt(torch, config, VOCAB, sdpa=sdpa)
                copy_weights(torch, self.model, net)
                self.twins[name] = TorchTwin(torch, net, config, tdata, torch_on)
        self.model.to(device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = tinyflo.optim.AdamW(optimizer_groups(self.params, config), lr=config.learning_rate,
                                             betas=config.betas)
        self.schedule = Warmup(CosineAnnealing(config.lr_decay_iters - config.warmup_iters, min_lr=config.min_lr),
                               warmup_steps=config.warmup_iters, start_factor=0.0)
        self.data = tinyflo.tensor(ids, device=device)
        self.batches = windows(len(ids), config, steps, config.seed)
        self.step_of = {"tinyflo": 0}
        self.last_loss: dict[str, Any] = {}

    def tinyflo_step(self) -> Any:
        """The milestone's loop body, in tinyflo."""
        it = self.step_of["tinyflo"]
        index = self.batches[it % len(self.batches)]
        self.schedule.apply(self.optimizer, it)
        loss = self.train_on(self.data[index], self.data[index + 1])
        self.step_of["tinyflo"] = it + 1
        self.last_loss["tinyflo"] = loss.detach()
        return loss

    def train_on(self, x: Any, y: Any) -> Any:
        """Loss, gradients, clipping and the AdamW step on one batch of windows (the rate set before)."""
        loss = self.lm_loss(self.model, x, y)
        self.optimizer.zero_grad()
        loss.backward()
        tinyflo.clip_grad_norm(self.params, self.config.grad_clip)
        self.optimizer.step()
        return loss

    def torch_step(self, name: str = WRITTEN) -> Any:
        """The same step in torch, for the twin ``name``."""
        twin = self.twins[name]
        it = twin.step_of
        self.schedule.apply(twin.optimizer, it)
        loss = twin.loss(self.batches[it % len(self.batches)])
        twin.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.torch.nn.utils.clip_grad_norm_(twin.net.parameters(), self.config.grad_clip)
        twin.optimizer.step()
        twin.step_of = it + 1
        self.last_loss[name] = loss.detach()
        return loss

    def steps(self) -> dict[str, Any]:
        """One training step of each variant, by name."""
        return {"tinyflo": self.tinyflo_step} | {name: (lambda name=name: self.torch_step(name)) for name in self.twins}

    def check_same_math(self) -> dict[str, float]:
        """The first step's loss and every gradient agree, tinyflo against each twin. Returns the first losses."""
        index = self.batches[0]
        loss = self.lm_loss(self.model, self.data[index], self.data[index + 1])
        loss.backward()
        first = {"tinyflo": float(loss.item())}
        for name, twin in self.twins.items():
            tloss = twin.loss(index)
            tloss.backward()
            first[name] = float(tloss.item())
            np.testing.assert_allclose(first["tinyflo"], first[name], rtol=1e-4, err_msg=f"first loss, {name}")
            theirs = dict(twin.net.named_parameters())
            for pname, p in self.model.named_parameters():
                if pname in theirs:
                    expected = theirs[pname].grad.cpu().numpy()
                    np.testing.assert_allclose(p.grad.numpy(), expected, rtol=1e-3,
                                               atol=1e-4 * float(np.abs(expected).max()), err_msg=f"{name}: {pname}")
            twin.net.zero_grad(set_to_none=True)
        self.model.zero_grad()
        return first

    def peak_memory(self) -> dict[str, float | None]:
        """Peak bytes allocated during one training step beyond what was live before it, per variant (CPU only).

        tinyflo: tracemalloc (NumPy reports its array buffers to it). torch: the allocation and free
        events that torch.profiler records with ``profile_memory=True``, summed in time order.
        """
        peaks: dict[str, float | None] = {"tinyflo": tinyflo_peak_bytes(self.tinyflo_step)}
        for name in self.twins:
            peaks[name] = torch_peak_bytes(self.torch, lambda name=name: self.torch_step(name))
        return peaks



class ObviousLoops:
    """The loop a user writes first, in tinyflo and in torch (SDPA), from the milestone model's initial weights.

    ``AdamW(model.parameters())``: one group, every parameter (tinyflo's frozen LayerNorm biases included, as
    ``parameters()`` gives them), the default weight decay; ``F.cross_entropy`` on the logits reshaped to rows;
    a batch of random tokens made a tensor from NumPy in each step; no schedule, no clipping.
    """

    def __init__(self, torch: Any, config: Any, steps: int, device: str, torch_on: str | None) -> None:
        self.config, self.torch, self.device, self.torch_on = config, torch, device, torch_on
        tinyflo.manual_seed(config.seed)  # the same initial weights as Trainers' model
        self.model = milestone_model()["GPT"](config, VOCAB)
        self.net = None
        if torch_on is not None:
            self.net = torch_gpt(torch, config, VOCAB, sdpa=True)
            copy_weights(torch, self.model, self.net)
            self.net.to(torch_on)
            self.torch_optimizer = torch.optim.AdamW(self.net.parameters(), lr=config.learning_rate,
                                                     betas=config.betas)
        self.model.to(device)
        self.optimizer = tinyflo.optim.AdamW(self.model.parameters(), lr=config.learning_rate, betas=config.betas)
        rng = np.random.default_rng(config.seed)
        self.batches = [rng.integers(0, VOCAB, (2, config.batch_size, config.block_size)) for _ in range(steps)]
        self.step_of = dict.fromkeys((OBVIOUS, SDPA_OBVIOUS), 0)
        self.last_loss: dict[str, Any] = {}

    def tinyflo_loss(self, it: int) -> Any:
        x, y = self.batches[it % len(self.batches)]
        logits = self.model(tinyflo.tensor(x, device=self.device))
        return F.cross_entropy(logits.reshape(-1, VOCAB), tinyflo.tensor(y, device=self.device).reshape(-1))

    def torch_loss(self, it: int) -> Any:
        x, y = (self.torch.from_numpy(a).to(self.torch_on) for a in self.batches[it % len(self.batches)])
        logits = self.net(x)
        return self.torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), y.reshape(-1))

    def tinyflo_step(self) -> Any:
        """The obvious loop's body, in tinyflo."""
        loss = self.tinyflo_loss(self.step_of[OBVIOUS])
        self.optimizer.zero_grad()
        loss.backward()
        self.optimizer.step()
        self.step_of[OBVIOUS] += 1
        self.last_loss[OBVIOUS] = loss.detach()
        return loss

    def torch_step(self) -> Any:
        """The same in torch, as nanoGPT's users write it."""
        loss = self.torch_loss(self.step_of[SDPA_OBVIOUS])
        self.torch_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.torch_optimizer.step()
        self.step_of[SDPA_OBVIOUS] += 1
        self.last_loss[SDPA_OBVIOUS] = loss.detach()
        return loss

    def steps(self) -> dict[str, Any]:
        """One step of each form, by name."""
        return {OBVIOUS: self.tinyflo_step} | ({SDPA_OBVIOUS: self.torch_step} if self.net is not None else {})

    def check_same_math(self) -> dict[str, float]:
        """The first batch's losses agree, tinyflo against torch (no step is taken). Returns them."""
        first = {OBVIOUS: float(self.tinyflo_loss(0).item())}
        if self.net is not None:
            first[SDPA_OBVIOUS] = float(self.torch_loss(0).item())
            np.testing.assert_allclose(first[OBVIOUS], first[SDPA_OBVIOUS], rtol=1e-4, err_msg="obvious loop")
        return first


def tinyflo_peak_bytes(fn: Any) -> float:
    """The peak of the bytes Python and NumPy allocate while ``fn`` runs, beyond what was live before it."""
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        fn()
        return float(tracemalloc.get_traced_memory()[1] - before)
    finally:
        tracemalloc.stop()


def torch_peak_bytes(torch: Any, fn: Any) -> float | None:
    """The peak of torch's CPU allocations, net of frees, while ``fn`` runs (None if the profiler says nothing)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    try:
        events = [e for e in prof.profiler.kineto_results.events() if e.name() == "[memory]"]
    except AttributeError:  # a torch without this interface
        return None
    live = peak = 0
    for event in sorted(events, key=lambda e: e.start_ns()):
        live += event.nbytes()
        peak = max(peak, live)
    return float(peak) if events else None


def main(rounds: int = 11, device: str = "cpu", smoke: bool = False, out: str | None = None,
         steps: int | None = None, full: bool = False) -> tuple[Path, Path]:
    """Measure, print and save ``results/transformer.{json,md}`` (``transformer_cuda`` on a GPU)."""
    torch = common.optional_torch()
    torch_on, torch_missing = common.torch_device(torch, device)
    gpu = common.is_gpu(device)
    config = milestone_model()["GPTConfig"]()
    chunk = CHUNK
    if smoke:
        config = replace(config, block_size=8, batch_size=2, n_layer=1, n_head=2, n_embd=16)
        steps, chunk = SMOKE_STEPS, SMOKE_CHUNK
    steps = FULL_STEPS if full else steps or STEPS
    ids, source = (np.random.default_rng(0).integers(0, VOCAB, 10_000), "random characters (smoke run)") if smoke \
        else token_ids()
    singles = common.WARMUP + rounds  # the single steps and their warm-up come first
    trainers = Trainers(torch, config, ids, singles + steps + 2 * chunk + 1, device, torch_on)
    obvious = ObviousLoops(torch, config, singles + steps + 2 * chunk + 1, device, torch_on)
    first = trainers.check_same_math() | obvious.check_same_math()
    baseline = SDPA if torch_on else "tinyflo"
    sync = common.device_sync(device, torch_on)
    tokens = config.batch_size * config.block_size

    # one training step, interleaved rounds
    gemms = common.gemms_only(gpt_gemm_shapes(config), tinyflo.device(device).xp)
    loops = trainers.steps() | obvious.steps()
    step_timings = common.compare(loops | {common.GEMMS: gemms}, baseline=baseline, rounds=rounds,
                                  min_sample_s=0.0, sync=sync)

    # training: chunks of steps, alternating
    variants = {name: (lambda fn=fn: [fn() for _ in range(chunk)]) for name, fn in loops.items()}
    timings = common.compare(variants, baseline=baseline, rounds=steps // chunk, warmup=1, min_sample_s=0.0,
                             sync=sync)
    last = {name: float(loss.item()) for name, loss in (trainers.last_loss | obvious.last_loss).items()}
    peaks = {}
    if not gpu:  # last: torch's profiler slows what runs after it
        peaks = {OBVIOUS: tinyflo_peak_bytes(obvious.tinyflo_step)} | trainers.peak_memory()
        if SDPA_OBVIOUS in loops:
            peaks[SDPA_OBVIOUS] = torch_peak_bytes(torch, obvious.torch_step)
    step_rows = [[name, t.median_s * 1e3, "—" if name == common.GEMMS else tokens / t.median_s, t.ratio,
                  "—" if peaks.get(name) is None else f"{peaks[name] / 2**20:.1f}", f"{t.spread:.0%}"]
                 for name, t in step_timings.items()]
    rows = [[name, t.median_s / chunk * 1e3, sum(t.samples_s), t.ratio, last[name], f"{t.spread:.0%}"]
            for name, t in timings.items()]
    shape = f"{config.n_layer} layers × {config.n_embd} channels, {config.n_head} heads, context {config.block_size}"
    ratio_to = f"× {baseline}"
    tables = [
        common.Table(f"GPT ({shape}), batches of {config.batch_size}: one training step on {device}, "
                     f"{rounds} interleaved rounds",
                     ["variant", "ms/step", "tokens/s", ratio_to, "peak MiB of a step", "IQR"], step_rows),
        common.Table(f"GPT ({shape}), batches of {config.batch_size}, {steps} training steps on {device}",
                     ["variant", "ms/step", f"seconds for {steps} steps", ratio_to, "loss at the last step", "IQR"],
                     rows),
    ]
    targets = []
    note = torch_missing or (common.SMOKE_NOTE if smoke else "")
    if gpu:
        targets.append(common.Target(f"milestone 6's GPT, {steps} training steps: tinyflo vs torch CUDA (× torch)",
                                     timings["tinyflo"].ratio / timings[WRITTEN].ratio if torch_on else None,
                                     GPU_TARGET, note=note, judged=not smoke))
        targets.append(common.Target(f"the obvious loop, {steps} training steps: tinyflo vs torch SDPA CUDA "
                                     "(× torch SDPA, obvious loop)",
                                     timings[OBVIOUS].ratio / timings[SDPA_OBVIOUS].ratio if torch_on else None,
                                     GPU_TARGET, note=note, judged=not smoke))
    else:
        targets.append(common.Target("milestone 6's GPT, one training step: tinyflo vs torch SDPA (× torch SDPA)",
                                     step_timings["tinyflo"].ratio if torch_on else None, CPU_TARGET,
                                     note=note, judged=not smoke))
        targets.append(common.Target("the obvious loop, one training step: tinyflo vs torch SDPA "
                                     "(× torch SDPA, obvious loop)",
                                     step_timings[OBVIOUS].ratio / step_timings[SDPA_OBVIOUS].ratio
                                     if torch_on else None, CPU_TARGET, note=note, judged=not smoke))
    notes = [
        f"The model is milestone 6's own ({NOTEBOOK.relative_to(common.REPO_ROOT)}: its GPTConfig, GPT and "
        "lm_loss cells are run by this benchmark; its attention is F.scaled_dot_product_attention, one graph "
        "node). torch trains the same network twice, starting from copies of tinyflo's initial weights: "
        f"'{SDPA}' as nanoGPT writes it (F.scaled_dot_product_attention), '{WRITTEN}' with the attention "
        "written out (matmul, a causal mask, softmax, matmul); both with LayerNorm without bias, GELU tanh and "
        "the head tied to the token embedding.",
        f"A step: warm-up + cosine learning rate (one schedule object sets every optimizer), a batch of "
        f"{config.batch_size} windows gathered from the text on the device, forward, cross-entropy, backward, "
        f"clip_grad_norm at {config.grad_clip}, AdamW (weight decay {config.weight_decay} on matrices only).",
        f"Data: {source}. Every variant trains on the same batches, the same number of steps.",
        f"'{OBVIOUS}' and '{SDPA_OBVIOUS}': the loop a user writes first, from the same initial weights — "
        "AdamW(model.parameters()) with its defaults but the milestone's lr and betas (one group, weight decay "
        "0.01 on every parameter), F.cross_entropy(logits.reshape(-1, V), y.reshape(-1)), a batch of random "
        "tokens made a tensor from NumPy inside the step, no schedule, no clipping; the two forms share the "
        f"random batches. Its target compares it with '{SDPA_OBVIOUS}', the same loop in torch.",
        f"One training step: {rounds} rounds after {common.WARMUP} warm-up rounds, each timing one step of every "
        f"variant in rotating order; ms/step is the median; tokens/s = {config.batch_size} × {config.block_size} "
        "tokens / median step.",
        "Peak memory of a step (CPU): the most bytes allocated at once during one training step beyond what was "
        "live before it (parameters, optimizer state and the text are not counted). tinyflo: tracemalloc, which "
        "sees NumPy's array buffers; torch: the allocation and free events of torch.profiler(profile_memory=True) "
        "summed in time order (torch has no CPU allocator statistics). Both count activations kept for backward, "
        "gradients and temporaries.",
        f"Training: {steps} steps of each in chunks of {chunk}, the variants' chunks alternating, after one "
        "untimed warm-up chunk each; ms/step is the median chunk over its steps; seconds is the sum of the chunks.",
        f"Before timing, the first step's loss (rtol 1e-4) and every gradient (rtol 1e-3, atol 1e-4 × largest) "
        f"of tinyflo and of each torch variant agree: first losses "
        f"{', '.join(f'{k} {v:.5f}' for k, v in first.items())}.",
        f"'{common.GEMMS}': the step's matrix products as tinyflo's shapes have them — each linear layer's "
        "forward, input gradient and weight gradient, the tied head's three, attention's two products forward "
        "and four backward per layer — on contiguous float32 operands, timed in the same rounds: what this "
        "machine's BLAS needs for the step's GEMM work, a floor for any framework that calls it.",
        "IQR: interquartile range of the samples relative to the median.",
    ]
    notes = common.run_notes(notes, device, smoke, torch_missing,
                             "; torch's TF32 is off. Peak memory is measured on the CPU only")
    where = common.where(device)
    return common.save_result(
        common.result_name("transformer", device),
        "Milestone 6's GPT: training steps" + (f" on {device}" if gpu else ""),
        f"Milliseconds per training step of milestone 6's character GPT, tokens per second and peak memory, "
        f"tinyflo against the same model in PyTorch (with F.scaled_dot_product_attention, and with the "
        f"attention written out), {where}; and seconds for {steps} steps.",
        tables,
        timings | {f"{name} (one step)": t for name, t in step_timings.items()},
        {"steps": steps, "chunk": chunk, "rounds": rounds, "device": device, "smoke": smoke,
         "tokens_per_step": tokens, "peak_bytes": peaks, "config": config.__dict__},
        notes,
        targets=targets,
        device=device,
        out=out,
    )


def _options(parser) -> None:
    parser.add_argument("--steps", type=int, help=f"training steps timed of each library (default {STEPS})")
    parser.add_argument("--full", action="store_true", help=f"all {FULL_STEPS} steps the milestone trains")


if __name__ == "__main__":
    main(**vars(common.parse_args(__doc__.splitlines()[0], devices=True, options=_options)))
