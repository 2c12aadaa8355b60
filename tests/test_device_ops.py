"""The device work of a training step, counted on the strict stand-in: no step does more than was recorded.

Wall-clock time on a GPU is measured only where one is lent; the counts of ``benchmarks/bench_device_ops.py``
(kernels, allocations, copies, reads, synchronisations per step of the milestone models) run anywhere, so a
change that adds device work to a step fails here, and one that removes some is recorded with
``python -m benchmarks.bench_device_ops --record``.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import tinyflo
from benchmarks import bench_device_ops
from tinyflo import strict_gpu
from tinyflo.core.conv import Conv2d, max_pool2d

RECORDED = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "device_ops.json"


def _counts(path: Path) -> dict[str, dict[str, int]]:
    """Each workload's counts per step, from a result file's first table."""
    table = json.loads(path.read_text())["tables"][0]
    kinds = bench_device_ops.KINDS
    return {row[0]: dict(zip(kinds, row[1:1 + len(kinds)])) for row in table["rows"]}


@pytest.mark.slow
def test_no_milestone_step_does_more_device_work_than_recorded(tmp_path):
    recorded = _counts(RECORDED)
    json_path, _ = bench_device_ops.main(rounds=2, out=tmp_path, torch=False)
    now = _counts(json_path)
    assert set(now) == set(recorded) == set(bench_device_ops.TITLES.values())
    record = json.loads(json_path.read_text())
    assert any("every step counted the same" in note for note in record["notes"]), record["notes"]
    more = [f"{workload}: {kind} {now[workload][kind]} per step, {recorded[workload][kind]} recorded"
            for workload in now for kind in bench_device_ops.KINDS if now[workload][kind] > recorded[workload][kind]]
    assert not more, "more device work per step than recorded:\n" + "\n".join(more)
    fewer = [f"{workload}: {kind} {now[workload][kind]}, {recorded[workload][kind]} recorded"
             for workload in now for kind in bench_device_ops.KINDS if now[workload][kind] < recorded[workload][kind]]
    assert not fewer, ("less device work per step than recorded: record it "
                       "(python -m benchmarks.bench_device_ops --record):\n" + "\n".join(fewer))
    for workload, counts in now.items():
        assert counts["kernels"] > 0 and counts["allocations"] > 0, (workload, counts)


@pytest.mark.gpu
@pytest.mark.skipif(not strict_gpu.active(), reason="counts kernels on the strict stand-in")
def test_lenet_conv2_and_pool_launch_a_few_kernels_not_one_per_window_offset():
    """On a GPU a launch costs more than LeNet-sized work: conv2 (5×5, its input gradient folded back) and
    2×2 max pooling, forward and backward, launch a fixed few kernels (22), not a few per window offset (93 did)."""
    x = tinyflo.randn(8, 6, 14, 14, device="cuda:0", requires_grad=True)
    layer = Conv2d(6, 16, 5).to("cuda:0")
    with strict_gpu.counting():
        max_pool2d(layer(x), 2).sum().backward()
    assert strict_gpu.counts()["kernels"] <= 24, dict(strict_gpu.LAUNCHES)


def test_an_in_place_update_of_a_slice_counts_one_kernel():
    """``a[i] += b`` adds into the slice, then sets a[i] to that very slice, which CuPy skips: one kernel.
    A gather's ``a[idx] += b`` does write back (a scatter): gather, add, scatter."""
    cp = strict_gpu._build()["cupy"]
    a, b = cp.ones((3, 2), cp.float32), cp.ones((3, 2), cp.float32)
    with strict_gpu.counting():
        a[1:] += b[1:]
    assert strict_gpu.counts()["kernels"] == 1, dict(strict_gpu.LAUNCHES)
    rows = cp.arange(2)
    with strict_gpu.counting():
        a[rows] += b[:2]
    assert dict(strict_gpu.LAUNCHES) == {"getitem": 1, "add": 1, "setitem": 1}
    assert a.get()[:, 0].tolist() == [2, 3, 2]
