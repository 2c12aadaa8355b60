"""Checkpoint throughput: MB/s to save and to load a ~100 MB training state (an MLP and Adam's two moments).

tinyflo's `save_checkpoint` / `load_checkpoint` (safetensors written by hand, SHA-256 over header and payload,
atomic write with fsync; loading verifies the checksum, then copies into the model's and the optimizer's
arrays) against writing and reading the same arrays with `np.savez`, the reference `safetensors.numpy`
and `torch.save` / `torch.load(weights_only=True)` when they are installed.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import numpy as np

import tinyflo
from benchmarks import common
from tinyflo.core.checkpoints import load_checkpoint, load_file, save_checkpoint
from tinyflo.core.layers import Linear, ReLU, Sequential
from tinyflo.core.losses import cross_entropy
from tinyflo.core.optim import Adam

WIDTH = 2048  # 2 x (2048 x 2048) weights: 8.4 M parameters, 33.6 MB; with Adam's m and v about 100 MB
TINYFLO = "tinyflo save_checkpoint"
TINYFLO_LOAD = "tinyflo load_checkpoint (into model + Adam)"


def setup() -> tuple[Sequential, Adam, dict[str, np.ndarray]]:
    """The model, an Adam with state after one step, and the same state as a dict of NumPy arrays."""
    tinyflo.manual_seed(0)
    model = Sequential(Linear(WIDTH, WIDTH), ReLU(), Linear(WIDTH, WIDTH))
    opt = Adam(model.parameters(), lr=1e-3)
    x = tinyflo.randn(4, WIDTH)
    opt.zero_grad()
    cross_entropy(model(x), tinyflo.Tensor(np.arange(4))).backward()
    opt.step()
    arrays = {k: v.numpy() for k, v in model.state_dict().items()}
    for i, p in enumerate(model.parameters()):
        for key, value in opt.state[p].items():
            if hasattr(value, "shape"):
                arrays[f"optimizer.state.{i}.{key}"] = value
    return model, opt, arrays


def _fsynced(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def main(rounds: int = 11, out: str | None = None) -> tuple[Path, Path]:
    """Measure, print and save ``results/checkpoint.{json,md}``."""
    model, opt, arrays = setup()
    megabytes = sum(a.nbytes for a in arrays.values()) / 1e6
    torch = common.optional_torch()
    try:
        from safetensors import numpy as st_numpy
    except ImportError:
        st_numpy = None
    with tempfile.TemporaryDirectory(dir=os.environ.get("BENCH_TMPDIR")) as folder:
        folder = Path(folder)
        ours, npz, st_path, pt = (folder / n for n in ("ours.safetensors", "np.npz", "st.safetensors", "t.pt"))
        saves = {
            TINYFLO: lambda: save_checkpoint(ours, model, opt),
            "np.savez": lambda: np.savez(npz, **arrays),
            "np.savez + fsync": lambda: (np.savez(npz, **arrays), _fsynced(npz)),
        }
        if st_numpy is not None:
            saves["safetensors.numpy.save_file"] = lambda: st_numpy.save_file(arrays, str(st_path))
        if torch is not None:
            tensors = {k: torch.from_numpy(v) for k, v in arrays.items()}
            saves["torch.save"] = lambda: torch.save(tensors, pt)
        for save in saves.values():
            save()
        # the same math first: every writer's file holds the same numbers
        back, _ = load_file(ours)
        with np.load(npz) as f:
            assert all(np.array_equal(back[k], f[k]) for k in arrays)
        fresh = Sequential(Linear(WIDTH, WIDTH), ReLU(), Linear(WIDTH, WIDTH))
        fresh_opt = Adam(fresh.parameters(), lr=1e-3)
        load_checkpoint(ours, fresh, fresh_opt)
        assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(model.parameters(), fresh.parameters()))

        def np_load():
            with np.load(npz) as f:
                return {k: f[k] for k in f.files}

        loads = {
            TINYFLO_LOAD: lambda: load_checkpoint(ours, fresh, fresh_opt),
            "tinyflo load_file (read + verify)": lambda: load_file(ours),
            "np.load (npz)": np_load,
        }
        if st_numpy is not None:
            loads["safetensors.numpy.load_file"] = lambda: st_numpy.load_file(str(st_path))
        if torch is not None:
            loads["torch.load(weights_only=True)"] = lambda: torch.load(pt, weights_only=True)
        save_t = common.compare(saves, baseline="np.savez", rounds=rounds)
        load_t = common.compare(loads, baseline="np.load (npz)", rounds=rounds)
    tables = [
        common.Table(f"save: {megabytes:.0f} MB (MLP {WIDTH}-{WIDTH}-{WIDTH} + Adam's m and v, float32)",
                     ["variant", "ms", "MB/s", "× np.savez", "IQR"],
                     [[n, t.median_s * 1e3, megabytes / t.median_s, t.ratio, f"{t.spread:.0%}"] for n, t in save_t.items()]),
        common.Table(f"load: {megabytes:.0f} MB from the page cache",
                     ["variant", "ms", "MB/s", "× np.load", "IQR"],
                     [[n, t.median_s * 1e3, megabytes / t.median_s, t.ratio, f"{t.spread:.0%}"] for n, t in load_t.items()]),
    ]
    notes = [
        "tinyflo's save copies the state to host memory (what the background saver needs), hashes it "
        "(SHA-256), writes a temporary file, fsyncs it, renames it and fsyncs the folder; the baselines "
        "write straight to the path and do not fsync (except 'np.savez + fsync'). fsync's cost is the "
        "disk's: on tmpfs it is free, on a network disk it dominates.",
        "Loads read from the page cache (the file was just written): they measure parsing, hashing and "
        "copying, not the disk. tinyflo's load_checkpoint reads, verifies the checksum, then copies into "
        "the existing parameter and optimizer arrays.",
        "Files live in a temporary folder under $BENCH_TMPDIR (default: the system's temp folder).",
    ]
    return common.save_result(
        "checkpoint", "Checkpoint save/load throughput",
        f"MB/s to save and load a {megabytes:.0f} MB training state: tinyflo against np.savez, the reference "
        "safetensors writer and torch.save.",
        tables, {f"save: {k}": v for k, v in save_t.items()} | {f"load: {k}": v for k, v in load_t.items()},
        {"rounds": rounds, "megabytes": megabytes, "tmpdir": tempfile.gettempdir()}, notes, out=out,
    )


if __name__ == "__main__":
    main(**vars(common.parse_args(__doc__.splitlines()[0])))
