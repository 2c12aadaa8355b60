"""Milestone 6 (a character-level GPT on Tiny Shakespeare): its attention, its quick run, its recorded run."""

import math
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

import numpy as np
import pytest
from test_milestones import ROOT, recorded_run, run_quick

import tinyflo
from tinyflo import milestones, nn
from tinyflo.nn import functional as F

NOTEBOOK = milestones.MILESTONES["transformer"].path(ROOT)
SHAKESPEARE = milestones.find_data("tinyshakespeare", "input.txt")
RESULTS = ROOT / "milestones" / "results" / "transformer"


def notebook_model() -> dict:
    """The notebook's model cell (GPTConfig, CausalSelfAttention, Block, GPT) run on its own."""
    cells = NOTEBOOK.read_text().split("\n# %%")
    (cell,) = [c for c in cells if "class CausalSelfAttention(" in c]
    namespace = {"math": math, "np": np, "tinyflo": tinyflo, "nn": nn, "F": F, "dataclass": dataclass}
    exec(compile(cell, str(NOTEBOOK), "exec"), namespace)
    return namespace


@pytest.fixture(scope="module")
def model_code() -> dict:
    return notebook_model()


def tiny_config(model_code, **changes):
    settings = dict(block_size=5, n_layer=2, n_head=2, n_embd=8)
    return model_code["GPTConfig"](**{**settings, **changes})


def test_attention_block_gradients_match_central_differences(model_code):
    tinyflo.manual_seed(0)
    config = tiny_config(model_code)
    block = model_code["Block"](config).to(tinyflo.float64)
    x = tinyflo.randn(2 * 4, config.n_embd, dtype=tinyflo.float64, requires_grad=True)
    params = [p for p in block.parameters() if p.requires_grad]
    assert len(params) == 6  # two LayerNorm gains and four matrices: no biases, as in nanoGPT
    assert tinyflo.gradcheck(lambda x, *weights: block(x, 4), x, *params)


def test_gpt_gradients_match_central_differences_through_the_tied_head(model_code):
    tinyflo.manual_seed(1)
    config = tiny_config(model_code, n_layer=1)
    model = model_code["GPT"](config, vocab_size=7).to(tinyflo.float64)
    idx = tinyflo.tensor([[0, 3, 6, 2, 2], [5, 1, 4, 0, 3]])
    weights = [model.wte.weight, model.wpe.weight, model.h[0].attn.c_attn.weight]
    assert tinyflo.gradcheck(lambda *w: model(idx), *weights)


def test_attention_is_causal_and_its_weights_are_distributions(model_code):
    tinyflo.manual_seed(2)
    config = tiny_config(model_code)
    model = model_code["GPT"](config, vocab_size=7)
    idx = np.array([[0, 3, 6, 2, 2], [5, 1, 4, 0, 3]])
    changed = idx.copy()
    changed[:, 3:] = (changed[:, 3:] + 1) % 7
    with tinyflo.no_grad():
        before, after = model(tinyflo.tensor(idx)).numpy(), model(tinyflo.tensor(changed)).numpy()
        weights = model.attention(tinyflo.tensor(idx), layer=1).numpy()
    assert before.shape == (2, 5, 7) and before.dtype == np.float32
    np.testing.assert_array_equal(before[:, :3], after[:, :3])  # the future never reaches the past
    assert np.abs(before[:, 3:] - after[:, 3:]).max() > 1e-4
    assert weights.shape == (2, config.n_head, 5, 5)
    np.testing.assert_allclose(weights.sum(axis=-1), 1.0, rtol=1e-5)
    assert np.all(np.triu(weights, k=1) == 0)


def test_gpt_refuses_a_context_longer_than_its_block(model_code):
    model = model_code["GPT"](tiny_config(model_code), vocab_size=7)
    with pytest.raises(ValueError, match="got 6 positions; the context holds at most 5"):
        model(tinyflo.tensor(np.zeros((1, 6), dtype=np.int64)))


def test_transformer_without_the_data_fails_in_one_line_that_says_how_to_get_it(tmp_path):
    checkout = tmp_path / "checkout"
    (checkout / "milestones" / "06_transformer").mkdir(parents=True)
    shutil.copy(ROOT / "pyproject.toml", checkout)
    shutil.copy(NOTEBOOK, checkout / "milestones" / "06_transformer")
    env = {k: v for k, v in os.environ.items() if not k.startswith("TINYFLO_")}
    env["TINYFLO_DATA"] = str(tmp_path / "no-data")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, "-m", "tinyflo.cli", "milestone", "run", "transformer", "--quick",
                           "--device", "cpu", "--out", str(out)], cwd=checkout, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 1, done.stdout + done.stderr
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("milestone 06_transformer could not run: Tiny Shakespeare: tinyshakespeare (all of its files) not found in "
                           f"{tmp_path / 'no-data' / 'tinyshakespeare'}, ")
    assert line.endswith("; get it with: tinyflo download tinyshakespeare")
    assert "skipped" not in done.stdout and "not found" not in done.stdout, "said once, as the run's error"
    assert not (out / "result.json").exists(), "a run that did nothing must not leave a result"


@pytest.mark.slow
def test_transformer_quick_run_learns_far_beyond_the_unigram_model(tmp_path):
    if SHAKESPEARE is None:
        pytest.skip("no Tiny Shakespeare here (tinyflo download tinyshakespeare, or set TINYFLO_DATA)")
    result = run_quick("transformer", tmp_path)
    numbers = result["numbers"]
    assert numbers["vocab_size"] == 65 and numbers["characters"] == 1_115_394
    assert numbers["uniform_loss"] == pytest.approx(math.log(65))
    assert 3.2 < numbers["unigram_entropy"] < 3.4 and 3.2 < numbers["unigram_val_loss"] < 3.45
    assert numbers["val_loss"] <= numbers["unigram_val_loss"] - 0.8
    assert numbers["val_loss_precise"] <= numbers["unigram_val_loss"] - 0.8
    assert [e["iter"] for e in numbers["evaluations"]] == [0, 200, 400, 600]
    assert numbers["evaluations"][0]["val"] == pytest.approx(math.log(65), abs=0.15)  # untrained: uniform
    assert len(numbers["sample"]) == 200
    assert set(result["plots"]) == {"transformer_loss.png", "transformer_attention.png"}
    assert len(result["figures"]) == 1 and result["figures"][0]["passed"]


def test_transformer_recorded_full_run_matches_nanogpt():
    result = recorded_run("transformer")
    assert len(result["figures"]) == 2
    numbers = result["numbers"]
    config = numbers["config"]
    nanogpt = dict(block_size=64, batch_size=12, n_layer=4, n_head=4, n_embd=128, dropout=0.0,
                   max_iters=2000, lr_decay_iters=2000, eval_iters=20, learning_rate=1e-3, min_lr=1e-4,
                   warmup_iters=100, weight_decay=0.1, grad_clip=1.0)
    assert {key: config[key] for key in nanogpt} == nanogpt and list(config["betas"]) == [0.9, 0.99]
    assert numbers["val_loss"] <= 1.88 + 0.07
    assert 0.79e6 < numbers["parameters"] < 0.81e6  # nanoGPT: "number of parameters: 0.80M"
    for plot in result["plots"]:
        assert (RESULTS / plot).stat().st_size > 1000
