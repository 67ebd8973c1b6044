"""``OptimizerSettings``: its checks, the AdamW and schedule it builds, and its way from a config (or
a checkpoint written before the group existed) into a module's optimizer."""

from __future__ import annotations

import dataclasses

import pytest
import torch
import yaml

from lit_codeRL.training.optim import OptimizerSettings

RL_DEFAULT = OptimizerSettings(learning_rate=1e-6)
BC_DEFAULT = OptimizerSettings(learning_rate=1e-5, warmup_steps=10, lr_schedule="cosine", min_lr_ratio=0.1)
MODULES = {
    "GRPOModule": RL_DEFAULT,
    "REINFORCEModule": RL_DEFAULT,
    "SpiralModule": RL_DEFAULT,
    "BCModule": BC_DEFAULT,
}
"""Each module's defaults as they were before the group: a module keeps its own."""


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("lr_schedule", "linear", "lr_schedule must be 'constant' or 'cosine'"),
        ("learning_rate", -1e-5, "learning_rate must be a finite number >= 0"),
        ("learning_rate", float("nan"), "learning_rate must be a finite number >= 0"),
        ("weight_decay", -0.1, "weight_decay must be >= 0"),
        ("warmup_steps", -1, "warmup_steps must be >= 0"),
        ("min_lr_ratio", 1.5, "min_lr_ratio must be in [0, 1]"),
        ("min_lr_ratio", -0.1, "min_lr_ratio must be in [0, 1]"),
        ("max_grad_norm", -1.0, "max_grad_norm must be >= 0"),
    ],
)
def test_settings_refuse_values_no_run_means(field, value, message):
    with pytest.raises(ValueError, match=message.replace("[", r"\[").replace("]", r"\]")):
        OptimizerSettings(**{field: value})


def test_build_applies_every_field_to_adamw_and_the_schedule():
    params = [torch.nn.Parameter(torch.ones(3))]
    settings = OptimizerSettings(
        learning_rate=0.4,
        weight_decay=0.01,
        warmup_steps=4,
        lr_schedule="cosine",
        min_lr_ratio=0.25,
        fused=False,
    )
    opt, sched = settings.build(params, total_steps=20)
    group = opt.param_groups[0]
    assert (group["weight_decay"], bool(group["fused"])) == (0.01, False)
    lrs = []
    for _ in range(20):
        lrs.append(group["lr"])
        opt.step()
        sched.step()
    assert lrs[:5] == pytest.approx([0.1, 0.2, 0.3, 0.4, 0.4])  # warm-up (s + 1) / 4, then the peak
    assert lrs[12] == pytest.approx(0.4 * (0.25 + 0.75 * 0.5))  # half-way down the cosine
    assert group["lr"] == pytest.approx(0.4 * 0.25)  # min_lr_ratio at total_steps
    fused, _ = dataclasses.replace(settings, fused=True).build(params)
    assert fused.param_groups[0]["fused"] is True
    # A grad scaler must unscale before clipping: fused AdamW cannot, so it is off under 16-mixed.
    scaled, _ = dataclasses.replace(settings, fused=True).build(params, precision="16-mixed")
    assert not scaled.param_groups[0]["fused"]


def _cli(monkeypatch, *args: str):
    """``lit-coderl`` in-process up to the built module (no fit)."""
    from lit_codeRL.cli import CodeRLCLI

    monkeypatch.setattr(CodeRLCLI, "_run_subcommand", lambda self, subcommand: None)
    monkeypatch.setattr("sys.argv", ["lit-coderl"])  # pytest's own arguments are not the CLI's
    return CodeRLCLI(args=["fit", *args, "--trainer.logger", "false", "--trainer.accelerator", "cpu"])


@pytest.mark.parametrize("name", sorted(MODULES))
def test_every_module_shows_the_group_with_its_docs_and_its_own_defaults(monkeypatch, capsys, name):
    with pytest.raises(SystemExit) as done:
        _cli(monkeypatch, "--model", name, "--print_config=comments")
    assert done.value.code in (0, None)
    text = capsys.readouterr().out
    config = yaml.safe_load(text)["model"]["init_args"]
    assert config["optimizer"] == dataclasses.asdict(MODULES[name])
    assert not {"learning_rate", "fused_optimizer", "max_grad_norm"} & set(config)
    lines = text.splitlines()
    group = lines.index("    optimizer:")
    comments = " ".join(line.strip() for line in lines[group : group + 30] if line.strip().startswith("#"))
    for field_doc in (
        "AdamW learning rate: the peak, reached at the end of the warm-up.",
        "Clip the gradients' global L2 norm to this before each optimizer step; 0 disables clipping.",
    ):
        assert field_doc in comments, comments


def test_config_learning_rate_reaches_adamw_and_the_schedule(monkeypatch):
    cli = _cli(
        monkeypatch,
        "--model",
        "BCModule",
        "--model.init_args.model.name_or_path",
        "tiny-random",
        "--model.init_args.optimizer.learning_rate",
        "0.25",
        "--model.init_args.optimizer.lr_schedule",
        "constant",
        "--model.init_args.optimizer.fused",
        "false",
        "--trainer.max_steps",
        "10",
    )
    module = cli.model
    module.trainer = cli.trainer
    configured = module.configure_optimizers()
    opt, sched = configured["optimizer"], configured["lr_scheduler"]["scheduler"]
    assert sched.base_lrs == [0.25] and not opt.param_groups[0]["fused"]
    # BC's own warm-up (10 steps) stays: only the keys the config names change.
    assert opt.param_groups[0]["lr"] == pytest.approx(0.25 / 10)
    for _ in range(12):
        opt.step()
        sched.step()
    assert opt.param_groups[0]["lr"] == pytest.approx(0.25)


def test_every_module_hands_its_group_and_chunking_to_the_policy_layer(monkeypatch):
    """The module passes its ``optimizer``, ``micro_batch_size`` and ``save_hf_model`` on to
    ``PolicyModule`` (the latter two have defaults there: a dropped one would pass silently)."""
    from lit_codeRL.modules.bc import BCModule
    from lit_codeRL.modules.grpo import GRPOModule
    from lit_codeRL.modules.reinforce import REINFORCEModule
    from lit_codeRL.modules.spiral import SpiralModule
    from lit_codeRL.training.policy_module import PolicyModule

    class Forwarded(Exception):
        pass

    def record(self, *args, **kwargs):
        raise Forwarded(kwargs)

    monkeypatch.setattr(PolicyModule, "__init__", record)  # stop before any model is loaded
    given = OptimizerSettings(learning_rate=0.123, weight_decay=0.01, max_grad_norm=0.7, fused=False)
    for cls in (GRPOModule, REINFORCEModule, BCModule, SpiralModule):
        with pytest.raises(Forwarded) as forwarded:
            cls(optimizer=given, micro_batch_size=3, save_hf_model=False)
        kwargs = forwarded.value.args[0]
        assert (kwargs["optimizer"], kwargs["micro_batch_size"], kwargs["save_hf_model"]) == (given, 3, False)
        with pytest.raises(Forwarded) as forwarded:
            cls()
        assert forwarded.value.args[0]["optimizer"] == MODULES[cls.__name__], cls.__name__


def test_a_checkpoint_from_before_the_group_resumes_with_its_optimizer_knobs(monkeypatch, tmp_path):
    """``--ckpt_path`` makes the checkpoint's hparams the model config (Lightning); one written
    before the group holds ``learning_rate`` & co. as module args: they land in ``optimizer``."""
    legacy = {
        "_class_path": "lit_codeRL.modules.bc.BCModule",
        "model": {"name_or_path": "tiny-random"},
        "batch_size": 2,
        "learning_rate": 0.002,
        "weight_decay": 0.01,
        "warmup_steps": 3,
        "lr_schedule": "constant",
        "min_lr_ratio": 0.0,
        "max_grad_norm": 0.5,
        "micro_batch_size": None,
        "fused_optimizer": False,
        "save_hf_model": False,
        "seed": 0,
        "_instantiator": "lightning.pytorch.cli.instantiate_module",
    }
    ckpt = tmp_path / "old.ckpt"
    torch.save({"hyper_parameters": legacy}, ckpt)
    cli = _cli(monkeypatch, "--model", "BCModule", "--ckpt_path", str(ckpt))
    assert cli.model.optimizer_settings == OptimizerSettings(
        learning_rate=0.002, weight_decay=0.01, warmup_steps=3, max_grad_norm=0.5, fused=False
    )
    assert cli.model.hparams["batch_size"] == 2
