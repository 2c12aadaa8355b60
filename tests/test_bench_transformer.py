"""benchmarks/bench_transformer.py's second form, the loop a user writes first, on a toy GPT without torch."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from benchmarks import bench_transformer as bench


def test_the_obvious_loop_trains_the_milestone_model_from_its_initial_weights():
    config = replace(bench.milestone_model()["GPTConfig"](), block_size=8, batch_size=2, n_layer=1, n_head=2,
                     n_embd=16)
    ids = np.random.default_rng(0).integers(0, bench.VOCAB, 500)
    trainers = bench.Trainers(None, config, ids, 3, "cpu", None)
    loops = bench.ObviousLoops(None, config, 3, "cpu", None)
    assert list(loops.steps()) == [bench.OBVIOUS]  # no torch: tinyflo's form alone
    start = {name: p.numpy().copy() for name, p in loops.model.named_parameters()}
    assert all(np.array_equal(start[name], p.numpy()) for name, p in trainers.model.named_parameters())
    first = loops.check_same_math()[bench.OBVIOUS]
    assert np.isclose(first, np.log(bench.VOCAB), rtol=0.05)  # N(0, 0.02) weights: near-uniform predictions
    losses = [float(loops.steps()[bench.OBVIOUS]().item()) for _ in range(3)]
    assert np.isclose(losses[0], first) and all(np.isfinite(losses))
    frozen = [name for name, p in loops.model.named_parameters() if not p.requires_grad]
    assert frozen and all(np.array_equal(start[name], p.numpy()) for name, p in loops.model.named_parameters() if name in frozen)
    assert len(loops.optimizer.param_groups) == 1 and loops.step_of[bench.OBVIOUS] == 3
