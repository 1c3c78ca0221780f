"""Issue 50 items 5-8 and issue 48's torch flags: what the tools PyTorch users configure optimizers with see and
pass. Real tools (inspect, jsonargparse through LightningCLI, OmegaConf's ListConfig), checked against
torch.optim where torch defines the behaviour."""

from __future__ import annotations

import inspect

import numpy as np
import pytest
import torch

import slotopt
from slotopt.engine import registry
from slotopt.engine.construction import BuildsOnParams
from slotopt.engine.torch_arguments import TorchSpellingError


def _param(n: int = 2) -> torch.nn.Parameter:
    return torch.nn.Parameter(torch.ones(n))


# ------------------------------------------------------------------------------------------ 5: signatures
def test_5_a_class_signature_shows_its_own_arguments_defaults_and_torch_spellings():
    sig = inspect.signature(slotopt.AdamW)
    p = sig.parameters
    assert list(p)[:6] == ["learning_rate", "weight_decay", "beta_1", "beta_2", "epsilon", "amsgrad"]
    assert p["learning_rate"].default == 0.001 and p["weight_decay"].default == 0.004
    assert p["clipnorm"].default is None and p["name"].default is None  # the base's, passed on by **kwargs
    for torch_name in ("params", "lr", "betas", "fused", "foreach", "capturable", "differentiable"):
        assert p[torch_name].kind is inspect.Parameter.KEYWORD_ONLY
    assert not any(q.kind in (q.VAR_KEYWORD, q.VAR_POSITIONAL) for q in p.values())
    assert sig.bind(0.01).arguments == {"learning_rate": 0.01}  # Keras's positional learning rate
    legacy = inspect.signature(slotopt.legacy.Adam).parameters
    assert legacy["beta_1"].default == 0.9 and "clipnorm" in legacy and "betas" in legacy
    assert "lr" in legacy  # tf.keras's own (deprecated) spelling, once
    v1 = inspect.signature(slotopt.v1.AdamOptimizer).parameters
    assert v1["beta1"].default == 0.9 and "betas" in v1 and "lr" in v1


def test_5_every_registered_class_has_a_signature_without_catch_alls():
    for generation in ("keras3", "legacy", "v1"):
        for name, cls in registry.registered_classes(generation).items():
            if not isinstance(cls, BuildsOnParams):  # (a mapping of optimizers, not built on parameters)
                continue
            params = inspect.signature(cls).parameters
            assert "params" in params, name
            if "learning_rate" in params and "lr" in params:
                assert params["lr"].default is None, name


def test_5_lightning_cli_configures_a_slotopt_optimizer_by_torch_names(tmp_path):
    pytest.importorskip("jsonargparse")
    import lightning.pytorch as pl
    from lightning.pytorch.cli import LightningCLI

    class Model(pl.LightningModule):
        def __init__(self) -> None:
            super().__init__()
            self.w = torch.nn.Linear(2, 1)

        def training_step(self, batch, index):
            return self.w(batch).square().mean()

        def train_dataloader(self):
            return torch.utils.data.DataLoader(torch.randn(8, 2), batch_size=4)

    config = tmp_path / "config.yaml"
    config.write_text("optimizer:\n  class_path: slotopt.AdamW\n  init_args:\n    lr: 0.01\n"
                      "    betas: [0.8, 0.95]\n")
    trainer = dict(max_steps=2, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                   enable_model_summary=False, accelerator="cpu", default_root_dir=str(tmp_path))
    for args in (["fit", "--optimizer", "slotopt.AdamW", "--optimizer.lr", "0.01"], ["fit", "--config", str(config)]):
        cli = LightningCLI(Model, save_config_callback=None, trainer_defaults=trainer, args=args)
        opt = cli.trainer.optimizers[0]
        assert type(opt) is slotopt.AdamW and opt.param_groups[0]["lr"] == pytest.approx(0.01)
        assert int(opt.iterations) == 2
    assert (opt.beta_1, opt.beta_2) == (0.8, 0.95)


def test_5_jsonargparse_defaults_next_to_a_torch_spelling_are_not_a_conflict():
    w = _param()
    opt = slotopt.AdamW([w], learning_rate=0.001, beta_1=0.9, beta_2=0.999, lr=0.05, betas=(0.5, 0.6))
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05) and (opt.beta_1, opt.beta_2) == (0.5, 0.6)
    with pytest.raises(TorchSpellingError, match="together"):  # two values of its own: still refused
        slotopt.AdamW([w], learning_rate=0.1, lr=0.05)
    with pytest.raises(TorchSpellingError, match="together"):
        slotopt.Adam([w], 0.1, lr=0.05)  # by position
    assert slotopt.AdamW([w], lr=None).param_groups[0]["lr"] == pytest.approx(0.001)  # None: not given


# ------------------------------------------------------------------------------------------ 6: Hydra's betas
@pytest.mark.parametrize("kind", ["listconfig", "numpy", "tensor", "tuple", "list"])
def test_6_betas_is_any_sequence_of_two_numbers(kind):
    if kind == "listconfig":
        omegaconf = pytest.importorskip("omegaconf")
        betas = omegaconf.OmegaConf.create([0.8, 0.95])
    else:
        betas = {"numpy": np.array([0.8, 0.95]), "tensor": torch.tensor([0.8, 0.95], dtype=torch.float64),
                 "tuple": (0.8, 0.95), "list": [0.8, 0.95]}[kind]
    opt = slotopt.AdamW([_param()], lr=0.01, betas=betas)
    assert (opt.beta_1, opt.beta_2) == (0.8, 0.95)
    torch.optim.AdamW([_param()], lr=0.01, betas=betas)  # torch takes each too


@pytest.mark.parametrize("bad", ["ab", [0.8], [0.8, 0.9, 0.99], [True, 0.9], {"a": 1}, 0.9, [0.9, "x"]])
def test_6_anything_else_is_refused_by_name(bad):
    with pytest.raises(TorchSpellingError, match="Argument `betas` must be a pair"):
        slotopt.AdamW([_param()], betas=bad)


# ------------------------------------------------------------------------------------------ issue 48's flags
@pytest.mark.parametrize("cls", [slotopt.AdamW, slotopt.legacy.Adam, slotopt.v1.AdamOptimizer])
def test_48_fused_and_foreach_are_taken_and_shown(cls):
    w = _param()
    args = () if cls is not slotopt.v1.AdamOptimizer else (0.001,)
    opt = cls(*args, params=[w], fused=True, foreach=True, capturable=True)
    ref = cls(*args, params=[w2 := _param()])
    for o, p in ((opt, w), (ref, w2)):
        p.grad = torch.full((2,), 0.5)
        o.step()
    assert torch.equal(w, w2)  # the same bits: one implementation
    group = opt.param_groups[0]
    assert group["fused"] is True and group["differentiable"] is False and group["capturable"] is True
    assert "fused: True" in repr(opt) and opt.defaults["fused"] is True
    with pytest.raises(TorchSpellingError, match="must be True, False or None"):
        cls(*args, params=[w], fused="yes")


def test_48_differentiable_is_refused_with_the_reason():
    with pytest.raises(TorchSpellingError, match="differentiable=True.*outside autograd"):
        slotopt.Adam([_param()], differentiable=True)
    slotopt.Adam([_param()], differentiable=False)


def test_48_capturable_on_cuda_is_refused_clearly():
    if not torch.cuda.is_available():
        w = torch.nn.Parameter(torch.ones(2, device="meta"))
        slotopt.Adam([w], capturable=True)  # no device that captures: nothing to refuse
        pytest.skip("no CUDA device: the refusal is exercised where one is")
    with pytest.raises(TorchSpellingError, match=r"cannot be captured in a CUDA graph \(slotopt\.Adam: `clipnorm"):
        slotopt.Adam([torch.nn.Parameter(torch.ones(2, device="cuda"))], capturable=True, clipnorm=1.0)
    slotopt.Adam([torch.nn.Parameter(torch.ones(2, device="cuda"))], capturable=True)  # (tests/kernels/test_capturable_steps.py)


# ------------------------------------------------------------------------------------------ 7: param_names
def _adapt_state_dict_ids(optimizer, state_dict):
    """torch's documented load-by-name recipe (``Optimizer.register_load_state_dict_pre_hook``, torch 2.6+)."""
    from copy import deepcopy

    adapted = deepcopy(optimizer.state_dict())
    for k, v in state_dict["param_groups"][0].items():
        if k not in ["params", "param_names"]:
            adapted["param_groups"][0][k] = v
    lookup = {name: pid for pid, name in zip(state_dict["param_groups"][0]["params"],
                                             state_dict["param_groups"][0]["param_names"])}
    clone = lambda d: {k: (v.clone() if isinstance(v, torch.Tensor) else deepcopy(v)) for k, v in d.items()}  # noqa: E731
    for pid, name in zip(adapted["param_groups"][0]["params"], adapted["param_groups"][0]["param_names"]):
        if name in lookup:
            adapted["state"][pid] = clone(state_dict["state"][lookup[name]])
    return adapted


@pytest.mark.parametrize("make", [lambda p: slotopt.Adam(p, lr=0.01), lambda p: torch.optim.Adam(p, lr=0.01),
                                  lambda p: slotopt.legacy.Adam(p, lr=0.01)], ids=["keras3", "torch", "legacy"])
def test_7_param_names_are_kept_and_torchs_load_by_name_recipe_works(make):
    torch.manual_seed(0)
    first = torch.nn.ModuleDict({"a": torch.nn.Linear(3, 4), "b": torch.nn.Linear(4, 2)})
    opt = make(first.named_parameters())
    assert opt.param_groups[0]["param_names"] == ["a.weight", "a.bias", "b.weight", "b.bias"]
    for _ in range(3):
        opt.zero_grad()
        first["b"](first["a"](torch.randn(5, 3))).square().sum().backward()
        opt.step()
    saved = opt.state_dict()
    assert saved["param_groups"][0]["param_names"] == ["a.weight", "a.bias", "b.weight", "b.bias"]
    # The same layers registered in another order: by position the state would go to the wrong tensors.
    second = torch.nn.ModuleDict({"b": torch.nn.Linear(4, 2), "a": torch.nn.Linear(3, 4)})
    second.load_state_dict(first.state_dict())
    resumed = make(second.named_parameters())
    resumed.register_load_state_dict_pre_hook(_adapt_state_dict_ids)
    resumed.load_state_dict(saved)
    for name, p in second.named_parameters():
        old = opt.state[dict(first.named_parameters())[name]]
        for key, value in resumed.state[p].items():
            assert torch.equal(torch.as_tensor(value), torch.as_tensor(old[key])), (name, key)


def test_7_bare_tensors_have_no_param_names_as_in_torch():
    w = _param()
    assert "param_names" not in slotopt.Adam([w]).param_groups[0]
    assert "param_names" not in torch.optim.Adam([w]).param_groups[0]
    opt = slotopt.Adam([("w", w)])
    opt.add_param_group({"params": [("v", _param(3))], "lr": 0.5})
    assert [g["param_names"] for g in opt.param_groups] == [["w"], ["v"]]


# ------------------------------------------------------------------------------------------ 8: add_param_group
def _three_steps_then_a_group(make, **kwargs):
    w, v = _param(), _param()
    opt = make([w])
    for _ in range(3):
        w.grad = torch.ones(2)
        opt.step()
    opt.add_param_group({"params": [v]}, **kwargs)
    v.grad, w.grad = torch.ones(2), torch.ones(2)
    opt.step()
    return opt, w, v


def test_8_a_group_added_mid_training_shares_the_count_by_default_or_counts_its_own_as_torch():
    torch_opt, tw, tv = _three_steps_then_a_group(lambda p: torch.optim.Adam(p, lr=0.1))
    assert 1 - tv[0].item() == pytest.approx(0.1, abs=1e-6)
    shared, sw, sv = _three_steps_then_a_group(lambda p: slotopt.Adam(p, lr=0.1))
    assert 1 - sv[0].item() == pytest.approx(0.0581, abs=1e-4)  # Keras's and TF's: t = 4 for the new group
    own, ow, ov = _three_steps_then_a_group(lambda p: slotopt.Adam(p, lr=0.1), step_count="own")
    assert 1 - ov[0].item() == pytest.approx(0.1, abs=1e-5)  # torch's: the group's first step
    assert torch.equal(ow, sw)  # the first group is untouched by the choice
    assert own.param_groups[1]["step_offset"] == 3 and "step_offset" not in shared.param_groups[1]
    # carried by state_dict: a resumed optimizer keeps counting the group from where it was added
    w2, v2 = ow.detach().clone().requires_grad_(), ov.detach().clone().requires_grad_()
    again = slotopt.Adam([w2], lr=0.1)
    again.add_param_group({"params": [v2]}, step_count="own")
    again.load_state_dict(own.state_dict())
    assert again.param_groups[1]["step_offset"] == 3
    for o, p, q in ((own, ow, ov), (again, w2, v2)):
        p.grad, q.grad = torch.ones(2), torch.ones(2)
        o.step()
    assert torch.equal(ov, v2) and torch.equal(ow, w2)


def test_8_step_count_is_checked_and_refused_where_a_generation_cannot_give_a_group_its_own():
    with pytest.raises(ValueError, match="step_count"):
        slotopt.Adam([_param()]).add_param_group({"params": [_param()]}, step_count="torch")
    opt = slotopt.legacy.Adam([_param()])
    with pytest.raises(ValueError, match="cannot give one group its own"):
        opt.add_param_group({"params": [_param()]}, step_count="own")
    assert len(opt.param_groups) == 1
