"""Rounds of the code game with scripted players (real tokenizer and ids, the real sandbox gate):
which programs count and why, how predictions are graded, the rewards and the per-role group
advantages, the logged statistics under the original names; a predictor of known strength gives
the writers non-constant rewards under the default reward and a constant one under zero-sum; and
the module trains through its shipped config."""

from __future__ import annotations

import random

import pytest
import torch

from lit_codeRL.policy.output import GenerationOutput, left_pad
from lit_codeRL.policy.sampling import SamplingParams
from lit_codeRL.policy.special_tokens import special_texts
from lit_codeRL.rollout.code_game import (
    PREDICTOR,
    WRITER,
    CodeGameRunner,
    CodeGameSettings,
    round_batch,
    round_stats,
)
from lit_codeRL.sandbox import SandboxConfig, make_sandbox
from tests.sandbox.conftest import require_bwrap


class QueueEngine:
    """Answers each generate call's rows with the next texts of ``replies(prompt_text, n)``."""

    def __init__(self, tokenizer, replies) -> None:
        self.tokenizer, self.replies = tokenizer, replies
        self.pad_token_id = (
            tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
        )

    def pad_prompts(self, prompts):
        return left_pad(prompts, self.pad_token_id)

    def generate(
        self, prompt_ids, prompt_mask, sampling, num_generations=1, generator=None, on_finished=None
    ):
        texts = []
        for r in range(prompt_ids.size(0)):
            prompt = self.tokenizer.decode(prompt_ids[r][prompt_mask[r].bool()])
            texts += self.replies(prompt, num_generations)
        ids = [self.tokenizer(t, add_special_tokens=False)["input_ids"] or [self.pad_token_id] for t in texts]
        rows, width = len(texts), max(len(i) for i in ids)
        completion = torch.full((rows, width), self.pad_token_id)
        mask = torch.zeros(rows, width, dtype=torch.long)
        for r, row in enumerate(ids):
            completion[r, : len(row)], mask[r, : len(row)] = torch.tensor(row), 1
        return GenerationOutput(
            prompt_ids.repeat_interleave(num_generations, 0),
            prompt_mask.repeat_interleave(num_generations, 0),
            completion,
            mask,
            torch.full((rows, width), -0.5) * mask,
            texts,
            torch.ones(rows, dtype=torch.bool),
            ["stop"] * rows,
        )


PROGRAMS = {  # topic -> the four programs its writers submit
    "sums": [
        "```python\nprint(sum(range(5)))\n```",  # 10: always predicted
        "```python\ntotal = 0\nfor i in range(7):\n    total += i * i\nprint(total)\n```",  # 91: half
        "```python\nprint(''.join({c for c in 'abcdefghijklmnopqrstuvwxyz'}))\n```",  # nondeterministic
        "```python\nimport os\nprint(os.getcwd())\n```",  # banned import
    ],
    "strings": [
        "```python\nprint('-'.join(['a', 'b', 'c']))\n```",  # a-b-c: never predicted
        "```python\nwhile True:\n    pass\n```",  # never ends
        "no program here",
        "```python\nx = 3\n```",  # prints nothing
    ],
}
ANSWERS = {
    "10": ["[OUTPUT]10[/OUTPUT]"] * 4,
    "91": ["[OUTPUT]91[/OUTPUT]", "[OUTPUT] 91 [/OUTPUT]", "[OUTPUT]90[/OUTPUT]", "91"],
}


def replies(prompt: str, n: int) -> list[str]:
    for topic, programs in PROGRAMS.items():
        if f"Topic: {topic}." in prompt:
            return programs[:n]
    for output, answers in ANSWERS.items():
        key = "sum(range(5))" if output == "10" else "total += i * i"
        if key in prompt:
            return answers[:n]
    return ["[OUTPUT]a,b,c[/OUTPUT]"] * n  # wrong for 'a-b-c'


@pytest.fixture(scope="module")
def sandbox():
    require_bwrap()
    with make_sandbox(SandboxConfig(backend="bwrap", workers=2)) as sb:
        yield sb


def test_a_round_gates_grades_rewards_and_splits_advantages_by_role(sandbox, tiny_model):
    _, tokenizer = tiny_model
    engine = QueueEngine(tokenizer, replies)
    settings = CodeGameSettings(prompts_per_step=2, programs_per_prompt=4, predictions_per_program=4)
    runner = CodeGameRunner(engine, engine, tokenizer, SamplingParams(max_new_tokens=64), sandbox, settings)
    rnd = runner.play(["sums", "strings"])
    reasons = [g.reason for g in rnd.gates]
    assert reasons == [
        "ok", "ok", "nondeterministic", "banned_import", "ok", "step_budget", "no_program", "no_output",
    ] or reasons[5] == "timeout"  # fmt: skip
    assert [g.output.strip() for g in rnd.gates[:2]] == ["10", "91"]
    assert rnd.success[:2] == [1.0, 0.5] and rnd.success[4] == 0.0 and rnd.success[2] is None
    # learnability 4p(1-p): 0 for the always-predicted and the never-predicted program, 1 at p=1/2
    # refused: -0.5 when the program parses (the ladder), -1 for "no program here"
    assert [w.reward for w in rnd.writers] == [0.0, 1.0, -0.5, -0.5, 0.0, -0.5, -1.0, -0.5]
    preds = [t.reward for t in rnd.predictions if t.program == 1]
    assert preds == [1.0, 1.0, 0.0, -0.5]  # " 91 " normalises; 90 is wrong; no block is below wrong
    batch = round_batch(rnd, settings, (WRITER, PREDICTOR), engine.pad_token_id)
    assert batch.batch_size == 8 + 3 * 4 and batch.roles[:8] == ["writer"] * 8
    assert set(batch.role_ids[8:].tolist()) == {PREDICTOR}
    # per role and group: the 'sums' writers against each other, the predictions of one program
    sums = batch.advantages[:4]
    assert sums[1] > sums[0] > sums[2] and torch.isclose(sums[2], sums[3])
    assert batch.advantages[8:12].abs().sum() == 0  # program 0: all predictions right, no signal
    assert (batch.advantages[12:14] > 0).all() and (batch.advantages[14:16] < 0).all()
    records = batch.records
    assert records[1]["program"].startswith("total = 0") and records[1]["true_output"].strip() == "91"
    assert records[13]["prediction"] == "91" and records[13]["correct"]
    stats = round_stats(rnd, settings.reward_mode)
    assert stats["game/validity_rate"] == pytest.approx(3 / 8)
    assert stats["game/rejected/banned_import"] == pytest.approx(1 / 8)
    # writers: both topics' groups hold different rewards; predictions: program 0's four are all
    # right (no signal), program 1's and program 4's ... differ / are all wrong
    assert stats["game/writer_groups_with_signal"] == 1.0
    assert stats["game/predictor_groups_with_signal"] == pytest.approx(1 / 3)
    assert stats["reward/successful_predictions_count"] == 4 + 2
    # the original game's writer reward: +1 for a wrong prediction, -1 for a right one
    assert stats["reward/avg_batch_reward"] == pytest.approx((-1.0 + 0.0 + 1.0) / 3)


def test_an_output_holding_the_policys_special_token_is_refused_in_a_round(sandbox, tiny_model):
    """A program that prints ``<|im_end|>`` (built from pieces) poses a question no prediction can
    answer (the tokenizer makes the text the end-of-turn token): the gate refuses it as
    ``unanswerable_output`` with the policy's own special tokens, and the writer gets -0.5."""
    _, tokenizer = tiny_model
    assert "<|im_end|>" in special_texts(tokenizer)
    programs = [
        "```python\nprint('<|im_' + 'end|>')\n```",
        "```python\nprint('ok', '<|endoftext|>'[:2])\n```",  # '<|' alone is ordinary text
    ]
    engine = QueueEngine(tokenizer, lambda prompt, n: programs[:n] if "Topic:" in prompt else ["x"] * n)
    settings = CodeGameSettings(prompts_per_step=1, programs_per_prompt=2, predictions_per_program=2)
    runner = CodeGameRunner(engine, engine, tokenizer, SamplingParams(max_new_tokens=64), sandbox, settings)
    rnd = runner.play(["tokens"])
    assert [g.reason for g in rnd.gates] == ["unanswerable_output", "ok"]
    assert rnd.writers[0].reward == -0.5


def test_a_predictor_of_known_strength_gives_writers_non_constant_rewards(sandbox, tiny_model):
    """Four valid programs per group; the predictor gets program i right with probability q_i.
    Learnability (the default) ranks them; zero-sum against an always-wrong predictor (a weak
    policy's usual case) pays every program the same and leaves the group without signal."""
    _, tokenizer = tiny_model
    programs = [f"```python\nprint({i} * 7 + 1)\n```" for i in range(4)]
    strength = [0.0, 0.25, 0.5, 1.0]
    rng = random.Random(0)

    def predictor(q_of: dict[str, float]):
        def reply(prompt: str, n: int) -> list[str]:
            if "Topic:" in prompt:
                return programs[:n]
            i = next(i for i in range(4) if f"print({i} * 7 + 1)" in prompt)
            right = f"[OUTPUT]{i * 7 + 1}[/OUTPUT]"
            return [right if rng.random() < q_of[i] else "[OUTPUT]-1[/OUTPUT]" for _ in range(n)]

        return reply

    def writer_rewards(mode: str, q) -> list[float]:
        engine = QueueEngine(tokenizer, predictor(q))
        settings = CodeGameSettings(prompts_per_step=1, predictions_per_program=8, reward_mode=mode)
        runner = CodeGameRunner(
            engine, engine, tokenizer, SamplingParams(max_new_tokens=32), sandbox, settings
        )
        rnd = runner.play(["sums"])
        assert all(g.valid for g in rnd.gates)
        return [w.reward for w in rnd.writers]

    learn = writer_rewards("learnability", dict(enumerate(strength)))
    assert len(set(learn)) > 1 and learn[0] == 0.0 and learn[3] == 0.0 and max(learn) == learn[2]
    azr = writer_rewards("azr", dict(enumerate(strength)))
    assert len(set(azr)) > 1 and azr[0] == 0.0 and azr[3] == 0.0
    weak = writer_rewards("zero_sum", dict.fromkeys(range(4), 0.0))
    assert weak == [1.0] * 4  # every program "unpredictable": the degenerate case


def test_the_module_trains_from_its_shipped_config(tmp_path):
    from tests.modules.test_grpo_module import cli, read_metrics, undocumented_metrics

    run = tmp_path / "code_game"
    cli(
        "fit", "--config", "configs/grpo_code_game.yaml",
        "--model.init_args.model.name_or_path", "tiny-random",
        "--model.init_args.sampling.max_new_tokens", "12",
        "--model.init_args.game.prediction_max_new_tokens", "6",
        "--model.init_args.game.prompts_per_step", "2",
        "--model.init_args.game.programs_per_prompt", "2",
        "--trainer.max_steps", "2",
        "--trainer.default_root_dir", str(run),
        "--trainer.logger", "lightning.pytorch.loggers.CSVLogger",
        "--trainer.logger.save_dir", str(run),
        "--trainer.logger.name", "",
    )  # fmt: skip
    rows = [r for r in read_metrics(run) if r.get("train/game/validity_rate")]
    assert len(rows) == 2
    names = [k for k, v in rows[0].items() if v not in (None, "") and k not in ("epoch", "step")]
    assert "reward/avg_batch_reward" in names and "reward/successful_predictions_count" in names
    assert not undocumented_metrics(names)
    version = next(run.glob("version_*"))
    assert (version / "code_game.jsonl").is_file() and (version / "hf_model").is_dir()


def test_a_frozen_opponent_plays_the_other_role_and_only_the_policys_role_trains(tmp_path):
    from lightning import Trainer

    from lit_codeRL.modules.code_game import CodeGameModule

    module = CodeGameModule(
        model={"name_or_path": "tiny-random"},
        game={"prompts_per_step": 2, "programs_per_prompt": 2, "predictions_per_program": 2, "max_rounds": 2},
        opponent={"kind": "frozen", "role": "predictor"},
        sandbox={"workers": 1},
        sampling={"max_new_tokens": 8},
        save_hf_model=False,
    )
    assert module.roles == (PREDICTOR,) and module.opponent_model is not None
    assert not any(p.requires_grad for p in module.opponent_model.parameters())
    assert module.opponent_model not in list(module.modules())  # not trained, not checkpointed
    frozen = {k: v.clone() for k, v in module.opponent_model.state_dict().items()}
    with pytest.raises(RuntimeError, match="2 rounds without a turn to train"):
        # a random writer writes no valid program: the policy (predictor) has nothing to answer
        Trainer(accelerator="cpu", max_steps=1, logger=False, enable_checkpointing=False,
                enable_progress_bar=False, default_root_dir=tmp_path).fit(module)  # fmt: skip
    assert all(torch.equal(frozen[k], v) for k, v in module.opponent_model.state_dict().items())
    assert module.sandbox is None  # the failed run released its sandbox workers
