"""Rounds of the code-output game: writers write programs, the sandbox admits them, predictors
predict their output, and every turn becomes a training row with its role's advantage.

Why a runner of its own rather than the turn-based game protocol: a round is not two players
alternating in one game. A writer turn is followed by **K** predictions of its program (the
learnability reward needs a success rate, not one outcome), and the two roles never share a
context (the predictor sees the program, not the writer's prompt). So a round is two batched
generation passes: ``P`` writer prompts x ``G`` programs each, then ``K`` predictions for each
program the gate admits (``envs/code_game/gate.py``). Each row is one turn (its own prompt, then
its action), as SPIRAL's rows are; the advantages are group-relative *per role*
(prime-rl's hierarchical GRPO): a writer row against the other ``G - 1`` programs written for the
same prompt, a predictor row against the other ``K - 1`` predictions of the same program.

Rewards (``envs/code_game/rewards.py``): a predictor gets 1 for a correct prediction, 0 for a
wrong one and -0.5 for no ``[OUTPUT]`` block (``zero_sum``: +1 / -1 / -1); a writer gets
``writer_reward(p)`` of its program's success rate ``p`` over the K predictions (default
``learnability``: ``4 p (1 - p)``), -0.5 when the gate refused a program that parses and -1 when the
answer held no program (``refusal_reward``; no prediction turn then), nothing when the sandbox
itself failed (the row is masked out of the loss).

Who plays: in self-play the policy writes and predicts and both roles train; against a fixed
opponent (a frozen copy of the initial policy, or another model) the policy plays one role and
only its rows train.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.utils.data import IterableDataset

from lit_codeRL.algorithms.grpo import group_advantages
from lit_codeRL.envs.code_game import (
    NO_PROGRAM_REWARD,
    REASONS,
    GateResult,
    GateSettings,
    extract_program,
    gate_programs,
    parse_prediction,
    prediction_correct,
    predictor_reward,
    refusal_reward,
    writer_reward,
)
from lit_codeRL.policy.engine import GenerationEngine, SamplingParams
from lit_codeRL.policy.special_tokens import special_texts
from lit_codeRL.rollout.chat import ChatFormat
from lit_codeRL.rollout.trajectory import Segment, TrajectoryBatch

WRITER_INSTRUCTION = (
    "We are playing a game. You write a short Python program that prints something; the other "
    "player reads the program and tries to predict its exact output. You win when the prediction "
    "is wrong, but only a valid program counts: it must be deterministic, use {imports}, read no "
    "input and no files, finish within a fraction of a second and print at most {max_output} "
    "characters.\nTopic: {theme}.\nWrite the program (at most 15 lines) in a ```python code block."
)
"""The writer's user message; ``{imports}``, ``{max_output}`` and ``{theme}`` are filled in."""

PREDICTOR_INSTRUCTION = (
    "What does this Python program print?\n```python\n{program}\n```\n"
    "Reason step by step if you need to, then give the exact output between [OUTPUT] and [/OUTPUT]."
)
"""The predictor's user message; ``{program}`` is the writer's program."""

THEMES = (
    "string methods",
    "list slicing",
    "integer arithmetic",
    "a loop with a counter",
    "updating a dictionary",
    "sorting with a key",
    "nested loops",
    "a recursive function",
    "string formatting",
    "list comprehensions",
    "boolean logic",
    "integer division and remainders",
)
"""Topics the writer prompts draw from (so that a batch's groups differ)."""

WRITER, PREDICTOR = 0, 1
ROLE_NAMES = ("writer", "predictor")


@dataclass
class CodeGameSettings:
    """The game: how many turns a round has, how they are rewarded, what a valid program is."""

    prompts_per_step: int = 4
    """Writer prompts per round (each a topic)."""
    programs_per_prompt: int = 4
    """Programs written per writer prompt: the writers' group size G."""
    predictions_per_program: int = 4
    """Predictions of each admitted program: the predictors' group size K, and the resolution of
    the success rate the writer's reward is computed from."""
    reward_mode: str = "learnability"
    """Writer reward from its program's success rate p: ``learnability`` (``4 p (1 - p)``: 0 when the
    predictor always or never succeeds, 1 at p = 1/2), ``azr`` (``1 - p``, 0 at p = 0 or 1),
    ``zero_sum`` (the original game: +1 for a wrong prediction, -1 for a right one, averaged over
    the K predictions; predictors +1 / -1 too). See ``envs/code_game/rewards.py`` for why
    ``learnability`` is the default."""
    invalid_program_reward: float | None = None
    """The writer's reward for a program that parses but that the gate refused (no prediction turn
    follows). ``None``: -0.5 (``INVALID_PROGRAM_REWARD``), -1 in ``zero_sum`` (where -0.5 would pay
    more than a program the predictor always gets right)."""
    no_program_reward: float = NO_PROGRAM_REWARD
    """The writer's reward for an answer with no program in it: no closed code block, blank, does
    not parse, too long. Below ``invalid_program_reward`` so a writer group of prose and broken
    programs still has signal (``envs/code_game/rewards.py``)."""
    unparsed_prediction_reward: float | None = None
    """The predictor's reward for an answer without a ``[OUTPUT]...[/OUTPUT]`` block. ``None``:
    -0.5 (a wrong answer earns 0), -1 in ``zero_sum`` (as a wrong one)."""
    gate: GateSettings = field(default_factory=GateSettings)
    """What makes a program valid: allowed imports, time and traced-step budgets, output size."""
    themes: list[str] = field(default_factory=lambda: list(THEMES))
    """Topics of the writer prompts, drawn at random per prompt."""
    writer_instruction: str = WRITER_INSTRUCTION
    predictor_instruction: str = PREDICTOR_INSTRUCTION
    prediction_max_new_tokens: int | None = None
    """Token limit of a prediction (``None``: the sampling's ``max_new_tokens``)."""
    max_rounds: int = 10
    """Rounds played at most for one batch when a round has no turn of a trained role (the policy
    predicts, and the opponent's programs were all refused); then it is an error."""
    system_prompt: str | None = None

    def __post_init__(self) -> None:
        if isinstance(self.gate, dict):
            self.gate = GateSettings(**self.gate)
        for name in ("prompts_per_step", "programs_per_prompt", "predictions_per_program"):
            if getattr(self, name) < 1:
                raise ValueError(f"game.{name} must be >= 1")
        if self.reward_mode not in ("learnability", "azr", "zero_sum"):
            raise ValueError(
                f"game.reward_mode must be learnability, azr or zero_sum, got {self.reward_mode!r}"
            )
        if not self.themes:
            raise ValueError("game.themes must not be empty")
        if "{program}" not in self.predictor_instruction or "{theme}" not in self.writer_instruction:
            raise ValueError("the instructions need their {program} / {theme} placeholders")


@dataclass
class Turn:
    """One generated turn: its prompt, its exact tokens and what came of it."""

    role: int
    prompt_ids: list[int]
    action_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    group: int
    """Writer: the writer prompt's index; predictor: the program's index in the round."""
    program: int = -1
    """The index in the round of the program this turn wrote or predicted."""
    reward: float = 0.0
    valid: bool = True
    """False: no reward (the sandbox failed on the program), out of the loss."""
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Round:
    """What one round produced: every turn, each program's gate result and success rate."""

    writers: list[Turn]
    predictions: list[Turn]
    programs: list[str | None]
    gates: list[GateResult]
    success: list[float | None]
    """Per program: share of correct predictions (``None``: no prediction turn)."""
    stats: dict[str, float] = field(default_factory=dict)


class CodeGameRunner:
    """Plays rounds (see the module docstring).

    Args:
        writer_engine, predictor_engine: Who writes and who predicts (the same engine in self-play).
        tokenizer: The policy's tokenizer (the opponent shares it: a frozen copy of the policy, or
            a model of the same family).
        sampling: Sampling of both roles (predictions: ``settings.prediction_max_new_tokens``).
        sandbox: Runs the gate.
        settings: The game.
    """

    def __init__(
        self,
        writer_engine: GenerationEngine,
        predictor_engine: GenerationEngine,
        tokenizer: Any,
        sampling: SamplingParams,
        sandbox: Any,
        settings: CodeGameSettings,
    ) -> None:
        self.writer_engine, self.predictor_engine = writer_engine, predictor_engine
        self.sampling, self.sandbox, self.settings = sampling, sandbox, settings
        self.chat = ChatFormat(tokenizer, settings.system_prompt)
        self.special_texts = special_texts(tokenizer)
        """The special tokens' texts: an output holding one is no question (the gate refuses it)."""
        imports = settings.gate.allowed_imports
        self._imports = "no imports" if not imports else "no imports but " + ", ".join(imports)
        self.prediction_sampling = SamplingParams(
            max_new_tokens=settings.prediction_max_new_tokens or sampling.max_new_tokens,
            temperature=sampling.temperature,
            top_p=sampling.top_p,
            top_k=sampling.top_k,
        )

    def draw_themes(self, generator: torch.Generator | None = None) -> list[str]:
        """A round's topics: ``prompts_per_step`` drawn from ``game.themes`` with ``generator``."""
        s = self.settings
        picks = torch.randint(0, len(s.themes), (s.prompts_per_step,), generator=generator).tolist()
        return [s.themes[i] for i in picks]

    def writer_prompt(self, theme: str) -> str:
        return self.settings.writer_instruction.format(
            imports=self._imports, max_output=self.settings.gate.max_output_chars, theme=theme
        )

    def predictor_prompt(self, program: str) -> str:
        return self.settings.predictor_instruction.replace("{program}", program.strip("\n"))

    def _generate(
        self,
        engine: GenerationEngine,
        prompts: list[str],
        n: int,
        sampling: SamplingParams,
        generator: torch.Generator | None,
        role: int,
        groups: list[int],
    ) -> list[Turn]:
        ids = [self.chat.prompt_ids(p) for p in prompts]
        padded, mask = engine.pad_prompts(ids)
        out = engine.generate(padded, mask, sampling, n, generator)
        turns = []
        for r in range(out.completion_ids.size(0)):
            length = int(out.completion_mask[r].sum())
            turns.append(
                Turn(
                    role=role,
                    prompt_ids=ids[r // n],
                    action_ids=out.completion_ids[r, :length].tolist(),
                    logprobs=out.logprobs[r, :length].tolist(),
                    text=out.texts[r],
                    finish_reason=out.finish_reasons[r] if out.finish_reasons else "stop",
                    group=groups[r // n],
                )
            )
        return turns

    def write(
        self, themes: Sequence[str], generator: torch.Generator | None = None
    ) -> tuple[list[Turn], list[str | None], list[GateResult], dict[str, float]]:
        """The round's first half: ``programs_per_prompt`` programs per theme, and the gate's
        verdict on each (``no_program`` where the answer held none). Returns the writer turns, the
        programs, the verdicts and the seconds spent (``generate_s``, ``gate_s``)."""
        s = self.settings
        t0 = time.perf_counter()
        writers = self._generate(
            self.writer_engine,
            [self.writer_prompt(t) for t in themes],
            s.programs_per_prompt,
            self.sampling,
            generator,
            WRITER,
            list(range(len(themes))),
        )
        stats = {"generate_s": time.perf_counter() - t0}
        for i, w in enumerate(writers):
            w.program = i
        programs = [extract_program(w.text) for w in writers]
        t0 = time.perf_counter()
        extracted = [i for i, p in enumerate(programs) if p is not None]
        gated = gate_programs(self.sandbox, [programs[i] for i in extracted], s.gate, self.special_texts)
        gates = [GateResult(False, "no_program", "", {"stage": "extract"}) for _ in writers]
        for i, result in zip(extracted, gated, strict=True):
            gates[i] = result
        stats["gate_s"] = time.perf_counter() - t0
        return writers, programs, gates, stats

    def predict(
        self,
        programs: Sequence[str],
        outputs: Sequence[str],
        groups: Sequence[int],
        generator: torch.Generator | None = None,
    ) -> list[Turn]:
        """``predictions_per_program`` predictions of each admitted program, graded against its
        true ``outputs`` (reward and ``info``: the parsed prediction, ``correct``, ``parsed``);
        ``groups``: each program's index in the round."""
        s = self.settings
        turns = self._generate(
            self.predictor_engine,
            [self.predictor_prompt(p) for p in programs],
            s.predictions_per_program,
            self.prediction_sampling,
            generator,
            PREDICTOR,
            list(groups),
        )
        true_output = dict(zip(groups, outputs, strict=True))
        for t in turns:
            t.program = t.group
            guess = parse_prediction(t.text)
            correct = prediction_correct(guess, true_output[t.group])
            t.reward = predictor_reward(
                correct, s.reward_mode, parsed=guess is not None, unparsed=s.unparsed_prediction_reward
            )
            t.info = {"prediction": guess, "correct": correct, "parsed": guess is not None}
        return turns

    def play(self, themes: Sequence[str], generator: torch.Generator | None = None) -> Round:
        s = self.settings
        writers, programs, gates, stats = self.write(themes, generator)
        admitted = [i for i, g in enumerate(gates) if g.valid]
        predictions: list[Turn] = []
        if admitted:
            t0 = time.perf_counter()
            predictions = self.predict(
                [programs[i] for i in admitted], [gates[i].output for i in admitted], admitted, generator
            )
            stats["generate_s"] += time.perf_counter() - t0
        success: list[float | None] = [None] * len(writers)
        for i in admitted:
            mine = [t for t in predictions if t.group == i]
            success[i] = sum(t.info["correct"] for t in mine) / len(mine)
        for i, (w, g) in enumerate(zip(writers, gates, strict=True)):
            w.info = {"program": programs[i], "gate": g.reason, "output": g.output if g.valid else ""}
            if g.reason == "sandbox_error":
                w.valid = False  # the infrastructure's failure, not the writer's: no reward
            elif not g.valid:
                w.reward = refusal_reward(
                    g.reason, s.reward_mode, invalid=s.invalid_program_reward, no_program=s.no_program_reward
                )
            else:
                w.reward = writer_reward(success[i], s.reward_mode)
                w.info["success_rate"] = success[i]
        stats["completion_tokens"] = float(sum(len(t.action_ids) for t in (*writers, *predictions)))
        return Round(writers, predictions, programs, gates, success, stats)


def role_advantages(turns: Sequence[Turn], group_size: int) -> torch.Tensor:
    """``[len(turns)]`` group-relative advantages (std-scaled) of one role's turns, laid out in
    groups of ``group_size`` consecutive turns; rows without a reward get 0."""
    if not turns:
        return torch.zeros(0)
    rewards = torch.tensor([t.reward for t in turns], dtype=torch.float32)
    valid = torch.tensor([t.valid for t in turns])
    return group_advantages(rewards, group_size, "group", valid=valid)


def round_stats(rnd: Round, mode: str) -> dict[str, float]:
    """What a round says about the game: validity and why programs were refused, prediction
    accuracy, lengths, rewards; also under the original game's names (``reward/*``)."""
    writers, preds = rnd.writers, rnd.predictions
    graded = [w for w in writers if w.valid]
    admitted = [g for g in rnd.gates if g.valid]
    out = {
        "game/validity_rate": len(admitted) / max(len(graded), 1),
        "game/prediction_accuracy": sum(t.info.get("correct", False) for t in preds) / max(len(preds), 1),
        "game/prediction_format_rate": sum(t.info.get("parsed", False) for t in preds) / max(len(preds), 1),
        "game/programs": float(len(writers)),
        "game/predictions": float(len(preds)),
        "game/sandbox_errors": float(len(writers) - len(graded)),
        "game/writer_reward": sum(w.reward for w in graded) / max(len(graded), 1),
        "game/predictor_reward": sum(t.reward for t in preds) / max(len(preds), 1),
        "game/program_chars": sum(len(p) for p in rnd.programs if p)
        / max(sum(1 for p in rnd.programs if p), 1),
        "game/output_chars": sum(len(g.output) for g in admitted) / max(len(admitted), 1),
    }
    rates = [p for p in rnd.success if p is not None]
    # 4p(1-p) over the admitted programs whatever reward_mode pays: 0 while the predictor always
    # or never gets a program right, so it shows whether the writer's shaped reward can move
    out["game/learnability"] = sum(writer_reward(p, "learnability") for p in rates) / max(len(rates), 1)
    out["game/success_rate_std"] = float(torch.tensor(rates).std()) if len(rates) > 1 else 0.0
    # every reason every round, 0 included: a logger repeats a step metric's last value in the
    # steps that do not log it (Lightning does), which would count old refusals again
    refused = Counter(g.reason for g in rnd.gates if not g.valid)
    for reason in (r for r in REASONS if r != "ok"):
        out[f"game/rejected/{reason}"] = refused[reason] / max(len(writers), 1)
    out["game/writer_groups_with_signal"] = _share_with_signal(graded)
    out["game/predictor_groups_with_signal"] = _share_with_signal(preds)
    # the original design's names: the writer's +-1 reward of the zero-sum game, and the count of
    # correct predictions in the batch
    zero_sum = [writer_reward(p, "zero_sum") for p in rates]
    out["reward/avg_batch_reward"] = sum(zero_sum) / max(len(zero_sum), 1)
    out["reward/successful_predictions_count"] = float(sum(t.info.get("correct", False) for t in preds))
    return out


def _share_with_signal(turns: Sequence[Turn]) -> float:
    """The share of the turns' groups whose rewards are not all equal (a group whose rewards are
    all equal has zero advantage: it teaches nothing)."""
    groups: dict[int, set[float]] = {}
    for t in turns:
        groups.setdefault(t.group, set()).add(t.reward)
    return sum(len(r) > 1 for r in groups.values()) / max(len(groups), 1)


class NoTrainedTurns(RuntimeError):
    """A round without a single turn of the roles the policy trains."""


def round_batch(
    rnd: Round, settings: CodeGameSettings, roles: Sequence[int], pad_token_id: int
) -> TrajectoryBatch:
    """The round's trained turns as rows (writers first, then predictions), each with its role's
    group-relative advantage; ``roles``: the roles the policy plays."""
    rows: list[Turn] = []
    advantages: list[torch.Tensor] = []
    if WRITER in roles:
        rows += rnd.writers
        advantages.append(role_advantages(rnd.writers, settings.programs_per_prompt))
    if PREDICTOR in roles and rnd.predictions:
        rows += rnd.predictions
        advantages.append(role_advantages(rnd.predictions, settings.predictions_per_program))
    if not rows:
        raise NoTrainedTurns("the round produced no turn of a trained role")
    groups = [t.group + (0 if t.role == WRITER else len(rnd.writers)) for t in rows]
    batch = TrajectoryBatch.from_segments(
        [[Segment(t.prompt_ids), Segment(t.action_ids, True, t.logprobs, 0)] for t in rows],
        pad_token_id,
        rewards=torch.tensor([t.reward for t in rows], dtype=torch.float32),
        group_ids=torch.tensor(groups, dtype=torch.long),
        roles=[ROLE_NAMES[t.role] for t in rows],
        role_ids=torch.tensor([t.role for t in rows], dtype=torch.long),
        valid=torch.tensor([t.valid for t in rows]),
        records=[turn_record(t, rnd) for t in rows],
    )
    batch.advantages = torch.cat(advantages)
    return batch


def turn_record(turn: Turn, rnd: Round) -> dict[str, Any]:
    """One row for logs and dumps: the role, the program, its true output and the prediction."""
    program_index = turn.program
    gate = rnd.gates[program_index]
    return {
        "role": ROLE_NAMES[turn.role],
        "reward": turn.reward,
        "valid": turn.valid,
        "completion": turn.text,
        "completion_tokens": len(turn.action_ids),
        "finished": turn.finish_reason != "length",
        "program": rnd.programs[program_index],
        "gate": gate.reason,
        "true_output": gate.output if gate.valid else "",
        "prediction": turn.info.get("prediction"),
        "correct": turn.info.get("correct"),
        "success_rate": rnd.success[program_index],
        "verdict": gate.reason
        if turn.role == WRITER
        else ("correct" if turn.info.get("correct") else "wrong"),
    }


class CodeGameDataset(IterableDataset):
    """Endless batches of code-game rows from the live policy (see the module docstring).

    Args:
        runner: Plays the rounds.
        roles: The roles the policy plays and trains (both in self-play).
        seed: Seed of topics and sampling (checkpointed).
    """

    def __init__(self, runner: CodeGameRunner, roles: Sequence[int], seed: int = 0) -> None:
        super().__init__()
        self.runner, self.roles = runner, tuple(roles)
        self.generator = torch.Generator().manual_seed(seed)
        self.rounds = 0
        self.last_round: Round | None = None

    def __iter__(self) -> Iterator[TrajectoryBatch]:
        while True:
            yield self.collect()

    def collect(self) -> TrajectoryBatch:
        s = self.runner.settings
        for attempt in range(s.max_rounds):
            rnd = self.runner.play(self.runner.draw_themes(self.generator), self.generator)
            self.rounds += 1
            self.last_round = rnd
            try:
                batch = round_batch(rnd, s, self.roles, self.runner.writer_engine.pad_token_id)
                break
            except NoTrainedTurns:
                if attempt == s.max_rounds - 1:
                    raise RuntimeError(
                        f"{s.max_rounds} rounds without a turn to train: the opponent's programs were all "
                        "refused (raise game.max_rounds, or train the writer)"
                    ) from None
        batch.stats.update(rnd.stats)
        batch.stats.update(round_stats(rnd, s.reward_mode))
        return batch

    def state_dict(self) -> dict[str, Any]:
        return {"generator": self.generator.get_state(), "rounds": self.rounds}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])
        self.rounds = int(state["rounds"])
