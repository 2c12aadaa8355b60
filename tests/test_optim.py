"""Module 06: optimizers replay torch.optim trajectories; groups, skipping, state_dict, flat buffers."""

from __future__ import annotations

import inspect
import json
from pathlib import Path

import numpy as np
import pytest

from tinyflo import Tensor, strict_gpu
from tinyflo.core import optim
from tinyflo.core.layers import Linear, Parameter, Sequential

FIXTURES = Path(__file__).parent / "fixtures" / "optim"
META = json.loads((FIXTURES / "configs.json").read_text())
TRAJECTORIES = np.load(FIXTURES / "trajectories.npz")
CASES = META["cases"]
OPTIMIZERS = {name: cls for name, cls in vars(optim).items()
              if inspect.isclass(cls) and issubclass(cls, optim.Optimizer) and cls is not optim.Optimizer}
PATHS = ["loop", "flat"]


def gradient(theta: np.ndarray, i: int, t: int) -> np.ndarray:
    """The fixed gradient the fixtures were recorded with (scripts/make_optim_fixtures.py)."""
    return np.cos(2 * theta + i) + 0.05 * (t + 1) * theta


def initial(dtype=np.float64) -> list[Parameter]:
    return [Parameter(TRAJECTORIES[f"initial_{i}"].astype(dtype)) for i in range(len(META["shapes"]))]


def build(case: str, params: list[Parameter], flat: bool) -> optim.Optimizer:
    spec = CASES[case]
    kwargs = {k: tuple(v) if isinstance(v, list) else v for k, v in spec["kwargs"].items()}
    groups = params if spec["groups"] is None else [
        {**{k: v for k, v in g.items() if k != "params"}, "params": [params[i] for i in g["params"]]}
        for g in spec["groups"]]
    return OPTIMIZERS[spec["optimizer"]](groups, flat=flat, **kwargs)


def feed(params: list[Parameter], t: int) -> None:
    for i, p in enumerate(params):
        p.grad = Tensor(gradient(p.data, i, t))


def replay(case: str, path: str) -> None:
    params = initial()
    opt = build(case, params, flat=path == "flat")
    expected = TRAJECTORIES[case]
    for t in range(META["steps"]):
        feed(params, t)
        opt.step()
        got = np.concatenate([p.data.ravel() for p in params])
        np.testing.assert_allclose(got, expected[t], atol=1e-6, rtol=0, err_msg=f"{case} ({path}) step {t + 1}")


def cases_of(*names: str) -> list[str]:
    return [case for case, spec in CASES.items() if spec["optimizer"] in names]


# ----- parity with torch.optim, one test per graded optimizer -------------------------------------


@pytest.mark.task("optim_sgd")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", cases_of("SGD"))
def test_optim_sgd_matches_torch(case, path):
    replay(case, path)


@pytest.mark.task("optim_adam")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", cases_of("Adam", "AdamW"))
def test_optim_adam_matches_torch(case, path):
    replay(case, path)


@pytest.mark.task("optim_rmsprop")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", cases_of("RMSprop"))
def test_optim_rmsprop_matches_torch(case, path):
    replay(case, path)


@pytest.mark.task("optim_adagrad")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", cases_of("Adagrad"))
def test_optim_adagrad_matches_torch(case, path):
    replay(case, path)


@pytest.mark.task("optim_radam")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", cases_of("RAdam"))
def test_optim_radam_matches_torch(case, path):
    replay(case, path)


@pytest.mark.task("optim_nadam")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", cases_of("NAdam"))
def test_optim_nadam_matches_torch(case, path):
    replay(case, path)


def test_every_optimizer_has_at_least_two_fixture_cases():
    for name in OPTIMIZERS:
        assert len(cases_of(name)) >= 2, f"{name} needs two recorded configurations in make_optim_fixtures.py"


# ----- defaults, dtypes, errors ---------------------------------------------------------------------

TORCH_DEFAULTS = {
    "SGD": dict(lr=1e-3, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False),
    "Adam": dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, amsgrad=False),
    "AdamW": dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2, amsgrad=False),
    "RMSprop": dict(lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0, centered=False),
    "Adagrad": dict(lr=1e-2, lr_decay=0.0, weight_decay=0.0, initial_accumulator_value=0.0, eps=1e-10),
    "RAdam": dict(lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0),
    "NAdam": dict(lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0, momentum_decay=4e-3),
}


@pytest.mark.task("optim_optimizer")
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optim_optimizer_defaults_are_pytorchs(name):
    group = OPTIMIZERS[name]([Parameter([1.0])]).param_groups[0]
    assert {k: group[k] for k in TORCH_DEFAULTS[name]} == TORCH_DEFAULTS[name]


@pytest.mark.task("optim_optimizer")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optim_optimizer_float32_stays_float32(name, path):
    params = initial(np.float32)
    kwargs = {"momentum": 0.9} if name in ("SGD", "RMSprop") else {}
    opt = OPTIMIZERS[name](params, flat=path == "flat", **kwargs)
    for t in range(3):
        for i, p in enumerate(params):
            p.grad = Tensor(gradient(p.data, i, t).astype(np.float32))
        opt.step()
    assert all(p.data.dtype == np.float32 for p in params)
    for p in params:
        for key, value in opt.state[p].items():
            assert not hasattr(value, "dtype") or value.dtype == np.float32, f"{name} state {key} drifted"


BAD = [
    ("SGD", {"lr": -0.1}, "lr"),
    ("SGD", {"momentum": -0.5}, "momentum"),
    ("SGD", {"nesterov": True}, "nesterov"),
    ("SGD", {"nesterov": True, "momentum": 0.9, "dampening": 0.1}, "dampening"),
    ("Adam", {"betas": (1.0, 0.999)}, "betas[0]"),
    ("Adam", {"betas": (0.9, -0.01)}, "betas[1]"),
    ("AdamW", {"eps": -1e-8}, "eps"),
    ("AdamW", {"weight_decay": -1.0}, "weight_decay"),
    ("RMSprop", {"alpha": -0.1}, "alpha"),
    ("Adagrad", {"lr_decay": -1.0}, "lr_decay"),
    ("Adagrad", {"initial_accumulator_value": -1.0}, "initial_accumulator_value"),
    ("RAdam", {"lr": -1.0}, "lr"),
    ("NAdam", {"momentum_decay": -1.0}, "momentum_decay"),
]


@pytest.mark.task("optim_optimizer")
@pytest.mark.parametrize(("name", "kwargs", "word"), BAD)
def test_optim_optimizer_bad_hyper_parameters_are_named(name, kwargs, word):
    with pytest.raises(ValueError, match=word.replace("[", r"\[").replace("]", r"\]")):
        OPTIMIZERS[name]([Parameter([1.0])], **kwargs)


@pytest.mark.task("optim_optimizer")
def test_optim_optimizer_refuses_empty_duplicate_and_unknown():
    p = Parameter([1.0])
    with pytest.raises(ValueError, match="empty"):
        optim.SGD([])
    with pytest.raises(ValueError, match="no parameters"):
        optim.SGD([{"params": []}])
    with pytest.raises(ValueError, match="twice"):
        optim.SGD([p, p])
    with pytest.raises(ValueError, match="twice"):
        optim.Adam([{"params": [p]}, {"params": [p]}])
    with pytest.raises(TypeError, match="iterable"):
        optim.SGD(p)
    with pytest.raises(TypeError, match="momentun"):
        optim.SGD([{"params": [p], "momentun": 0.9}])
    with pytest.raises(ValueError, match="lr"):
        optim.SGD([p]).set_lr(-1.0)


TYPES = [
    ("SGD", {"lr": "0.1"}, "SGD got lr='0.1'; expected a number >= 0"),
    ("SGD", {"lr": None}, "SGD got lr=None; expected a number >= 0"),
    ("SGD", {"lr": float("nan")}, "SGD got lr=nan; expected a number >= 0"),
    ("SGD", {"momentum": "0.9"}, "SGD got momentum='0.9'; expected a number >= 0"),
    ("SGD", {"dampening": "0"}, "SGD got dampening='0'; expected a number"),
    ("SGD", {"weight_decay": [0.1]}, "SGD got weight_decay=[0.1]; expected a number >= 0"),
    ("SGD", {"nesterov": "yes"}, "SGD got nesterov='yes'; expected True or False"),
    ("SGD", {"flat": 1}, "SGD got flat=1; expected True or False"),
    ("Adam", {"betas": 0.9}, "Adam got betas=0.9; expected a pair (beta1, beta2)"),
    ("Adam", {"betas": (0.9,)}, "Adam got betas=(0.9,); expected a pair (beta1, beta2)"),
    ("Adam", {"betas": ("0.9", 0.999)}, "Adam got betas[0]='0.9'; expected a number in [0, 1)"),
    ("Adam", {"eps": "1e-8"}, "Adam got eps='1e-8'; expected a number >= 0"),
    ("Adam", {"amsgrad": None}, "Adam got amsgrad=None; expected True or False"),
    ("AdamW", {"weight_decay": True}, "AdamW got weight_decay=True; expected a number >= 0"),
    ("RMSprop", {"alpha": "0.99"}, "RMSprop got alpha='0.99'; expected a number >= 0"),
    ("RMSprop", {"centered": "no"}, "RMSprop got centered='no'; expected True or False"),
    ("Adagrad", {"lr_decay": "0"}, "Adagrad got lr_decay='0'; expected a number >= 0"),
    ("Adagrad", {"initial_accumulator_value": None}, "Adagrad got initial_accumulator_value=None; expected a number >= 0"),
    ("RAdam", {"betas": (0.9, 1.0)}, "RAdam got betas[1]=1.0; expected a number in [0, 1)"),
    ("RAdam", {"eps": -1.0}, "RAdam got eps=-1.0; expected a number >= 0"),
    ("NAdam", {"momentum_decay": "4e-3"}, "NAdam got momentum_decay='4e-3'; expected a number >= 0"),
]


@pytest.mark.task("optim_optimizer")
@pytest.mark.parametrize(("name", "kwargs", "message"), TYPES)
def test_optim_optimizer_arguments_of_the_wrong_type_are_named(name, kwargs, message):
    """One line: the optimizer, the argument and what came, then what was expected (not a TypeError from >=)."""
    with pytest.raises(ValueError) as err:
        OPTIMIZERS[name]([Parameter([1.0])], **kwargs)
    assert str(err.value) == message


@pytest.mark.task("optim_optimizer")
def test_optim_optimizer_group_values_are_checked_like_defaults():
    p = Parameter([1.0])
    with pytest.raises(ValueError, match=r"^SGD got lr='0.5'; expected a number >= 0$"):
        optim.SGD([{"params": [p], "lr": "0.5"}])
    with pytest.raises(ValueError, match=r"^Adam got initial_lr=-1.0; expected a number >= 0$"):
        optim.Adam([{"params": [p], "initial_lr": -1.0}])
    with pytest.raises(ValueError, match=r"^SGD got lr='1'; expected a number >= 0$"):
        optim.SGD([p]).set_lr("1")


@pytest.mark.task("optim_optimizer")
def test_optim_optimizer_groups_record_their_initial_lr():
    a, b, c = Parameter([1.0]), Parameter([1.0]), Parameter([1.0])
    opt = optim.AdamW([{"params": [a]}, {"params": [b], "lr": 0.001}], lr=0.1)
    assert [g["initial_lr"] for g in opt.param_groups] == [0.1, 0.001]
    opt.add_param_group({"params": [c], "lr": 0.5})
    assert opt.param_groups[-1]["initial_lr"] == 0.5
    opt.set_lr(0.25)
    assert [g["lr"] for g in opt.param_groups] == [0.25] * 3, "set_lr sets every group"
    assert [g["initial_lr"] for g in opt.param_groups] == [0.1, 0.001, 0.5], "and leaves initial_lr alone"
    kept = optim.SGD([{"params": [Parameter([1.0])], "lr": 0.2, "initial_lr": 0.4}])
    assert kept.param_groups[0]["initial_lr"] == 0.4, "a group that brings its initial_lr keeps it (as PyTorch)"


@pytest.mark.task("optim_load_state_dict")
@pytest.mark.parametrize("path", PATHS)
def test_optim_load_state_dict_restores_initial_lr_once_per_group(path):
    params = initial()
    opt = optim.SGD([{"params": params[:2]}, {"params": params[2:], "lr": 0.001}], lr=0.1, momentum=0.9,
                    flat=path == "flat")
    feed(params, 0)
    opt.step()
    opt.set_lr(0.05)
    saved = _roundtrip_json(opt.state_dict())
    assert [(g["lr"], g["initial_lr"]) for g in saved["param_groups"]] == [(0.05, 0.1), (0.05, 0.001)]
    assert all("initial_lr" not in entry and "lr" not in entry for entry in saved["state"].values()), \
        "the rate is saved once, in its group"
    other = [Parameter(p.data.copy()) for p in params]
    back = optim.SGD([{"params": other[:2]}, {"params": other[2:]}], lr=0.3, momentum=0.9)
    back.load_state_dict(saved)
    assert [(g["lr"], g["initial_lr"]) for g in back.param_groups] == [(0.05, 0.1), (0.05, 0.001)]
    older = {**saved, "param_groups": [{k: v for k, v in g.items() if k != "initial_lr"} for g in saved["param_groups"]]}
    before_initial = optim.SGD([{"params": other[:2]}, {"params": other[2:]}], lr=0.3, momentum=0.9)
    before_initial.load_state_dict(older)  # a state saved before groups had initial_lr
    assert [g["initial_lr"] for g in before_initial.param_groups] == [0.3, 0.3]


@pytest.mark.task("optim_load_state_dict")
def test_optim_validate_state_dict_is_public_and_changes_nothing():
    params = initial()
    opt = optim.Adam(params, lr=0.1)
    feed(params, 0)
    opt.step()
    saved = opt.state_dict()
    fresh = optim.Adam([Parameter(p.data.copy()) for p in params], lr=0.5)
    fresh.validate_state_dict(saved)
    assert fresh.param_groups[0]["lr"] == 0.5 and not fresh.state, "validating changes nothing"
    with pytest.raises(ValueError, match="group 0 has 4 parameters"):
        optim.Adam(params[:3]).validate_state_dict(saved)
    with pytest.raises(ValueError, match="Adam got betas"):
        fresh.validate_state_dict({**saved, "param_groups": [{**saved["param_groups"][0], "betas": 0.9}]})
    assert optim._validate_state_dict  # module 09 still calls the function by this name


@pytest.mark.task("optim_optimizer")
def test_optim_takes_the_array_library_from_the_device():
    """No module sniffing: the rules get ``p.device.xp``, which is NumPy on the CPU."""
    source = inspect.getsource(optim)
    assert "__module__" not in source and "_xp(" not in source
    p = Parameter([1.0, 2.0])
    assert p.device.xp is np
    opt = optim.RMSprop([p], lr=0.1, momentum=0.5, centered=True)
    p.grad = Tensor([1.0, -1.0])
    opt.step()
    assert all(isinstance(v, np.ndarray) for k, v in opt.state[p].items() if k != "step")


# ----- groups, skipping, zero_grad, set_lr ------------------------------------------------------------


@pytest.mark.task("optim_optimizer")
def test_optim_optimizer_groups_have_their_own_hyper_parameters():
    a, b = Parameter([1.0]), Parameter([1.0])
    opt = optim.SGD([{"params": [a]}, {"params": b, "lr": 1.0, "momentum": 0.5}], lr=0.1)
    assert opt.param_groups[0]["lr"] == 0.1 and opt.param_groups[0]["momentum"] == 0.0
    assert opt.param_groups[1]["lr"] == 1.0 and opt.param_groups[1]["params"] == [b]
    a.grad, b.grad = Tensor([1.0]), Tensor([1.0])
    opt.step()
    assert a.data[0] == pytest.approx(0.9) and b.data[0] == pytest.approx(0.0)
    c = Parameter([2.0])
    opt.add_param_group({"params": [c], "lr": 0.5})
    c.grad = Tensor([1.0])
    opt.set_lr(0.25)
    assert [g["lr"] for g in opt.param_groups] == [0.25, 0.25, 0.25]
    opt.step()
    assert c.data[0] == pytest.approx(1.75)
    with pytest.raises(ValueError, match="twice"):
        opt.add_param_group({"params": [a]})


@pytest.mark.task("optim_optimizer")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_optim_optimizer_skips_frozen_and_gradless(name, path):
    params = initial()
    params[1].freeze()
    params[1].grad = Tensor(np.ones_like(params[1].data))  # stale: must be ignored
    opt = OPTIMIZERS[name](params, lr=0.1, flat=path == "flat")
    before = [p.data.copy() for p in params]
    for t in range(3):
        for i, p in enumerate(params):
            if i != 1:
                p.grad = None if i == 3 else Tensor(gradient(p.data, i, t))
        opt.step()
    assert np.array_equal(params[1].data, before[1]) and np.array_equal(params[3].data, before[3])
    assert not np.array_equal(params[0].data, before[0])
    assert opt.state.get(params[1], {}).get("step", 0) == 0
    assert opt.state[params[0]]["step"] == 3


@pytest.mark.task("optim_optimizer")
@pytest.mark.parametrize("path", PATHS)
def test_optim_optimizer_zero_grad(path):
    params = initial()
    opt = optim.Adam(params, flat=path == "flat")
    feed(params, 0)
    grads = [p.grad for p in params]
    opt.zero_grad(set_to_none=False)
    assert all(p.grad is g and not np.any(g.data) for p, g in zip(params, grads))
    opt.zero_grad()
    assert all(p.grad is None for p in params)


# ----- state_dict -------------------------------------------------------------------------------------


def _roundtrip_json(saved: dict) -> dict:
    """What survives JSON (scalars, string keys) plus the arrays, as a checkpoint would store them."""
    arrays = {(i, k): v for i, s in saved["state"].items() for k, v in s.items() if isinstance(v, np.ndarray)}
    text = json.dumps({"state": {i: {k: v for k, v in s.items() if not isinstance(v, np.ndarray)}
                                 for i, s in saved["state"].items()},
                       "param_groups": saved["param_groups"]})
    back = json.loads(text)
    for (i, k), v in arrays.items():
        back["state"][str(i)][k] = v
    return back


@pytest.mark.task("optim_load_state_dict")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_optim_load_state_dict_resume_is_exact(case, path):
    flat = path == "flat"
    straight = initial()
    opt = build(case, straight, flat)
    for t in range(12):
        feed(straight, t)
        opt.step()

    first = initial()
    opt_a = build(case, first, flat)
    for t in range(5):
        feed(first, t)
        opt_a.step()
    saved = _roundtrip_json(opt_a.state_dict())
    resumed = [Parameter(p.data.copy()) for p in first]
    opt_b = build(case, resumed, not flat)  # the state moves between the loop and the flat layouts
    opt_b.set_lr(123.0)  # overwritten by the loaded hyper-parameters
    opt_b.load_state_dict(saved)
    for t in range(5, 12):
        feed(resumed, t)
        opt_b.step()
    for a, b in zip(straight, resumed):
        np.testing.assert_array_equal(a.data, b.data)


@pytest.mark.task("optim_state_dict")
def test_optim_state_dict_is_a_copy_with_plain_scalars():
    params = initial()
    opt = optim.NAdam(params, lr=0.1)
    feed(params, 0)
    opt.step()
    saved = opt.state_dict()
    assert saved["state"][0]["step"] == 1 and isinstance(saved["state"][0]["mu_product"], float)
    saved["state"][0]["exp_avg"][...] = 7.0
    assert not np.any(opt.state[params[0]]["exp_avg"] == 7.0)
    assert saved["param_groups"][0]["params"] == [0, 1, 2, 3]


@pytest.mark.task("optim_load_state_dict")
def test_optim_load_state_dict_mismatches_are_named():
    params = initial()
    opt = optim.Adam(params)
    feed(params, 0)
    opt.step()
    saved = opt.state_dict()
    with pytest.raises(ValueError, match="state has 1 parameter groups; this optimizer has 2"):
        optim.Adam([{"params": params[:2]}, {"params": params[2:]}]).load_state_dict(saved)
    with pytest.raises(ValueError, match="group 0 has 4 parameters"):
        optim.Adam(params[:3]).load_state_dict(saved)
    wrong_shape = {**saved, "state": {**saved["state"], 1: {**saved["state"][1], "exp_avg": np.zeros(7)}}}
    with pytest.raises(ValueError, match=r"'exp_avg' of parameter 1 .*\(7,\).*\(3,\)"):
        optim.Adam(params).load_state_dict(wrong_shape)
    missing = {**saved, "state": {0: {"step": 1, "exp_avg": np.zeros((4, 3))}}}
    with pytest.raises(ValueError, match=r"parameter 0 .*\['exp_avg', 'step'\]; expected .*exp_avg_sq"):
        optim.Adam(params).load_state_dict(missing)
    with pytest.raises(ValueError, match="momentum_decay.*another optimizer"):
        optim.Adam(params).load_state_dict(optim.NAdam(params).state_dict())


# ----- the flat buffer ----------------------------------------------------------------------------------


@pytest.mark.task("optim_flat")
def test_optim_flat_parameters_are_views_of_one_buffer():
    params = initial(np.float32)
    values = [p.data.copy() for p in params]
    opt = optim.AdamW(params, flat=True)
    buffer = opt._flat[0].params
    assert buffer.flags.c_contiguous and buffer.size == sum(v.size for v in values)
    for p, v in zip(params, values):
        assert np.shares_memory(p.data, buffer) and p.shape == v.shape
        np.testing.assert_array_equal(p.data, v)
    feed(params, 0)
    opt.step()
    state_buffer = opt._flat[0].state["exp_avg"]
    assert all(np.shares_memory(opt.state[p]["exp_avg"], state_buffer) for p in params)


@pytest.mark.task("optim_flat_step")
def test_optim_flat_step_trains_a_model_like_the_loop():
    def model():
        net = Sequential(Linear(5, 8), Linear(8, 3))
        for i, p in enumerate(net.parameters()):
            p.data[...] = np.sin(np.arange(p.data.size, dtype=np.float32) + i).reshape(p.shape)
        return net

    x = Tensor(np.cos(np.arange(20, dtype=np.float32)).reshape(4, 5))
    nets = [model(), model()]
    opts = [optim.Adam(nets[0].parameters(), lr=0.01), optim.Adam(nets[1].parameters(), lr=0.01, flat=True)]
    for _ in range(4):
        for net, opt in zip(nets, opts):
            opt.zero_grad()
            (net(x) ** 2).sum().backward()
            (net(x) ** 2).sum().backward()  # accumulates into the grads backward stored
            opt.step()
    for a, b in zip(nets[0].parameters(), nets[1].parameters()):
        np.testing.assert_allclose(a.data, b.data, atol=1e-6)


@pytest.mark.task("optim_flat")
def test_optim_flat_needs_one_dtype():
    with pytest.raises(ValueError, match="dtype"):
        optim.SGD([Parameter(np.zeros(2, np.float32)), Parameter(np.zeros(2, np.float64))], flat=True)


@pytest.mark.gpu
@pytest.mark.parametrize("amsgrad", [False, True])
@pytest.mark.parametrize("cls", [optim.Adam, optim.AdamW])
def test_optim_adam_fused_cupy_kernel_matches_numpy(cls, amsgrad):
    cupy = pytest.importorskip("cupy")
    cpu, gpu = initial(), [Parameter(p.data.copy()).to("cuda:0") for p in initial()]
    opts = [cls(ps, lr=0.05, weight_decay=0.1, amsgrad=amsgrad, flat=flat)
            for ps, flat in ((cpu, False), (gpu, True))]
    for t in range(10):
        feed(cpu, t)
        for i, p in enumerate(gpu):
            p.grad = Tensor(cupy.asarray(gradient(cupy.asnumpy(p.data), i, t)), device="cuda:0")
        for opt in opts:
            opt.step()
    for a, b in zip(cpu, gpu):
        np.testing.assert_allclose(cupy.asnumpy(b.data), a.data, atol=1e-10)


@pytest.mark.gpu
@pytest.mark.skipif(not strict_gpu.active(), reason="counted on the stand-in")
@pytest.mark.parametrize("momentum", [0.0, 0.9])
def test_optim_sgd_step_on_a_gpu_makes_no_array(momentum):
    """lr·g goes into the optimizer's spare array and momentum without dampening multiplies nothing by 1:
    after the first step, a step allocates nothing and launches 2 kernels per parameter (4 with momentum)."""
    params = [Parameter(np.ones((3, 4), np.float32)).to("cuda:0"), Parameter(np.ones(4, np.float32)).to("cuda:0")]
    opt = optim.SGD(params, lr=0.1, momentum=momentum)
    for p in params:
        p.grad = Tensor(np.full(p.shape, 0.5, np.float32)).to("cuda:0")
    for _ in range(2):  # the first makes the spare and the momentum buffers, the second is the usual step
        opt.step()
    with strict_gpu.counting():
        opt.step()
        launches, allocations = sum(strict_gpu.LAUNCHES.values()), sum(strict_gpu.ALLOCATIONS.values())
    assert (launches, allocations) == ((4 if momentum else 2) * len(params), 0), (strict_gpu.LAUNCHES, strict_gpu.ALLOCATIONS)
    cpu = [Parameter(np.ones((3, 4), np.float32)), Parameter(np.ones(4, np.float32))]
    reference = optim.SGD(cpu, lr=0.1, momentum=momentum)
    for p in cpu:
        p.grad = Tensor(np.full(p.shape, 0.5, np.float32))
    for _ in range(3):
        reference.step()
    for a, b in zip(cpu, params):
        np.testing.assert_array_equal(b.data.get(), a.data)


@pytest.mark.task("optim_flat_step")
def test_optim_flat_step_refuses_parameters_moved_after_flattening():
    """model.to() after building a flat optimizer must not leave it updating a buffer nobody uses."""
    model = Linear(4, 3)
    opt = optim.SGD(model.parameters(), lr=0.5, flat=True)
    model.to("cpu:1")
    for p in model.parameters():
        p.grad = Tensor(np.ones(p.shape, np.float32), device="cpu:1")
    with pytest.raises(RuntimeError, match="no longer lives in the optimizer's flat buffer"):
        opt.step()


@pytest.mark.task("optim_flat_step")
@pytest.mark.parametrize("cls,kwargs", [(optim.Adam, {}), (optim.Adam, {"weight_decay": 0.1, "amsgrad": True}),
                                        (optim.AdamW, {})])
def test_optim_flat_step_adam_is_the_loops_to_the_bit_and_allocates_no_temporaries(cls, kwargs):
    """The flat Adam step (the loop's own rule on each block, into spare arrays) matches the loop exactly."""
    import tracemalloc

    rng = np.random.default_rng(0)
    shapes = [(300, 200), (200,), (200, 100), (100,)] * 5  # 20 tensors, 300 k numbers: several blocks
    values = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    loop, flat = [Parameter(v.copy()) for v in values], [Parameter(v.copy()) for v in values]
    opts = [cls(loop, lr=0.01, **kwargs), cls(flat, lr=0.01, flat=True, **kwargs)]
    blocks = opts[1]._flat[0]
    for t in range(3):
        grads = [rng.standard_normal(s).astype(np.float32) for s in shapes]
        for ps in (loop, flat):
            for p, g in zip(ps, grads):
                p.grad = Tensor(g)
        opts[0].step()
        tracemalloc.start()
        opts[1].step()
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
        for a, b in zip(loop, flat):
            np.testing.assert_array_equal(a.data, b.data)
        sizes = [block[0].size for block in blocks.blocks]
        assert len(sizes) > 1 and max(sizes) - min(sizes) < len(sizes) and max(sizes) <= optim.CHUNK
        if t > 0:  # the first step makes the state and the spare blocks
            assert peak < 100_000, f"the flat step allocated {peak} bytes; expected no array-sized temporaries"
