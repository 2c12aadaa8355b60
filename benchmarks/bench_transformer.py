"""Milestone 6's character GPT, trained step by step: tinyflo vs the same model in PyTorch.

Run: ``python -m benchmarks.bench_transformer [--device cuda:0] [--steps N | --full]``.

The model is the milestone's own: this benchmark runs the notebook's model cell
(``GPTConfig``, ``GPT``, ``lm_loss`` in ``milestones/06_transformer/transformer.py``), so it
times exactly what the milestone trains, at its full configuration (nanoGPT's baby GPT: 4
layers, 4 heads, 128 channels, context 64, batches of 12). A step is the milestone's loop
body: set the learning rate (warm-up + cosine), draw a batch, forward, cross-entropy,
backward, clip the gradient norm at 1, AdamW. PyTorch trains the same network (the same
operations, attention written out with a mask and a softmax; copies of tinyflo's initial
weights) on the same batches.

``--steps`` (default 200) steps of each are timed in chunks of 20, tinyflo's and torch's
chunks alternating, the GPU synchronised around each; ``--full`` times all 2000 steps the
milestone trains. ``--rounds`` is not used: the chunks are the rounds. On a GPU the target
is tinyflo within 1.5× of PyTorch CUDA.
"""

from __future__ import annotations

import math
import re
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


def torch_gpt(torch, config: Any, vocab: int):
    """The milestone's GPT in torch.nn, operation for operation (no fused attention)."""
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


class Trainers:
    """tinyflo's and torch's GPT, each with its optimizer, trained on the same batches; steps as closures."""

    def __init__(self, torch, config: Any, ids: np.ndarray, steps: int, device: str, torch_on: str | None) -> None:
        cells = milestone_model()
        self.config, self.lm_loss, self.torch, self.torch_on = config, cells["lm_loss"], torch, torch_on
        tinyflo.manual_seed(config.seed)
        self.model = cells["GPT"](config, VOCAB)
        self.net = torch_gpt(torch, config, VOCAB) if torch_on is not None else None
        if self.net is not None:
            copy_weights(torch, self.model, self.net)
            self.net.to(torch_on)
        self.model.to(device)
        self.params = [p for p in self.model.parameters() if p.requires_grad]
        self.optimizer = tinyflo.optim.AdamW(optimizer_groups(self.params, config), lr=config.learning_rate,
                                             betas=config.betas)
        self.schedule = Warmup(CosineAnnealing(config.lr_decay_iters - config.warmup_iters, min_lr=config.min_lr),
                               warmup_steps=config.warmup_iters, start_factor=0.0)
        self.data = tinyflo.tensor(ids, device=device)
        self.batches = windows(len(ids), config, steps, config.seed)
        self.step_of = {"tinyflo": 0, "torch": 0}
        self.last_loss: dict[str, Any] = {}
        if self.net is not None:
            self.tdata = torch.from_numpy(np.asarray(ids)).to(torch_on)
            self.topt = torch.optim.AdamW(optimizer_groups(list(self.net.parameters()), config),
                                          lr=config.learning_rate, betas=config.betas)
            for group in self.topt.param_groups:  # the same schedule object sets both optimizers' rates
                group["initial_lr"] = group["lr"]

    def tinyflo_step(self) -> Any:
        """The milestone's loop body, in tinyflo."""
        it = self.step_of["tinyflo"]
        index = self.batches[it % len(self.batches)]
        self.schedule.apply(self.optimizer, it)
        loss = self.lm_loss(self.model, self.data[index], self.data[index + 1])
        self.optimizer.zero_grad()
        loss.backward()
        tinyflo.clip_grad_norm(self.params, self.config.grad_clip)
        self.optimizer.step()
        self.step_of["tinyflo"] = it + 1
        self.last_loss["tinyflo"] = loss.detach()
        return loss

    def torch_step(self) -> Any:
        """The same step in torch."""
        torch, it = self.torch, self.step_of["torch"]
        index = torch.from_numpy(self.batches[it % len(self.batches)]).to(self.torch_on)
        self.schedule.apply(self.topt, it)
        logits = self.net(self.tdata[index])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), self.tdata[index + 1].reshape(-1))
        self.topt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.net.parameters(), self.config.grad_clip)
        self.topt.step()
        self.step_of["torch"] = it + 1
        self.last_loss["torch"] = loss.detach()
        return loss

    def check_same_math(self) -> dict[str, float]:
        """The first step's loss and every gradient agree; then three steps' losses. Returns the first losses."""
        index = self.batches[0]
        loss = self.lm_loss(self.model, self.data[index], self.data[index + 1])
        loss.backward()
        first = {"tinyflo": float(loss.item())}
        if self.net is not None:
            torch = self.torch
            tindex = torch.from_numpy(index).to(self.torch_on)
            logits = self.net(self.tdata[tindex])
            tloss = torch.nn.functional.cross_entropy(logits.reshape(-1, VOCAB), self.tdata[tindex + 1].reshape(-1))
            tloss.backward()
            first["torch"] = float(tloss.item())
            np.testing.assert_allclose(first["tinyflo"], first["torch"], rtol=1e-4, err_msg="first loss")
            theirs = dict(self.net.named_parameters())
            for name, p in self.model.named_parameters():
                if name in theirs:
                    expected = theirs[name].grad.cpu().numpy()
                    np.testing.assert_allclose(p.grad.numpy(), expected, rtol=1e-3,
                                               atol=1e-4 * float(np.abs(expected).max()), err_msg=name)
            self.net.zero_grad(set_to_none=True)
        self.model.zero_grad()
        return first


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
    trainers = Trainers(torch, config, ids, steps + 2 * chunk, device, torch_on)  # + the warm-up chunk of each
    first = trainers.check_same_math()
    variants = {"tinyflo": lambda: [trainers.tinyflo_step() for _ in range(chunk)]}
    if torch_on is not None:
        variants["torch"] = lambda: [trainers.torch_step() for _ in range(chunk)]
    timings = common.compare(variants, baseline="torch" if torch_on else "tinyflo", rounds=steps // chunk,
                             warmup=1, min_sample_s=0.0, sync=common.device_sync(device, torch_on))
    last = {name: float(loss.item()) for name, loss in trainers.last_loss.items()}
    rows = [[name, t.median_s / chunk * 1e3, sum(t.samples_s), t.ratio, last[name], f"{t.spread:.0%}"]
            for name, t in timings.items()]
    shape = f"{config.n_layer} layers × {config.n_embd} channels, {config.n_head} heads, context {config.block_size}"
    table = common.Table(f"GPT ({shape}), batches of {config.batch_size}, {steps} training steps on {device}",
                         ["variant", "ms/step", f"seconds for {steps} steps", "× torch", "loss at the last step",
                          "IQR"], rows)
    targets = []
    if gpu:
        targets.append(common.Target(f"milestone 6's GPT, {steps} training steps: tinyflo vs torch CUDA (× torch)",
                                     timings["tinyflo"].ratio if torch_on else None, GPU_TARGET,
                                     note=torch_missing or (common.SMOKE_NOTE if smoke else ""), judged=not smoke))
    notes = [
        f"The model is milestone 6's own ({NOTEBOOK.relative_to(common.REPO_ROOT)}: its GPTConfig, GPT and "
        "lm_loss cells are run by this benchmark); torch's is the same network, operation for operation "
        "(attention from matmul, a causal mask and softmax; LayerNorm without bias; GELU tanh; the head tied to "
        "the token embedding), starting from copies of tinyflo's initial weights.",
        f"A step: warm-up + cosine learning rate (one schedule object sets both optimizers), a batch of "
        f"{config.batch_size} windows gathered from the text on the device, forward, cross-entropy, backward, "
        f"clip_grad_norm at {config.grad_clip}, AdamW (weight decay {config.weight_decay} on matrices only).",
        f"Data: {source}. Both libraries train on the same batches.",
        f"Timing: {steps} steps of each in chunks of {chunk}, tinyflo's and torch's chunks alternating, after one "
        "untimed warm-up chunk each; ms/step is the median chunk over its steps; seconds is the sum of the chunks.",
        f"Before timing, the first step's loss (rtol 1e-4) and every gradient (rtol 1e-3, atol 1e-4 × largest) "
        f"agree: first losses {', '.join(f'{k} {v:.5f}' for k, v in first.items())}.",
        "IQR: interquartile range of the chunks relative to the median.",
    ]
    if gpu:
        notes.insert(0, f"On {device}: each chunk waits for the GPU (cupy Device.synchronize, torch.cuda.synchronize) "
                        "before the clock starts and before it stops; torch's TF32 is off.")
    if torch_missing:
        notes.append(f"{torch_missing}: its variant is left out.")
    if smoke:
        notes.insert(0, "SMOKE RUN: tiny sizes and few steps, to check that the benchmark runs; the numbers mean nothing.")
    where = f"on {device}" if gpu else "on the CPU"
    return common.save_result(
        common.result_name("transformer", device),
        "Milestone 6's GPT: training steps" + (f" on {device}" if gpu else ""),
        f"Milliseconds per training step of milestone 6's character GPT, and seconds for {steps} steps, tinyflo "
        f"against the same model in PyTorch, {where}.",
        [table],
        timings,
        {"steps": steps, "chunk": chunk, "device": device, "smoke": smoke, "config": config.__dict__},
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
