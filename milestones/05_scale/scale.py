# ---
# jupyter:
#   jupytext:
#     text_representation:
#       extension: .py
#       format_name: percent
#   kernelspec:
#     display_name: Python 3
#     language: python
#     name: python3
# ---

# %% [markdown]
# # Milestone 5 — Training at scale: everything on at once
#
# The networks of milestones 3 and 4 are small by today's standards, but the
# way large networks are trained grew out of a handful of techniques, each
# published with a promise. This notebook switches them on one at a time on
# the same model, data and budget, and measures whether each keeps its promise.
#
# | feature | what it promises | source |
# |---|---|---|
# | AdamW | Adam's per-parameter steps reach a lower loss than plain SGD in the same number of steps; AdamW decouples the weight decay from them | Kingma & Ba, *Adam: A Method for Stochastic Optimization*, ICLR 2015; Loshchilov & Hutter, *Decoupled Weight Decay Regularization*, ICLR 2019 |
# | warm-up + cosine decay | a gentle start, then a learning rate annealed to 0, which ends at a lower loss | Goyal et al., *Accurate, Large Minibatch SGD: Training ImageNet in 1 Hour*, arXiv:1706.02677 (2017); Loshchilov & Hutter, *SGDR: Stochastic Gradient Descent with Warm Restarts*, ICLR 2017 |
# | gradient clipping | no update larger than a set gradient norm, whatever the batch | Pascanu, Mikolov & Bengio, *On the difficulty of training recurrent neural networks*, ICML 2013 |
# | mixed precision (float16 + loss scaling) | float32 accuracy with half the activation memory; the scale backs off on overflow | Micikevicius et al., *Mixed Precision Training*, ICLR 2018 |
# | checkpoint + exact resume | a crashed job resumes from its last checkpoint and ends exactly where it would have | (engineering practice; module 09) |
# | data-parallel gradient averaging | k ranks, each on 1/k of the batch, take the same steps as one device on the whole batch; a ring all-reduce sends 2(k−1)/k of the gradients per rank | Goyal et al. 2017; Patarasuk & Yuan, *Bandwidth optimal all-reduce algorithms for clusters of workstations*, JPDC 69(2), 2009 |
#
# **Data and model.** An MLP with one hidden layer of 128 ReLU units. The full
# run trains on MNIST (when the files are there), shrunk to 14×14 pixels so
# that the float16 row fits the time budget on a CPU: NumPy has no float16 BLAS,
# and its float16 matrix products run tens of times slower than float32 ones. The
# quick run (CI), or a full run without MNIST (which then says how to get it,
# and cannot be recorded), trains on the 8×8 digits bundled with tinyflo. The speed-up mixed precision promises belongs to GPUs with
# tensor cores; on a CPU this notebook checks only what it promises about
# accuracy and memory, and reports the time honestly.
#
# **Needs** every course module: 01 tensor, 02 autograd, 03 layers, 04 losses,
# 05 data, 06 optimizers, 07 schedulers, 08 training, 09 checkpoints,
# 10 convolutions, 11 mixed precision, 12 distributed.

# %%
import json
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import numpy as np

import tinyflo
from tinyflo import datasets, milestones, nn
from tinyflo.distributed import init_process_group
from tinyflo.nn import functional as F
from tinyflo.optim.lr_scheduler import CosineAnnealing, Warmup

run = milestones.start("scale")
plt = run.pyplot()  # matplotlib.pyplot, or None without matplotlib: then the plots are skipped

# %% [markdown]
# ## The data

# %%
mnist_root = None if run.quick else run.need_data("mnist", "train-images-idx3-ubyte.gz",
                                                   "MNIST (the 8×8 digits stand in)")
if mnist_root is None:
    data_name = "the 8×8 digits (bundled)"
    x_train, y_train = datasets.digits(train=True, flatten=True, as_arrays=True)
    x_test, y_test = datasets.digits(train=False, flatten=True, as_arrays=True)
else:
    data_name = "MNIST at 14×14"
    x_train, y_train = datasets.mnist(mnist_root, train=True, flatten=True, as_arrays=True, size=14)
    x_test, y_test = datasets.mnist(mnist_root, train=False, flatten=True, as_arrays=True, size=14)
print(f"{data_name}: {len(x_train):,} training and {len(x_test):,} test images of {x_train.shape[1]} pixels")
run.numbers.update(data=data_name, train_images=len(x_train), test_images=len(x_test))

# %% [markdown]
# ## The recipe, one switch per feature
#
# `Config` holds every setting; `make_trainer` turns it into a `Trainer`.
# `Recorder` is a `Trainer` that also keeps, for every step, the loss, the
# learning rate, the gradient norm before and after clipping, and the
# GradScaler's scale. It keeps them on the device and reads them once at the
# end, so it adds no synchronisation to the loop.

# %%
@dataclass
class Config:
    """One training run: the model, the budget and the features switched on."""

    epochs: int
    batch_size: int
    hidden: int = 128
    optimizer: str = "sgd"  # "sgd" or "adamw"
    lr: float = 0.1
    weight_decay: float = 0.0
    schedule: bool = False  # linear warm-up over the first epoch, then a cosine decay to 0
    clip: float | None = None  # the largest gradient norm an update may use
    amp: str | None = None  # "float16": autocast + GradScaler
    seed: int = 0


# The GradScaler grows its scale after 50 clean steps (PyTorch: 2,000), so that a run this short shows
# the whole trajectory: start at 2**16, grow, overflow, back off, grow again.
GROWTH_INTERVAL = 50


def grad_norm(params):
    """The global L2 norm of the parameters' gradients, a 0-d tensor on their device (no read)."""
    with tinyflo.no_grad(), np.errstate(over="ignore", invalid="ignore"):
        return sum((p.grad * p.grad).sum() for p in params if p.grad is not None).sqrt()


class Recorder(tinyflo.Trainer):
    """A Trainer that records, per step, the loss, learning rate, gradient norm before/after clipping, loss scale."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trace = {"loss": [], "lr": [], "norm": [], "clipped_norm": [], "scale": []}

    def forward(self, x, y, index, op="train_epoch"):
        out, loss = super().forward(x, y, index, op)
        if op == "train_epoch":
            self.trace["loss"].append(loss.detach())
        return out, loss

    def optimizer_step(self, loss_total):
        scale = self.scaler.get_scale() if self.scaler is not None else 1.0
        self.trace["lr"].append(self.lr)
        self.trace["scale"].append(scale)
        # (with data parallelism each replica holds only its shard's gradients here)
        single = not isinstance(self.strategy, tinyflo.distributed.DataParallelStrategy)
        if single:
            self.trace["norm"].append(grad_norm(self.params) / scale)  # the gradients are still scaled
        super().optimizer_step(loss_total)
        if single:
            self.trace["clipped_norm"].append(grad_norm(self.params))  # what the optimizer stepped with

    def steps(self):
        """The trace as NumPy arrays: one device-to-host read per quantity."""
        return {key: (tinyflo.stack(values).numpy() if values and isinstance(values[0], tinyflo.Tensor)
                      else np.asarray(values, dtype=np.float64)) for key, values in self.trace.items()}


def make_model(config, inputs):
    """inputs-hidden-10 with ReLU."""
    tinyflo.manual_seed(config.seed)
    return nn.Sequential(nn.Linear(inputs, config.hidden), nn.ReLU(), nn.Linear(config.hidden, 10)).to(run.device)


def make_trainer(config, model, steps_per_epoch, group=None):
    """The Trainer with the features ``config`` switches on (``group``: data parallel over its ranks)."""
    if config.optimizer == "adamw":
        optimizer = tinyflo.optim.AdamW(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    else:
        optimizer = tinyflo.optim.SGD(model.parameters(), lr=config.lr, weight_decay=config.weight_decay)
    schedule = None
    if config.schedule:
        total = config.epochs * steps_per_epoch
        schedule = Warmup(CosineAnnealing(total - steps_per_epoch), warmup_steps=steps_per_epoch,
                          start_factor=0.1)
    plugins = []
    if config.amp is not None:  # mixed precision, with the scaler's growth interval of this milestone
        scaler = tinyflo.GradScaler(growth_interval=GROWTH_INTERVAL) if config.amp == "float16" else None
        plugins.append(tinyflo.MixedPrecision(config.amp, scaler=scaler))
    return Recorder(model, optimizer, F.cross_entropy, scheduler=schedule, scheduler_interval="step",
                    grad_clip_norm=config.clip, group=group, plugins=plugins)


def loaders(config, x, y):
    """(shuffled training loader, test loader) on the milestone's device."""
    train = tinyflo.DataLoader(tinyflo.TensorDataset(x, y), batch_size=config.batch_size, shuffle=True,
                               seed=config.seed, device=run.device)
    test = tinyflo.DataLoader(tinyflo.TensorDataset(x_test, y_test), batch_size=1000, device=run.device)
    return train, test


def train(config, x=x_train, y=y_train, group=None):
    """Train one configuration; (trainer, per-step trace, test accuracy, seconds)."""
    train_loader, test_loader = loaders(config, x, y)
    trainer = make_trainer(config, make_model(config, x.shape[1]), len(train_loader), group)
    start = time.perf_counter()
    trainer.fit(train_loader, test_loader, epochs=config.epochs)
    seconds = time.perf_counter() - start
    return trainer, trainer.steps(), trainer.history["val_acc"][-1], seconds


# %% [markdown]
# ## 1–5. The ablation: one feature more per row
#
# Same model, same initial weights, same order of batches; each row adds one
# feature to the row before. The peak learning rate of AdamW, 0.03, is high
# for Adam (its usual default is 0.001): large-batch training pushes the rate
# up to go fast, and that is where a constant rate stalls in noise and
# warm-up + decay pay off. Clipping caps the gradient norm at the 90th
# percentile of the norms the row before saw, so it acts on the largest tenth.

# %%
epochs, batch_size = (8, 32) if mnist_root is None else (3, 128)
baseline = Config(epochs=epochs, batch_size=batch_size, optimizer="sgd", lr=0.1)
adamw = replace(baseline, optimizer="adamw", lr=0.03, weight_decay=0.01)
scheduled = replace(adamw, schedule=True)
results = {}


def ablate(name, config):
    """Train one row of the ablation and keep what it measured."""
    trainer, trace, accuracy, seconds = train(config)
    results[name] = {"config": config, "trainer": trainer, "trace": trace, "accuracy": accuracy,
                     "seconds": seconds, "train_loss": trainer.history["train_loss"][-1]}
    print(f"{name:28s} test accuracy {accuracy:.2%}  last-epoch train loss {results[name]['train_loss']:.4f}  "
          f"{seconds:5.1f} s")


ablate("SGD, constant LR", baseline)
ablate("AdamW", adamw)
ablate("+ warm-up + cosine", scheduled)
clip = float(f"{np.percentile(results['+ warm-up + cosine']['trace']['norm'], 90):.2g}")
clipped = replace(scheduled, clip=clip)
ablate("+ clipping", clipped)
mixed = replace(clipped, amp="float16")
ablate("+ AMP float16 + GradScaler", mixed)
steps = len(results["AdamW"]["trace"]["loss"])
print(f"{epochs} epochs, batch {batch_size}: {steps} steps per run")

# %% [markdown]
# ### What clipping did, and what float16 cost and saved
#
# The clipped run's gradient norm is measured before and after
# `clip_grad_norm`. For the float16 run: the steps the GradScaler skipped
# (a gradient overflowed float16), the scale it ended with, and the bytes of
# the activations of one batch, which autocast computes in float16, beside
# the parameters, which stay in float32 (the master weights).

# %%
norms = results["+ clipping"]["trace"]
clipped_steps = int((norms["norm"] > clip).sum())
print(f"clipping at {clip}: {clipped_steps} of {len(norms['norm'])} steps clipped; gradient norm before: "
      f"median {np.median(norms['norm']):.3f}, max {norms['norm'].max():.3f}; after: max "
      f"{norms['clipped_norm'].max():.4f}")

amp_trainer = results["+ AMP float16 + GradScaler"]["trainer"]
scales = results["+ AMP float16 + GradScaler"]["trace"]["scale"]
skipped = amp_trainer.scaler.skipped_steps


def activation_bytes(model, x, amp):
    """Bytes of every layer's output for the batch ``x`` (under autocast when ``amp`` names a dtype)."""
    total = 0
    with tinyflo.no_grad(), tinyflo.autocast(amp or "float16", enabled=amp is not None):
        for layer in model:
            x = layer(x)
            total += x.numel() * x.dtype.itemsize
    return total


batch = tinyflo.tensor(x_test[:batch_size], device=run.device)
bytes32 = activation_bytes(amp_trainer.model, batch, None)
bytes16 = activation_bytes(amp_trainer.model, batch, "float16")
param_bytes = sum(p.numel() * p.dtype.itemsize for p in amp_trainer.model.parameters())
param_dtypes = sorted({str(p.dtype) for p in amp_trainer.model.parameters()})
amp_slowdown = results["+ AMP float16 + GradScaler"]["seconds"] / results["+ clipping"]["seconds"]
print(f"float16: {skipped} of {len(scales)} steps skipped; scale {scales[0]:.0f} -> {amp_trainer.scaler.get_scale():.0f}; "
      f"activations of a batch of {batch_size}: {bytes32:,} B in float32, {bytes16:,} B under autocast; parameters "
      f"{param_bytes:,} B ({', '.join(param_dtypes)}, unchanged); {amp_slowdown:.1f}× the float32 time on {run.device}")

# %% [markdown]
# ## 6. Checkpoint, crash, exact resume
#
# The program below trains the recipe of row 5 (everything so far, float16
# included) on a short run, saving a checkpoint every few steps with a
# `CheckpointManager`. Run with `crash`, it dies in the middle of an epoch with
# `os._exit` — no exception, no cleanup, the way a killed job dies — a few
# steps after its last checkpoint. Run with `resume`, a fresh process builds a
# model with *other* initial weights and another shuffling seed, loads the
# newest checkpoint and trains to the end. Run with `straight`, it trains
# without interruption. Exact resume means the resumed run ends with the same
# parameters, GradScaler and history as the straight one, bit for bit. The
# short run is two epochs: of the digits in a quick run, of the first 12,800
# MNIST images (200 steps) in a full one. Checkpoints go to a temporary folder.

# %%
PROGRAM = textwrap.dedent('''
    import json, os, sys
    from pathlib import Path

    import numpy as np

    import tinyflo
    from tinyflo import nn
    from tinyflo.nn import functional as F
    from tinyflo.optim.lr_scheduler import CosineAnnealing, Warmup

    mode, work = sys.argv[1], Path(sys.argv[2])
    c = json.loads((work / "config.json").read_text())
    data = np.load(work / "data.npz")


    def build(seed):
        """The recipe of row 5: AdamW, warm-up + cosine, clipping, float16 with a GradScaler."""
        tinyflo.manual_seed(seed)
        model = nn.Sequential(nn.Linear(data["x"].shape[1], c["hidden"]), nn.ReLU(),
                              nn.Linear(c["hidden"], 10)).to(c["device"])
        loader = tinyflo.DataLoader(tinyflo.TensorDataset(data["x"], data["y"]), batch_size=c["batch_size"],
                                    shuffle=True, seed=seed, device=c["device"])
        per_epoch = len(loader)
        schedule = Warmup(CosineAnnealing((c["epochs"] - 1) * per_epoch), warmup_steps=per_epoch, start_factor=0.1)
        precision = tinyflo.MixedPrecision(c["amp"], scaler=tinyflo.GradScaler(growth_interval=c["growth_interval"]))
        trainer = tinyflo.Trainer(model, tinyflo.optim.AdamW(model.parameters(), lr=c["lr"],
                                                             weight_decay=c["weight_decay"]),
                                  F.cross_entropy, scheduler=schedule, scheduler_interval="step",
                                  grad_clip_norm=c["clip"], plugins=[precision],
                                  verbosity="quiet")  # the notebook reads what this prints: no epoch lines
        return trainer, loader


    class Checkpointing:
        """The loader, plus a checkpoint every c["every"] steps and, in crash mode, death at c["crash_at"]."""

        def __init__(self, loader, trainer, manager):
            self.loader, self.trainer, self.manager = loader, trainer, manager
            self.manager_step = None

        def __len__(self):
            return len(self.loader)

        def state_dict(self):
            return self.loader.state_dict()

        def load_state_dict(self, state):
            self.loader.load_state_dict(state)

        def __iter__(self):
            batches = iter(self.loader)
            while True:  # between two steps, before the next batch is drawn
                step = self.trainer.step
                if mode == "crash" and step == c["crash_at"]:
                    os._exit(3)
                if step > 0 and step % c["every"] == 0 and step != self.manager_step:
                    self.manager.save(self.trainer)
                    self.manager_step = step
                batch = next(batches, None)
                if batch is None:
                    return
                yield batch


    seed = 99 if mode == "resume" else 0  # resuming must override other weights and another shuffling
    trainer, loader = build(seed)
    manager = tinyflo.CheckpointManager(work / mode.replace("crash", "resume"), keep_last=2)
    epochs = c["epochs"]
    if mode == "resume":
        latest = manager.latest()
        trainer.load_checkpoint(latest, train_loader=loader)
        print(f"resumed from {latest.name}: step {trainer.step}, epoch {trainer.epoch}")
        epochs -= trainer.epoch
    trainer.fit(Checkpointing(loader, trainer, manager), epochs=epochs)
    np.savez(work / f"{mode}.npz", **{k: v.numpy() for k, v in trainer.model.state_dict().items()})
    history = {k: v for k, v in trainer.history.items() if k != "time"}
    (work / f"{mode}.json").write_text(json.dumps({"history": history, "step": trainer.step,
                                                   "scaler": trainer.scaler.state_dict()}))
''')

# %%
if run.quick or mnist_root is None:
    short_x, short_y = x_train, y_train
else:
    short_x, short_y = x_train[:12800], y_train[:12800]  # 100 steps an epoch at batch 128
short = replace(mixed, epochs=2)
short_steps = short.epochs * (len(short_x) // short.batch_size + (len(short_x) % short.batch_size > 0))
every = short_steps // 4 + 1  # the last checkpoint falls in the second epoch
crash_at = 3 * every + every // 2

work = Path(tempfile.mkdtemp(prefix="tinyflo-scale-"))
(work / "program.py").write_text(PROGRAM)
np.savez(work / "data.npz", x=short_x, y=short_y)
(work / "config.json").write_text(json.dumps({**asdict(short), "device": str(run.device), "every": every,
                                              "crash_at": crash_at, "growth_interval": GROWTH_INTERVAL}))


def child(mode):
    """Run the program in a fresh Python process; its exit code and output."""
    done = subprocess.run([sys.executable, str(work / "program.py"), mode, str(work)], capture_output=True,
                          text=True, timeout=600)
    if done.returncode not in (0, 3):
        raise RuntimeError(f"the {mode} process failed (exit code {done.returncode}; its files are in "
                           f"{work}):\n{done.stderr}")
    return done.returncode, done.stdout.strip()


start = time.perf_counter()
straight_code, _ = child("straight")
crash_code, _ = child("crash")
checkpoints = sorted(p.name for p in (work / "resume").glob("*.safetensors"))
resume_code, resume_says = child("resume")
resume_seconds = time.perf_counter() - start
straight_params, resumed_params = np.load(work / "straight.npz"), np.load(work / "resume.npz")
resume_delta = max(float(np.abs(straight_params[k] - resumed_params[k]).max()) for k in straight_params.files)
bitwise = all(np.array_equal(straight_params[k], resumed_params[k]) and
              straight_params[k].dtype == resumed_params[k].dtype for k in straight_params.files)
straight_state, resumed_state = (json.loads((work / f"{m}.json").read_text()) for m in ("straight", "resume"))
same_history = straight_state == resumed_state
print(f"straight: {short_steps} steps, exit code {straight_code}; crash: exit code {crash_code} at step {crash_at}, "
      f"checkpoints left: {', '.join(checkpoints)}; {resume_says} (a fresh process)")
print(f"resumed vs straight: max |Δ parameter| = {resume_delta}, bit-for-bit: {bitwise}; history, step and "
      f"GradScaler state equal: {same_history} ({resume_seconds:.1f} s for the three processes)")
shutil.rmtree(work)

# %% [markdown]
# ## 7. Data parallel over 2 ranks (the `local` backend)
#
# `init_process_group("local", world_size=2)` gives two replicas in this one
# process, each on its own (virtual) device. Every global batch is split in
# two; each replica computes the gradient of its half; one ring all-reduce of
# the flat gradient buffer sums the halves weighted by their sizes; both
# replicas take the same AdamW step. Against one device training on the whole
# batch, the only difference is the order of float32 additions, so the
# parameters agree to rounding. This runs the float32 recipe of row 4: in
# float16 the comparison would measure float16 rounding, not the averaging.

# %%
DP_TOLERANCE = 1e-4  # float32 rounding, carried through every AdamW step of the short run
parallel_config = replace(clipped, epochs=2)
devices = None if run.device.type == "cpu" else [run.device, run.device]
group = init_process_group("local", world_size=2, devices=devices)
dp_trainer, dp_trace, dp_accuracy, dp_seconds = train(parallel_config, short_x, short_y, group=group)
one_trainer, one_trace, one_accuracy, one_seconds = train(parallel_config, short_x, short_y)
dp_delta = max(float(np.abs(a.numpy() - b.numpy()).max())
               for a, b in zip(dp_trainer.model.parameters(), one_trainer.model.parameters()))
replicas_delta = max(float(np.abs(a.numpy() - b.numpy()).max())
                     for a, b in zip(*(r.parameters() for r in dp_trainer.strategy.parallel.replicas)))
n_params = sum(p.numel() for p in one_trainer.model.parameters())
dp_steps = len(dp_trace["loss"])
ring_bytes = dp_steps * 2 * (2 - 1) * n_params * 4 // 2  # 2(k-1)/k of the float32 buffer per step and rank
sent = group.bytes_sent
print(f"{dp_steps} steps on 2 ranks vs 1 device: max |Δ parameter| = {dp_delta:.2e} (tolerance {DP_TOLERANCE:g}); "
      f"replicas differ by {replicas_delta}; test accuracy {dp_accuracy:.2%} vs {one_accuracy:.2%}")
print(f"all-reduce: rank 0 sent {sent[0]:,} B, rank 1 {sent[1]:,} B; the ring's 2(k-1)/k × {n_params:,} float32 "
      f"gradients × {dp_steps} steps = {ring_bytes:,} B per rank (+ {n_params * 4:,} B: rank 0's first broadcast)")

# %% [markdown]
# ## The ablation table

# %%
names = list(results)
acc = [results[n]["accuracy"] for n in names]
loss = [results[n]["train_loss"] for n in names]
secs = [results[n]["seconds"] for n in names]
effects = [
    "baseline",
    f"{100 * (acc[1] - acc[0]):+.1f} points vs SGD",
    f"{100 * (acc[2] - acc[1]):+.1f} points; last-epoch loss {loss[2]:.4f} vs {loss[1]:.4f}",
    f"{clipped_steps}/{len(norms['norm'])} steps clipped; max norm {norms['norm'].max():.2f} → "
    f"{norms['clipped_norm'].max():.2f}; {100 * (acc[3] - acc[2]):+.1f} points",
    f"{100 * (acc[4] - acc[3]):+.1f} points; {skipped} skipped steps; activations {bytes16 / bytes32:.0%} of float32; "
    f"{amp_slowdown:.1f}× time ({run.device})",
]
lines = ["| # | feature | test accuracy | last-epoch train loss | seconds | measured effect |",
         "|---|---|---|---|---|---|"]
for i, name in enumerate(names):
    lines.append(f"| {i + 1} | {name} | {acc[i]:.2%} | {loss[i]:.4f} | {secs[i]:.1f} | {effects[i]} |")
lines.append(f"| 6 | + checkpoint, crash, resume | — | — | {resume_seconds:.1f} | max \\|Δ\\| = {resume_delta:g} after a "
             f"crash at step {crash_at} of {short_steps}; history {'equal' if same_history else 'DIFFERENT'} |")
lines.append(f"| 7 | data parallel, 2 local ranks | {dp_accuracy:.2%} | {dp_trainer.history['train_loss'][-1]:.4f} | "
             f"{dp_seconds:.1f} | max \\|Δ\\| = {dp_delta:.1e} vs 1 device after {dp_steps} steps; "
             f"{sent[1]:,} B all-reduced per rank (rank 0: + the first broadcast) |")
ablation = "\n".join(lines)
print(ablation)
(run.out / "ablation.md").write_text(f"# Ablation ({data_name}, {run.mode} run on {run.device})\n\n{ablation}\n")
run.numbers.update(
    ablation={n: {"accuracy": a, "train_loss": lo, "seconds": s, "config": asdict(results[n]["config"])}
              for n, a, lo, s in zip(names, acc, loss, secs)},
    steps_per_run=steps, clip=clip, clipped_steps=clipped_steps, norm_max_before=float(norms["norm"].max()),
    norm_max_after=float(norms["clipped_norm"].max()), amp_skipped_steps=skipped,
    amp_final_scale=amp_trainer.scaler.get_scale(), amp_activation_bytes={"float32": bytes32, "float16": bytes16},
    amp_param_bytes=param_bytes, amp_time_ratio=amp_slowdown,
    resume_steps=short_steps, resume_crash_at=crash_at, resume_crash_exit_code=crash_code,
    resume_max_delta=resume_delta, resume_bitwise=bitwise, resume_history_equal=same_history,
    dp_steps=dp_steps, dp_max_delta=dp_delta, dp_tolerance=DP_TOLERANCE, dp_replicas_delta=replicas_delta,
    dp_bytes_sent=list(sent), dp_ring_bytes=ring_bytes, dp_accuracy=dp_accuracy, single_accuracy=one_accuracy,
)

# %% [markdown]
# ## Plots

# %%
def smooth(values, width):
    """A moving average (the per-step loss is noisy)."""
    width = max(1, min(width, len(values)))
    return np.convolve(values, np.ones(width) / width, mode="valid")


per_epoch = steps // epochs
if plt is not None:
    # two panels a row, at the book's width: every text stays readable (figure_problems)
    fig, grid = plt.subplots(3, 2, figsize=(12, 12.5), layout="constrained")
    axes = np.array([[grid[0, 0], grid[0, 1], grid[1, 0]], [grid[1, 1], grid[2, 0], grid[2, 1]]])
    for name in names:
        axes[0, 0].plot(smooth(results[name]["trace"]["loss"], per_epoch // 2 or 1), label=name)
    axes[0, 0].set(xlabel="step", ylabel="training loss (moving average)", yscale="log", title="Training loss, each run adding one feature")
    axes[0, 0].legend(fontsize=9)
    for name in ("SGD, constant LR", "AdamW", "+ warm-up + cosine"):
        axes[0, 1].plot(results[name]["trace"]["lr"], label=name)
    axes[0, 1].set(xlabel="step", ylabel="learning rate", title="Learning rate")
    axes[0, 1].legend(fontsize=9)
    axes[0, 2].plot(norms["norm"], lw=0.8, label="before clipping")
    axes[0, 2].plot(norms["clipped_norm"], lw=0.8, label="after clipping")
    axes[0, 2].axhline(clip, color="k", ls="--", label=f"max norm {clip:g}")
    axes[0, 2].set(xlabel="step", ylabel="gradient norm", yscale="log",
                   title=f"Clipping: {clipped_steps} of {len(norms['norm'])} steps clipped")
    axes[0, 2].legend(fontsize=9)
    axes[1, 0].step(range(len(scales)), scales, where="post")
    skipped_at = np.flatnonzero(~np.isfinite(results["+ AMP float16 + GradScaler"]["trace"]["norm"]))
    axes[1, 0].plot(skipped_at, scales[skipped_at], "rx", label=f"skipped steps ({skipped})")
    axes[1, 0].set(xlabel="step", ylabel="loss scale", yscale="log", title="GradScaler scale")
    axes[1, 0].legend(fontsize=9)
    axes[1, 1].plot(one_trace["loss"], lw=2.5, alpha=0.5, label="1 device, whole batch")
    axes[1, 1].plot(dp_trace["loss"], lw=0.8, ls="--", label="2 ranks, half a batch each")
    axes[1, 1].set(xlabel="step", ylabel="training loss", yscale="log", title=f"Data parallel: max |Δ parameter| = {dp_delta:.1e}")
    axes[1, 1].legend(fontsize=9)
    short_names = ["SGD", "AdamW", "+sched", "+clip", "+AMP"]
    # Dots, not bars: the axis starts near the lowest accuracy, where a bar's length would mislead.
    axes[1, 2].scatter(short_names, [100 * a for a in acc], s=60, color=[f"C{i}" for i in range(len(names))], zorder=3)
    axes[1, 2].set(ylabel="test accuracy (%)", ylim=(100 * min(acc) - 2, 100), title=f"Test accuracy, {data_name}")
    axes[1, 2].grid(axis="y", alpha=0.3)
    for i, a in enumerate(acc):
        axes[1, 2].annotate(f"{a:.1%}", (i, 100 * a), xytext=(0, 8), textcoords="offset points", ha="center",
                            fontsize=9)
    run.savefig(fig, "scale.png")

# %% [markdown]
# ## Reproduced, beside the published
#
# Each feature against a concrete criterion. A quick run (CI, the bundled
# digits, 8 epochs) asks the same of every feature and a lower accuracy floor.

# %%
floor = 0.95 if mnist_root is None else 0.97
run.figure("row 4 (AdamW, warm-up + cosine, clipping), test accuracy", f"{acc[3]:.2%}",
           "≥ 97% for an MLP on MNIST" if mnist_root else "≥ 95% on the 8×8 digits",
           "LeCun et al. 1998: 2-layer MLPs 95.3-98.4%" if mnist_root else "milestone 3", acc[3] >= floor,
           f"≥ {floor:.0%}")
run.figure("AdamW vs SGD, last-epoch training loss", f"{loss[1]:.4f} vs {loss[0]:.4f}", "lower at the same budget",
           "Kingma & Ba 2015; Loshchilov & Hutter 2019", loss[1] < loss[0])
run.figure("warm-up + cosine vs constant LR", f"{acc[2]:.2%}, loss {loss[2]:.4f} vs {acc[1]:.2%}, {loss[1]:.4f}",
           "more accurate, lower final loss", "Goyal et al. 2017; Loshchilov & Hutter 2017",
           acc[2] >= acc[1] and loss[2] < loss[1])
run.figure("AdamW + warm-up + cosine vs SGD, accuracy", f"{acc[2]:.2%} vs {acc[0]:.2%}", "at least as accurate",
           "Loshchilov & Hutter 2019", acc[2] >= acc[0])
run.figure(f"clipping bounds the gradient norm at {clip:g}", f"max {norms['clipped_norm'].max():.4f} after; "
           f"{clipped_steps} steps clipped", f"≤ {clip:g}", "Pascanu, Mikolov & Bengio 2013",
           norms["clipped_norm"].max() <= clip * (1 + 1e-4) and clipped_steps > 0)
run.figure("float16 + GradScaler vs float32, accuracy", f"{100 * (acc[4] - acc[3]):+.2f} points",
           "within 1 point", "Micikevicius et al. 2018", abs(acc[4] - acc[3]) <= 0.01)
run.figure("float16 activations", f"{bytes16 / bytes32:.0%} of float32; {skipped} skipped steps",
           "half; the scale backs off on overflow", "Micikevicius et al. 2018",
           bytes16 * 2 == bytes32 and skipped < 0.05 * len(scales))
run.figure("resume after a crash vs uninterrupted",
           f"max abs Δ = {resume_delta:g}; history {'the same' if same_history else 'differs'}",
           "bit for bit (Δ = 0)", "module 09: exact resume",
           crash_code == 3 and resume_delta == 0 and bitwise and same_history)
run.figure("2 ranks vs 1 device, parameters", f"max abs Δ = {dp_delta:.1e}", f"≤ {DP_TOLERANCE:g} (float32 rounding)",
           "Goyal et al. 2017", dp_delta <= DP_TOLERANCE and replicas_delta == 0)
run.figure("all-reduce bytes per rank", f"{sent[1]:,} B", f"2(k-1)/k × gradients = {ring_bytes:,} B",
           "Patarasuk & Yuan 2009", sent[1] == ring_bytes)
result = run.finish()
