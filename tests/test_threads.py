"""tinyflo's threads for the CPU passes: the count people set, the blocks they share, and results that
do not depend on either (the same bits for 1, 2 or 3 threads)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
import test_attention  # the parity tests, run again below with the work cut in many blocks
import test_conv_torch_parity

import tinyflo
from tinyflo import Tensor, nn
from tinyflo.core import conv, layers, tensor
from tinyflo.core.autograd import gradcheck
from tinyflo.core.tensor import parallel

THREAD_COUNTS = (1, 2, 3)


@pytest.fixture(autouse=True)
def restore_thread_count():
    before = tensor._THREADS.count
    yield
    tensor._THREADS.count = before


@pytest.fixture
def small_blocks(monkeypatch):
    """Blocks of a few numbers, so test-sized inputs are cut into many blocks."""
    monkeypatch.setattr(tensor, "PASS_BLOCK", 24)  # per_block reads it
    monkeypatch.setattr(layers, "GELU_BLOCK", 24)
    monkeypatch.setattr(conv, "BATCH_LAST_POSITIONS", 20)  # small images, both layouts


@pytest.fixture
def shared_blocks(small_blocks, monkeypatch):
    """Small blocks that take a moment each, so every thread gets some: the names of the threads that ran one."""
    names = set()

    def slow_parallel(fn, size, block, xp=np):
        def timed(start, stop):
            names.add(threading.current_thread().name)
            time.sleep(0.002)
            fn(start, stop)

        parallel(timed, size, block, xp)

    for module in (layers, conv):
        monkeypatch.setattr(module, "parallel", slow_parallel)
    return names


def _run_with_threads(fn, counts=THREAD_COUNTS):
    """fn()'s arrays for each thread count."""
    results = []
    for n in counts:
        tinyflo.set_num_threads(n)
        results.append([np.array(a) for a in fn()])
    return results


def _assert_same_bits(results):
    first, *others = results
    for other in others:
        for a, b in zip(first, other, strict=True):
            assert a.dtype == b.dtype and a.shape == b.shape
            assert a.tobytes() == b.tobytes(), "a result changed with the thread count"


# ---- the count ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, None, "2"])
def test_set_num_threads_refuses_anything_but_a_positive_int(bad):
    with pytest.raises(ValueError, match=r"set_num_threads: n must be a positive whole number of threads; got"):
        tinyflo.set_num_threads(bad)


def test_set_num_threads_is_what_get_num_threads_says():
    tinyflo.set_num_threads(3)
    assert tinyflo.get_num_threads() == 3
    tinyflo.set_num_threads(np.int64(1))
    assert tinyflo.get_num_threads() == 1


def _count_in_a_fresh_process(env_value: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "TINYFLO_NUM_THREADS"}
    if env_value is not None:
        env["TINYFLO_NUM_THREADS"] = env_value
    code = "import tinyflo; print(tinyflo.get_num_threads())"
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60)


def test_the_default_count_is_the_cores_this_process_may_use():
    done = _count_in_a_fresh_process(None)
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == len(os.sched_getaffinity(0))


def test_tinyflo_num_threads_sets_the_count():
    done = _count_in_a_fresh_process(" 3 ")
    assert done.returncode == 0, done.stderr
    assert int(done.stdout) == 3


@pytest.mark.parametrize("value", ["0", "two", "-2", "1.5", "²"])
def test_a_bad_tinyflo_num_threads_is_one_clear_line(value, monkeypatch):
    monkeypatch.setenv("TINYFLO_NUM_THREADS", value)
    tensor._THREADS.count = None  # as in a fresh process: the count comes from the environment
    with pytest.raises(ValueError) as error:
        tinyflo.get_num_threads()
    assert str(error.value) == f"TINYFLO_NUM_THREADS must be a positive whole number of threads; got {value!r}"


def test_an_empty_tinyflo_num_threads_means_the_default(monkeypatch):
    monkeypatch.setenv("TINYFLO_NUM_THREADS", " ")
    tensor._THREADS.count = None
    assert tinyflo.get_num_threads() == len(os.sched_getaffinity(0))


def test_a_bad_tinyflo_num_threads_stops_the_first_pass_in_a_fresh_process():
    done = _count_in_a_fresh_process("zero")
    assert done.returncode != 0
    assert done.stderr.strip().splitlines()[-1] == (
        "tinyflo.environment.VariableError: TINYFLO_NUM_THREADS must be a positive whole number of threads; got 'zero'")


# ---- parallel(): the blocks ---------------------------------------------------------------------------


@pytest.mark.parametrize("size, block", [(0, 4), (1, 4), (10, 3), (12, 4), (100, 1), (5, 100)])
def test_parallel_calls_each_block_once_with_the_same_cut_for_any_count(size, block):
    for n in (1, 2, 3, 8):
        tinyflo.set_num_threads(n)
        calls = []
        lock = threading.Lock()

        def fn(start, stop, calls=calls, lock=lock):
            with lock:
                calls.append((start, stop))

        parallel(fn, size, block)
        assert sorted(calls) == [(s, min(s + block, size)) for s in range(0, size, block)]


def test_parallel_shares_the_blocks_among_the_threads():
    tinyflo.set_num_threads(2)
    names, both = set(), threading.Event()

    def fn(start, stop):
        names.add(threading.current_thread().name)
        if len(names) == 2:
            both.set()
        both.wait(timeout=30)  # every block waits until a second thread has taken one

    parallel(fn, 4, 1)
    assert names == {threading.current_thread().name, "tinyflo-pass-1"}


def test_one_thread_runs_everything_in_the_caller():
    tinyflo.set_num_threads(1)
    names = set()
    parallel(lambda start, stop: names.add(threading.current_thread().name), 10, 1)
    assert names == {threading.current_thread().name}


@pytest.mark.parametrize("failing_block", [0, 3])
def test_an_error_in_a_block_reaches_the_caller_and_the_threads_go_on(failing_block):
    tinyflo.set_num_threads(2)
    done = []

    def fn(start, stop):
        if start == failing_block:
            raise ZeroDivisionError(f"block {start}")
        time.sleep(0.005)
        done.append(start)

    with pytest.raises(ZeroDivisionError, match=f"block {failing_block}"):
        parallel(fn, 4, 1)
    assert failing_block not in done
    out = np.zeros(8)
    parallel(lambda start, stop: out.__setitem__(slice(start, stop), 1), 8, 2)  # the pool still works
    assert out.sum() == 8


def test_a_block_that_calls_parallel_runs_it_itself():
    tinyflo.set_num_threads(2)
    out = np.zeros((4, 6))

    def row(start, stop):
        for i in range(start, stop):
            parallel(lambda a, b, i=i: out.__setitem__((i, slice(a, b)), i + 1), 6, 2)

    parallel(row, 4, 1)
    assert np.array_equal(out, np.repeat(np.arange(1, 5.0)[:, None], 6, axis=1))


def test_two_callers_at_once_both_finish_right():
    tinyflo.set_num_threads(2)
    outs = [np.zeros(64), np.zeros(64)]

    def fill(k):
        for _ in range(50):
            parallel(lambda a, b: outs[k].__setitem__(slice(a, b), outs[k][a:b] + 1), 64, 8)

    threads = [threading.Thread(target=fill, args=(k,)) for k in (0, 1)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert all(np.array_equal(o, np.full(64, 50.0)) for o in outs)


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs os.fork")
def test_a_forked_child_has_working_threads():
    tinyflo.set_num_threads(2)
    parallel(lambda a, b: None, 4, 1)  # the parent's worker exists before the fork
    pid = os.fork()
    if pid == 0:  # the child: its parent's worker thread is not here
        try:
            out = np.zeros(16)
            parallel(lambda a, b: out.__setitem__(slice(a, b), 1), 16, 2)
            os._exit(0 if out.sum() == 16 else 1)
        except BaseException:
            os._exit(2)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0


# ---- the nodes that use them: the same bits for any count, gradients right ------------------------------

rng = np.random.default_rng(0)


def _grads(fn, *arrays):
    """fn's output and the gradient of sum(output · a fixed random array) for each input."""
    inputs = [Tensor(a, requires_grad=True) for a in arrays]
    out = fn(*inputs)
    weights = np.random.default_rng(1).standard_normal(out.shape).astype(out.dtype)
    (out * Tensor(weights)).sum().backward()
    return [out.numpy(), *(t.grad.numpy() for t in inputs)]


def _layer_norm_cases():
    x = rng.standard_normal((7, 5, 6)).astype(np.float32)
    w, b = (rng.standard_normal(6).astype(np.float32) for _ in range(2))
    return {
        "weight and bias": (lambda x, w, b: nn.functional.layer_norm(x, 6, w, b), (x, w, b)),
        "weight only": (lambda x, w: nn.functional.layer_norm(x, 6, w), (x, w)),
        "no affine": (lambda x: nn.functional.layer_norm(x, 6), (x,)),
        "two axes": (lambda x, w: nn.functional.layer_norm(x, (5, 6), w.reshape(5, 6)),
                     (x, rng.standard_normal(30).astype(np.float32))),
    }


def _conv_cases():
    x1, w1 = rng.standard_normal((5, 2, 10, 9)).astype(np.float32), rng.standard_normal((4, 2, 3, 3)).astype(np.float32)
    x2, w2 = rng.standard_normal((6, 4, 5, 4)).astype(np.float32), rng.standard_normal((6, 2, 3, 2)).astype(np.float32)
    b = rng.standard_normal(6).astype(np.float32)
    return {
        "per image, padded": (lambda x, w, b: conv.conv2d(x, w, b, padding=1), (x1, w1, b[:4])),
        "per image, strided": (lambda x, w: conv.conv2d(x, w, stride=(1, 2), dilation=(1, 2)), (x1, w1)),
        "batch last, groups": (lambda x, w, b: conv.conv2d(x, w, b, padding=(1, 0), groups=2), (x2, w2, b)),
        "batch last": (lambda x, w: conv.conv2d(x, w, stride=(2, 1)), (x2, w2[:, :1].repeat(4, axis=1))),
    }


def _pool_cases():
    x = rng.standard_normal((9, 3, 10, 9)).astype(np.float32)
    return {
        "max 2x2": (lambda x: conv.max_pool2d(x, 2), (x,)),
        "max 2x2 even": (lambda x: conv.max_pool2d(x, 2), (x[..., :8],)),
    }


def _gelu_case():
    return {"gelu tanh": (lambda x: nn.functional.gelu(x, approximate="tanh"),
                          (rng.standard_normal((13, 11)).astype(np.float32),))}


def _attention_cases():
    q, k, v = (rng.standard_normal((3, 4, 6, 5)).astype(np.float32) for _ in range(3))
    mask = rng.standard_normal((6, 6)).astype(np.float32)
    sdpa = nn.functional.scaled_dot_product_attention
    return {
        "attention causal": (lambda q, k, v: sdpa(q, k, v, is_causal=True), (q, k, v)),
        "attention float mask": (lambda q, k, v: sdpa(q, k, v, attn_mask=mask.astype(q.dtype)), (q, k, v)),
        "attention dropout": (lambda q, k, v: _seeded(lambda: sdpa(q, k, v, dropout_p=0.25)), (q, k, v)),
        "attention broadcast keys (not threaded)": (lambda q, k, v: sdpa(q, k, v), (q, k[:1], v[:1])),
    }


def _seeded(fn):
    tinyflo.manual_seed(0)  # the same dropout mask in every call
    return fn()


GENERAL_PATH = {"attention broadcast keys (not threaded)"}  # runs in one piece: nothing to share


def _written_out_attention(q, k, v):
    scores = q @ k.transpose(-2, -1) * (1 / np.sqrt(q.shape[-1]))
    causal = Tensor(np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool)))
    return nn.functional.softmax(tinyflo.where(causal, scores, float("-inf")), axis=-1) @ v


NODE_CASES = _layer_norm_cases() | _conv_cases() | _pool_cases() | _gelu_case() | _attention_cases()


def test_the_convolution_cases_take_both_layouts(small_blocks):
    for name in _conv_cases():
        fn, arrays = NODE_CASES[name]
        node = fn(*(Tensor(a, requires_grad=True) for a in arrays))._ctx
        assert node.batch_last == name.startswith("batch last"), name


@pytest.mark.parametrize("name", sorted(set(NODE_CASES) - GENERAL_PATH))
def test_each_threaded_node_gives_the_same_bits_for_any_thread_count(name, shared_blocks):
    fn, arrays = NODE_CASES[name]
    _assert_same_bits(_run_with_threads(lambda: _grads(fn, *arrays)))
    assert {"tinyflo-pass-1", "tinyflo-pass-2"} <= shared_blocks, "the blocks ran on every thread"


REFERENCE_FORMS = {  # the readable form each fast one must equal
    "per image, padded": lambda x, w, b: conv.Conv2dUnfoldFn.apply(x, w, b, stride=(1, 1), padding=(1, 1),
                                                                   dilation=(1, 1), groups=1),
    "batch last, groups": lambda x, w, b: conv.Conv2dUnfoldFn.apply(x, w, b, stride=(1, 1), padding=(1, 0),
                                                                    dilation=(1, 1), groups=2),
    "max 2x2": lambda x: conv.MaxPool2dWindowsFn.apply(x, kernel=(2, 2), stride=(2, 2), padding=(0, 0),
                                                       dilation=(1, 1)),
    "attention causal": _written_out_attention,
    "weight and bias": lambda x, w, b: layers._composed_layer_norm_forward(
        type("LN", (), {"normalized_shape": (6,), "eps": 1e-5, "weight": w, "bias": b})(), x),
}


@pytest.mark.parametrize("name", sorted(REFERENCE_FORMS))
def test_each_threaded_node_equals_its_readable_form(name, small_blocks):
    tinyflo.set_num_threads(3)
    fn, arrays = NODE_CASES[name]
    for fast, slow in zip(_grads(fn, *arrays), _grads(REFERENCE_FORMS[name], *arrays), strict=True):
        np.testing.assert_allclose(fast, slow, rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("name", sorted(NODE_CASES))
def test_each_threaded_node_passes_gradcheck_across_blocks(name, small_blocks):
    tinyflo.set_num_threads(2)
    fn, arrays = NODE_CASES[name]
    if name.startswith("max"):  # keep every window's maximum clear of its runner-up
        arrays = (np.random.default_rng(3).permutation(arrays[0].size).reshape(arrays[0].shape) * 0.1,)
    inputs = [Tensor(a.astype(np.float64), requires_grad=True) for a in arrays]
    assert gradcheck(fn, *inputs)


def test_layer_norm_without_bias_matches_the_composed_form():
    x, w = rng.standard_normal((40, 6)), rng.standard_normal(6)
    fused = _grads(lambda x, w: nn.functional.layer_norm(x, 6, w), x, w)
    composed = _grads(lambda x, w: nn.functional.layer_norm(x, 6) * w, x, w)
    for a, b in zip(fused, composed, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-10, atol=1e-12)


# ---- whole training runs ------------------------------------------------------------------------------


def _lenet_steps():
    tinyflo.manual_seed(0)
    model = tinyflo.models.LeNet5()
    opt = tinyflo.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    data = np.random.default_rng(0)
    for _ in range(3):
        x = Tensor(data.standard_normal((64, 1, 28, 28)).astype(np.float32))
        y = Tensor(data.integers(0, 10, 64))
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
    return [loss.numpy(), *(p.numpy() for p in model.parameters())]


def test_lenet_trains_to_the_same_bits_on_one_two_and_three_threads():
    _assert_same_bits(_run_with_threads(_lenet_steps))


def test_a_transformer_block_trains_to_the_same_bits_on_one_two_and_three_threads(small_blocks):
    def steps():
        tinyflo.manual_seed(0)
        frozen_bias = nn.LayerNorm(16)
        frozen_bias.bias.freeze()  # as milestone 6's norms: no bias gradient
        block = nn.Sequential(nn.LayerNorm(16), nn.Linear(16, 64), nn.GELU(approximate="tanh"), nn.Linear(64, 16),
                              frozen_bias)
        opt = tinyflo.optim.AdamW(block.parameters(), lr=1e-2)
        x = Tensor(np.random.default_rng(0).standard_normal((12, 8, 16)).astype(np.float32))
        for _ in range(3):
            opt.zero_grad()
            loss = (block(x) ** 2).mean()
            loss.backward()
            opt.step()
        return [loss.numpy(), *(p.numpy() for p in block.parameters())]

    _assert_same_bits(_run_with_threads(steps))


def test_doctor_shows_the_thread_count_and_where_it_came_from(monkeypatch):
    from tinyflo.cli import _threads

    env = {k: v for k, v in os.environ.items() if k != "TINYFLO_NUM_THREADS"} | {"TINYFLO_NUM_THREADS": "3"}
    done = subprocess.run([sys.executable, "-m", "tinyflo.cli", "doctor"], env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 0, done.stderr
    row = next(line.split(None, 1)[1] for line in done.stdout.splitlines() if line.startswith("threads "))
    assert row.startswith("3 for tinyflo's passes over memory (TINYFLO_NUM_THREADS; ")
    monkeypatch.delenv("TINYFLO_NUM_THREADS", raising=False)
    tensor._THREADS.count = None
    cores = len(os.sched_getaffinity(0))
    assert _threads().startswith(f"{cores} for tinyflo's passes over memory (the cores this process may use; "
                                 f"{cores} usable)")
    monkeypatch.setenv("TINYFLO_NUM_THREADS", "many")
    tensor._THREADS.count = None
    assert _threads() == ("TINYFLO_NUM_THREADS must be a positive whole number of threads; got 'many': "
                          "unset it or give a count")


# ---- PyTorch's values (stored fixtures) with the work cut in many blocks, on three threads ---------------

PARITY = (
    [(test_conv_torch_parity.test_conv_conv2d_matches_pytorch, case) for case in test_conv_torch_parity.CONV_CASES]
    + [(test_conv_torch_parity.test_conv_pools_match_pytorch, case) for case in test_conv_torch_parity.POOL_CASES]
    + [(test_attention.test_layers_softmax_attention_matches_pytorch, case) for case in test_attention.SDPA_CASES]
    + [(test_attention.test_layers_layer_norm_fused_matches_pytorch, case) for case in test_attention.LAYER_NORM_CASES]
)


@pytest.mark.parametrize("check, case", PARITY, ids=[f"{check.__name__}-{case}" for check, case in PARITY])
def test_the_threaded_nodes_match_pytorch_in_many_blocks(check, case, shared_blocks):
    tinyflo.set_num_threads(3)
    check(case, "cpu")


# ---- on a GPU each pass is one piece: the block sizes the CPU uses must not leak into it ----------------


@pytest.mark.gpu
def test_layer_norm_on_a_gpu_with_more_rows_than_a_cpu_block(small_blocks):
    x, w, b = rng.standard_normal((40, 6)), rng.standard_normal(6), rng.standard_normal(6)

    def run(device):
        leaves = [Tensor(a, device=device, requires_grad=True) for a in (x, w, b)]
        out = nn.functional.layer_norm(leaves[0], 6, leaves[1], leaves[2])
        (out * out).sum().backward()
        return [out.cpu().numpy(), *(t.grad.cpu().numpy() for t in leaves)]

    for gpu, cpu in zip(run("cuda:0"), run("cpu"), strict=True):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-10, atol=1e-10)


@pytest.mark.gpu
def test_attention_on_a_gpu_broadcasts_queries_and_keys_against_values():
    q, k = rng.standard_normal((1, 2, 4, 3)), rng.standard_normal((1, 2, 5, 3))
    v = rng.standard_normal((3, 2, 5, 3))

    def run(device):
        leaves = [Tensor(a, device=device, requires_grad=True) for a in (q, k, v)]
        out = nn.functional.scaled_dot_product_attention(*leaves)
        (out * out).sum().backward()
        return [out.cpu().numpy(), *(t.grad.cpu().numpy() for t in leaves)]

    for gpu, cpu in zip(run("cuda:0"), run("cpu"), strict=True):
        np.testing.assert_allclose(gpu, cpu, rtol=1e-10, atol=1e-10)


# ---- the benchmark of the threads, and the benchmarks' one knob ------------------------------------------

ROOT = Path(__file__).resolve().parents[1]


def _bench_threads(out: Path, threads: str) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if not k.endswith("_NUM_THREADS")} | {"TINYFLO_NUM_THREADS": threads}
    return subprocess.run([sys.executable, "-m", "benchmarks.bench_threads", "--rounds", "2", "--out", str(out)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)


def test_bench_threads_checks_the_bits_and_records_every_library_on_the_count_asked(tmp_path):
    done = _bench_threads(tmp_path, "2")
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads((tmp_path / "threads.json").read_text())
    assert record["machine"]["threads"]["tinyflo"] == 2 and record["machine"]["threads"]["OMP_NUM_THREADS"] == "2"
    assert [t["title"].split(",")[0] for t in record["tables"]] == [
        "GELU", "layer norm with weight and bias", "LeNet-5's conv1", "LeNet-5's conv2", "2×2 max pooling of (128"]
    assert all(row[0] in ("tinyflo, 1 thread", "tinyflo, 2 threads") or row[0].startswith("numexpr")
               for t in record["tables"] for row in t["rows"])
    done = _bench_threads(tmp_path, "1")
    assert done.returncode == 0, done.stderr[-2000:]
    assert (tmp_path / "threads_1thread.md").is_file(), "fewer threads than cores: a result of its own"
    assert json.loads((tmp_path / "threads_1thread.json").read_text())["machine"]["threads"]["OPENBLAS_NUM_THREADS"] == "1"


def test_the_benchmarks_refuse_a_bad_thread_count_in_one_line(tmp_path):
    done = _bench_threads(tmp_path, "lots")
    assert done.returncode != 0 and not list(tmp_path.iterdir())
    assert done.stderr.strip() == "benchmarks: TINYFLO_NUM_THREADS must be a positive whole number of threads; got 'lots'"
