"""SpiralModule end to end on a tiny random model: both configs through the CLI, the game dumps
and evaluations, exact resume (baselines included), and a frozen opponent in the checkpoint."""

from __future__ import annotations

import json

import pytest
import torch

from tests.conftest import quiet_trainer
from tests.modules.test_grpo_module import cli, read_metrics
from tests.modules.test_reinforce_bc import csv_logger

TINY_SPIRAL = [
    "--model.init_args.model.name_or_path",
    "tiny-random",
    "--model.init_args.sampling.max_new_tokens",
    "6",
    "--model.init_args.samples_per_step",
    "6",
    "--model.init_args.games_per_round",
    "3",
    "--trainer.callbacks.init_args.games_per_seat",
    "2",
    "--trainer.callbacks.init_args.max_new_tokens",
    "6",
    "--trainer.callbacks.init_args.eval_interval_steps",
    "0",
]


@pytest.mark.parametrize("config", ["spiral_self_play", "spiral_multigame"])
def test_spiral_configs_train_through_the_cli(tmp_path, config):
    run = tmp_path / config
    cli(
        "fit",
        "--config",
        f"configs/{config}.yaml",
        *TINY_SPIRAL,
        "--trainer.max_steps",
        "4",
        *csv_logger(run),
    )
    rows = [r for r in read_metrics(run) if r.get("train/game/invalid_move_rate")]
    assert len(rows) == 2  # 2 training steps of 2 epochs each
    assert all(float(r["train/samples"]) == 6 for r in rows)
    assert all(r["train/loss_epoch2"] for r in rows)
    games = [json.loads(line) for line in next(run.rglob("games.jsonl")).read_text().splitlines()]
    assert games and {"game_id", "returns", "turns", "end_reason"} <= set(games[0])
    evals = sorted(run.rglob("game_eval/step_*.json"))
    assert [p.name for p in evals] == ["step_000000.json", "step_000004.json"]
    metrics = json.loads(evals[0].read_text())["metrics"]
    assert metrics["game_eval/tictactoe/vs_random/games"] == 4  # 2 per seat
    if config == "spiral_multigame":
        assert {r["game_id"] for r in games} == {"tictactoe", "kuhn_poker", "simple_negotiation"}
        assert "game_eval/kuhn_poker/vs_bot/win" in metrics
        assert "game_eval/simple_negotiation/vs_bot/win" not in metrics  # no library bot
        assert any(k.startswith("train/baseline/kuhn_poker/") for k in rows[-1])


def _module(**kw):
    from lit_codeRL.modules.spiral import GameSettings, SpiralModule
    from lit_codeRL.policy.loading import ModelSettings
    from lit_codeRL.policy.sampling import SamplingParams
    from lit_codeRL.training.optim import OptimizerSettings

    return SpiralModule(
        model=ModelSettings(name_or_path="tiny-random"),
        games=GameSettings(games=["tictactoe"]),
        sampling=SamplingParams(max_new_tokens=6, temperature=1.0),
        samples_per_step=4,
        games_per_round=3,
        optimizer=OptimizerSettings(learning_rate=1e-3),
        save_hf_model=False,
        **kw,
    )


def _trainer(steps: int, root, **kw):
    return quiet_trainer(root, steps, **{"enable_checkpointing": True, **kw})


def test_resumed_run_matches_uninterrupted_baselines_and_weights(tmp_path):
    """2 training steps + checkpoint + 1 resumed == 3 uninterrupted: RAE baselines, the game
    stream and every parameter. (Every move of the random model is invalid, so the baselines move
    every step and the advantages are never 0.)"""
    from lightning.pytorch import seed_everything
    from lightning.pytorch.callbacks import ModelCheckpoint

    seed_everything(0)
    whole = _module()
    _trainer(6, tmp_path / "whole").fit(whole)

    seed_everything(0)
    first = _module()
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True, every_n_train_steps=4)
    _trainer(4, tmp_path / "first", callbacks=[ckpt]).fit(first)
    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)["lit_coderl_state"]["selfplay"]
    assert saved["baselines"]["values"] == [[k, v] for k, v in first.dataset.baselines.values.items()]

    seed_everything(123)  # the resumed run must not depend on the global seed
    resumed = _module()
    _trainer(6, tmp_path / "resumed").fit(resumed, ckpt_path=tmp_path / "ckpt" / "last.ckpt")

    assert resumed.dataset.baselines.values == whole.dataset.baselines.values
    assert resumed.dataset.games_played == whole.dataset.games_played
    assert whole.dataset.baselines.values[("tictactoe", 0)] < -0.1  # it did move
    for (name, a), (_, b) in zip(
        whole.policy.named_parameters(), resumed.policy.named_parameters(), strict=True
    ):
        assert torch.equal(a, b), name


def test_frozen_opponent_is_checkpoint_state(tmp_path):
    from lightning.pytorch.callbacks import ModelCheckpoint

    from lit_codeRL.modules.spiral import OpponentSettings

    module = _module(opponent=OpponentSettings(kind="frozen"))
    ckpt = ModelCheckpoint(dirpath=tmp_path, save_last=True, every_n_train_steps=2)
    _trainer(2, tmp_path / "run", callbacks=[ckpt]).fit(module)
    state = torch.load(tmp_path / "last.ckpt", weights_only=False)["lit_coderl_state"]
    frozen = state["frozen_opponent"]
    # The opponent is the policy as it was at the start, not the trained one.
    name = "model.embed_tokens.weight"
    assert not torch.equal(frozen[name], module.policy.state_dict()[name])
    assert torch.equal(frozen[name], module.frozen.model.state_dict()[name])
    games = [json.loads(line) for line in (tmp_path / "run" / "games.jsonl").read_text().splitlines()]
    assert games and all(len(g["policy_seats"]) == 1 for g in games)


def test_mbpp_evaluation_runs_on_a_spiral_run(tmp_path):
    """Transfer to code: the MBPP callback evaluates a SPIRAL policy like any other."""
    from lit_codeRL.callbacks import MBPPEvalCallback

    callback = MBPPEvalCallback(
        source="embedded", split="eval", limit=2, max_new_tokens=8, eval_interval_steps=0, eval_at_start=False
    )
    trainer = _trainer(2, tmp_path, callbacks=[callback])
    trainer.fit(_module())
    assert [h["step"] for h in callback.history] == [2]
    assert callback.history[0]["mbpp_eval/num_problems"] == 2
    assert "mbpp_eval/pass_rate" in trainer.callback_metrics


def test_refreshed_frozen_opponent_samples_from_the_new_weights(tmp_path):
    """``refresh_every``: the opponent takes the policy's weights, and its engine (a bf16 replica
    on a CPU with native bf16) samples from them, not from the weights it was built with."""
    from lit_codeRL.modules.spiral import OpponentSettings

    module = _module(opponent=OpponentSettings(kind="frozen", refresh_every=1))
    initial = module.policy.state_dict()["model.embed_tokens.weight"].clone()
    _trainer(2, tmp_path / "run").fit(module)
    model = module.frozen.model
    weight = model.state_dict()["model.embed_tokens.weight"]
    assert not torch.equal(weight, initial)  # refreshed from the trained policy
    sampler = module.frozen.engine.sampler
    for (name, a), (_, b) in zip(model.named_parameters(), sampler.named_parameters(), strict=True):
        torch.testing.assert_close(b, a.to(b.dtype), msg=name)


def test_with_two_epochs_the_first_update_is_on_policy_against_the_trainers_old_policy(tmp_path):
    """The docstring's claim: pi_old is the trainer's (one no-grad pass), so the first epoch's
    ratio is 1 and nothing is clipped even when the sampler's log-probs are off (here 0.5 below
    the trainer's, a bf16 or vLLM sampler in exaggeration); the truncated importance weight
    exp(0.5) carries that error. With the sampler's log-probs as pi_old every token would sit at
    ratio exp(0.5) and be clipped."""
    import math

    from lit_codeRL.modules.spiral import SpiralModule

    class SamplerError(SpiralModule):
        def training_step(self, dataloader_iter):
            def shifted():
                for item in dataloader_iter:
                    batch = item[0] if isinstance(item, tuple) else item
                    batch.old_logprobs = batch.old_logprobs - 0.5 * batch.trainable_mask
                    yield item

            return super().training_step(shifted())

    module = _module(ppo_epochs=2)
    module.__class__ = SamplerError
    module.optimizer_settings.learning_rate = 1e-9
    trainer = _trainer(2, tmp_path, enable_checkpointing=False)
    trainer.fit(module)
    metrics = {k: float(v) for k, v in trainer.callback_metrics.items()}
    assert metrics["train/ratio"] == pytest.approx(1.0, abs=1e-4)
    assert metrics["train/clip_ratio"] == 0.0
    assert metrics["train/tis/weight"] == pytest.approx(math.exp(0.5), rel=1e-3)
