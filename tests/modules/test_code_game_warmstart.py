"""The code game's predictor warm start: its rows are the game's predictor turns with the true
answer (in the grader's format) as the only trainable tokens, and in self-play the game's writer
turns with the program; it lowers the predictor's NLL on the pairs and hands over to self-play;
``steps: 0`` changes nothing; a resumed warm start continues exactly; the config knob parses
through the CLI."""

from __future__ import annotations

import csv
from dataclasses import replace

import pytest
import torch

from lit_codeRL.envs.code_game import extract_program, parse_prediction, prediction_correct
from lit_codeRL.envs.code_game.seeds import TEMPLATES
from lit_codeRL.policy.sampling import SamplingParams
from lit_codeRL.rollout.code_game import PREDICTOR, CodeGameRunner, CodeGameSettings, round_batch
from lit_codeRL.rollout.code_game_warmstart import (
    PredictorWarmStart,
    PredictorWarmStarter,
    harvest_pairs,
    predictor_rows,
    writer_rows,
)
from lit_codeRL.rollout.trajectory import TrajectoryBatch
from lit_codeRL.sandbox import SandboxConfig, make_sandbox
from tests.rollout.test_code_game_rounds import PROGRAMS, QueueEngine, replies
from tests.sandbox.conftest import require_bwrap


@pytest.fixture(scope="module")
def sandbox():
    require_bwrap()
    with make_sandbox(SandboxConfig(backend="bwrap", workers=2)) as sb:
        yield sb


def _runner(tokenizer, sandbox, reply, **game) -> CodeGameRunner:
    engine = QueueEngine(tokenizer, reply)
    settings = CodeGameSettings(**{"prompts_per_step": 1, "themes": ["sums"], **game})
    return CodeGameRunner(engine, engine, tokenizer, SamplingParams(max_new_tokens=64), sandbox, settings)


def test_rows_are_the_games_predictor_prompts_with_only_the_true_answer_trainable(sandbox, tiny_model):
    _, tokenizer = tiny_model
    runner = _runner(tokenizer, sandbox, replies)
    settings = PredictorWarmStart(steps=1, rounds=1, seed_programs=0)
    pairs, stats = harvest_pairs(runner, settings, torch.Generator().manual_seed(0), seed=0)
    # the 'sums' writers: two programs the gate admits (10 and 91), a coin flip, a banned import
    assert [(p.output, p.theme, p.source) for p in pairs] == [
        ("10\n", "sums", "writer"),
        ("91\n", "sums", "writer"),
    ]
    assert stats["writer_programs"] == 4 and stats["writer_admitted"] == 2
    rnd = runner.play(["sums"])  # the same programs, played: what the predictor is shown
    rows = predictor_rows(runner, pairs)
    batch = TrajectoryBatch.from_segments(rows, 0, rewards=torch.zeros(2), group_ids=torch.arange(2))
    for pair, row, r in zip(pairs, rows, range(2), strict=True):
        turns = [t for t in rnd.predictions if rnd.programs[t.program] == pair.program]
        assert turns and all(row[0].ids == t.prompt_ids for t in turns)  # token for token
        trained = batch.input_ids[r][batch.trainable_mask[r].bool()].tolist()
        assert trained == row[1].ids and trained[-1] == tokenizer.eos_token_id
        answer = tokenizer.decode(trained[:-1])
        assert answer == f"[OUTPUT]{pair.output.strip()}[/OUTPUT]"
        assert prediction_correct(parse_prediction(answer), pair.output)
        # nothing of the prompt trains: the trainable tokens are exactly the answer's
        assert int(batch.trainable_mask[r].sum()) == len(row[1].ids)

    # the writer's rows (self-play): the writer's prompt of the program's topic, token for token,
    # and the program in its fence, which the game reads back as that program
    rehearsed = writer_rows(runner, pairs)
    batch = TrajectoryBatch.from_segments(rehearsed, 0, rewards=torch.zeros(2), group_ids=torch.arange(2))
    for pair, row, r in zip(pairs, rehearsed, range(2), strict=True):
        assert all(row[0].ids == w.prompt_ids for w in rnd.writers)  # every writer of "sums"
        trained = batch.input_ids[r][batch.trainable_mask[r].bool()].tolist()
        assert trained == row[1].ids and trained[-1] == tokenizer.eos_token_id
        assert extract_program(tokenizer.decode(trained[:-1])) == pair.program

    # played as the predictor's reply, the answer earns a correct prediction in a real round
    answers = {p.program: tokenizer.decode(row[1].ids[:-1]) for p, row in zip(pairs, rows, strict=True)}

    def knows(prompt: str, n: int) -> list[str]:
        if "Topic:" in prompt:
            return PROGRAMS["sums"][:n]
        return [next(a for program, a in answers.items() if program.strip() in prompt)] * n

    played = _runner(tokenizer, sandbox, knows).play(["sums"])
    assert played.predictions and all(t.info["correct"] and t.reward == 1.0 for t in played.predictions)
    assert round_batch(played, runner.settings, (PREDICTOR,), 0).batch_size == len(played.predictions)


def test_seed_programs_fill_in_when_the_writer_admits_nothing(sandbox, tiny_model):
    _, tokenizer = tiny_model
    runner = _runner(tokenizer, sandbox, lambda prompt, n: ["no program"] * n, programs_per_prompt=2)
    settings = PredictorWarmStart(steps=1, rounds=2, seed_programs=12, max_pairs=10, eval_pairs=4)
    warm = PredictorWarmStarter(runner, settings, seed=3, pad_token_id=0)
    found = warm.harvest()
    assert found["writer_programs"] == 4 and found["writer_admitted"] == 0
    assert found["pairs_from_seeds"] == 10 and found["held_out"] == 4 and found["pairs"] == 6
    assert len({p.program for p in warm.pairs + warm.held_out}) == 10
    assert not {p.program for p in warm.pairs} & {p.program for p in warm.held_out}
    assert {p.theme for p in warm.pairs + warm.held_out} <= set(TEMPLATES)
    batch = warm.next_batch()
    assert batch.batch_size == 8  # settings.batch_size rows, epochs over the 6 pairs
    assert len(warm.rows()) == 6  # the policy does not write here: predictor rows only
    writing = PredictorWarmStarter(runner, settings, seed=3, pad_token_id=0, writes=True)
    assert writing.harvest()["rows"] == 12 and len(writing.rows()) == 12
    plain = PredictorWarmStarter(runner, replace(settings, rehearse_writer=False), 3, 0, writes=True)
    assert plain.harvest()["rows"] == 6


def _module(steps: int = 0, **warm):
    from lit_codeRL.modules.code_game import CodeGameModule

    return CodeGameModule(
        model={"name_or_path": "tiny-random"},
        game={
            "prompts_per_step": 1,
            "programs_per_prompt": 2,
            "predictions_per_program": 2,
            "prediction_max_new_tokens": 6,
        },  # fmt: skip
        warm_start={"steps": steps, **warm},
        sandbox={"workers": 2},
        sampling={"max_new_tokens": 8},
        optimizer={"learning_rate": 1e-6},
        save_hf_model=False,
    )


WARM = {"rounds": 1, "seed_programs": 12, "eval_pairs": 4, "batch_size": 4, "learning_rate": 1e-3}


def _trainer(steps: int, root, **kw):
    from lightning.pytorch import Trainer

    kw.setdefault("logger", False)
    kw.setdefault("log_every_n_steps", 1)
    return Trainer(
        accelerator="cpu",
        max_steps=steps,
        enable_progress_bar=False,
        enable_model_summary=False,
        default_root_dir=root,
        **kw,
    )


def test_the_warm_start_lowers_the_predictors_nll_then_self_play_takes_over(tmp_path):
    from lightning.pytorch.loggers import CSVLogger

    from tests.modules.test_grpo_module import undocumented_metrics

    module = _module(3, **WARM)
    _trainer(4, tmp_path, logger=CSVLogger(tmp_path, name=""), enable_checkpointing=False).fit(module)
    with next(tmp_path.rglob("metrics.csv")).open() as f:
        rows = {int(r["step"]): {k: v for k, v in r.items() if v} for r in csv.DictReader(f)}
    warm = [rows[s] for s in (0, 1, 2)]
    assert all("train/warmstart/loss" in r and "train/game/validity_rate" not in r for r in warm)
    assert "train/game/validity_rate" in rows[3]  # (Lightning repeats a step's stale metrics)
    first, last = warm[0], warm[-1]
    # the random writer admits nothing: every pair is a seed program, 4 of them held out
    assert (
        float(first["train/warmstart/pairs_from_seeds"]) == 12
        and float(first["train/warmstart/held_out"]) == 4
    )
    assert float(first["train/warmstart/rows"]) == 2 * 8  # self-play: a writer row per pair too
    assert float(first["train/warmstart/before/format_rate"]) == 0.0
    # the true answers of the held-out programs got likelier, and the training ones too
    assert float(last["train/warmstart/after/nll"]) < float(first["train/warmstart/before/nll"]) - 0.2
    assert float(last["train/warmstart/nll"]) < float(first["train/warmstart/nll"])
    # the warm start's learning rate, then self-play's own from its first step
    assert [float(r["train/lr"]) for r in warm] == pytest.approx([1e-3] * 3)
    assert float(rows[3]["train/lr"]) == pytest.approx(1e-6)
    # AdamW's moments were reset at the hand-over: the policy's state holds self-play's step only
    state = module.trainer.optimizers[0].state
    assert all(int(state[p]["step"]) == 1 for p in module.policy.parameters())
    names = sorted({k for r in rows.values() for k in r if k not in ("epoch", "step")})
    assert not undocumented_metrics(names), undocumented_metrics(names)


def test_steps_zero_changes_nothing(tmp_path):
    from lightning.pytorch import seed_everything

    runs = []
    for warm in ({}, {"rounds": 3, "seed_programs": 5, "learning_rate": 1e-2, "batch_size": 2}):
        seed_everything(0)
        module = _module(0, **warm)
        trainer = _trainer(1, tmp_path / str(len(runs)), enable_checkpointing=False)
        trainer.fit(module)
        assert module.warm_starter is None and "predictor_warm_start" not in module._registered()
        assert trainer.optimizers[0].param_groups[0]["lr"] == pytest.approx(1e-6)
        runs.append(module)
    for (name, a), (_, b) in zip(
        runs[0].policy.named_parameters(), runs[1].policy.named_parameters(), strict=True
    ):
        assert torch.equal(a, b), name


def test_a_resumed_warm_start_continues_exactly(tmp_path):
    """2 warm-start steps + checkpoint + 2 resumed == 4 uninterrupted: the pairs, the order of
    the batches, the step count and every parameter."""
    from lightning.pytorch import seed_everything
    from lightning.pytorch.callbacks import ModelCheckpoint

    seed_everything(0)
    whole = _module(4, **WARM)
    _trainer(4, tmp_path / "whole", enable_checkpointing=False).fit(whole)

    seed_everything(0)
    first = _module(4, **WARM)
    ckpt = ModelCheckpoint(dirpath=tmp_path / "ckpt", save_last=True, every_n_train_steps=2)
    _trainer(2, tmp_path / "first", callbacks=[ckpt]).fit(first)
    saved = torch.load(tmp_path / "ckpt" / "last.ckpt", weights_only=False)["lit_coderl_state"]
    assert saved["predictor_warm_start"]["steps_done"] == 2 and saved["predictor_warm_start"]["pairs"]

    seed_everything(123)  # the resumed run must not depend on the global seed
    resumed = _module(4, **WARM)
    _trainer(4, tmp_path / "resumed", enable_checkpointing=False).fit(
        resumed, ckpt_path=tmp_path / "ckpt" / "last.ckpt"
    )
    assert resumed.warm_starter.steps_done == 4 and resumed.warm_starter.pairs == whole.warm_starter.pairs
    assert resumed.warm_starter.dataset.state_dict() == whole.warm_starter.dataset.state_dict()
    for (name, a), (_, b) in zip(
        whole.policy.named_parameters(), resumed.policy.named_parameters(), strict=True
    ):
        assert torch.equal(a, b), name


def test_the_knob_parses_through_the_cli_and_is_refused_where_the_policy_only_writes():
    from lit_codeRL.errors import ConfigError
    from lit_codeRL.modules.code_game import CodeGameModule
    from tests.modules.test_grpo_module import cli

    out = cli(
        "fit", "--config", "configs/grpo_code_game.yaml",
        "--model.init_args.warm_start.steps", "30",
        "--model.init_args.warm_start.seed_programs", "96",
        "--print_config",
    ).stdout  # fmt: skip
    block = out[out.index("warm_start:") :]
    assert "steps: 30" in block and "seed_programs: 96" in block and "learning_rate: 1.0e-05" in block
    with pytest.raises(ConfigError, match="policy only writes"):
        CodeGameModule(
            model={"name_or_path": "tiny-random"},
            opponent={"kind": "frozen", "role": "writer"},
            warm_start={"steps": 2},
        )
    with pytest.raises(ValueError, match="needs pairs"):
        PredictorWarmStart(steps=2, rounds=0, seed_programs=0)
