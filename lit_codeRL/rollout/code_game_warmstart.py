"""The code game's predictor warm start: behavioural cloning on (program, output) pairs the gate
itself produced, before self-play.

Why: self-play gives the predictor a signal only once some of its K predictions of a program are
right and some wrong. A small model that never answers in the ``[OUTPUT]...[/OUTPUT]`` format
(SmolLM2-135M: 0-3% of its predictions, ``docs/code_game.md``) earns -0.5 on every prediction, so
its groups are flat, and the writer's learnability reward ``4 p (1 - p)`` stays 0 for every
program. But the game already knows the answers: the gate runs every admitted program in the
sandbox and keeps what it printed (``GateResult.output``, the target the predictions are graded
against). Those pairs are demonstrations for free (CodeI/O's observation: execution traces are
supervision).

What it trains on, row by row (the trajectory record every module trains):

* the prompt: exactly the predictor's prompt in a round, through the runner's own
  ``predictor_prompt`` and chat template (``CodeGameRunner.predict`` renders it the same way);
* the answer, the only trainable tokens: the true output in the format the grader parses
  (``envs/code_game/grading.py: format_prediction``, checked to grade as correct), then the
  end-of-turn token;
* where the policy also writes (self-play), the same pair as a writer row too
  (``rehearse_writer``): the writer's prompt for the program's topic, the program in its code
  fence. The policy is one network in both roles, and cloning nothing but short outputs taught
  SmolLM2-135M to answer the writer's prompt with one (no program passed the gate after 20 steps).

Where the pairs come from: ``rounds`` writer rounds of the game itself (whoever writes: the
policy in self-play, the opponent otherwise), every program the gate admitted with its output;
and, because a weak base writer admits few (4% of SmolLM2-135M's programs in its first steps),
``seed_programs`` programs drawn from templates (``envs/code_game/seeds.py``) and run through the
same gate. A held-out share (``eval_pairs``) measures the predictor before and after: its accuracy
and format rate over ``game.predictions_per_program`` sampled predictions each, as a round grades
them, and the NLL of the true answers.

The steps themselves are ``training/behaviour_cloning.py: nll_update`` on batches of a
``rollout/demonstrations.py: DemonstrationDataset`` (shuffled epochs, checkpointed position),
taken by ``CodeGameModule`` as the run's first ``steps`` training steps (as PPO's value
pre-training takes the first steps of a PPO run); this file holds the settings, the pairs and
their rows, and the state a resumed run needs.
"""

from __future__ import annotations

import random
import time
from dataclasses import asdict, dataclass
from typing import Any

import torch

from lit_codeRL.envs.code_game import format_prediction, gate_programs
from lit_codeRL.envs.code_game.seeds import seed_programs
from lit_codeRL.rollout.code_game import CodeGameRunner
from lit_codeRL.rollout.demonstrations import DemonstrationDataset, answer_text
from lit_codeRL.rollout.trajectory import Segment, TrajectoryBatch


@dataclass
class PredictorWarmStart:
    """Behavioural cloning of the predictor on (program, output) pairs the gate ran, before
    self-play (``rollout/code_game_warmstart.py``)."""

    steps: int = 0
    """Optimizer steps of the warm start (0: none). They are the run's first training steps and
    count toward ``trainer.max_steps``; self-play starts after them."""
    rounds: int = 4
    """Writer rounds (``game.prompts_per_step`` x ``game.programs_per_prompt`` programs each, by
    whoever writes) whose admitted programs, with the outputs the gate recorded, become pairs."""
    seed_programs: int = 64
    """Programs drawn from the built-in templates (``envs/code_game/seeds.py``, a few per topic) and
    run through the same gate, for a writer that admits too few (0: the writer's pairs only)."""
    max_pairs: int = 512
    """At most this many pairs, the writer's first."""
    eval_pairs: int = 16
    """Pairs held out of training (at most half of them): the predictor answers each one
    ``game.predictions_per_program`` times before the first and after the last warm-start step
    (accuracy, format rate, NLL of the true answer). 0: no evaluation."""
    batch_size: int = 8
    """Rows per optimizer step, drawn from the predictor's rows and (``rehearse_writer``) the
    writer's."""
    rehearse_writer: bool = True
    """Where the policy also writes (self-play): every pair is a writer row as well, the game's
    writer prompt for the program's topic and the program in its code fence, so that cloning
    short outputs does not teach the shared policy to answer the writer's prompt with one.
    Without them, 20 steps at 5e-5 left SmolLM2-135M answering writer prompts with lists of
    numbers, and the gate admitted none of its programs (``docs/code_game.md``)."""
    learning_rate: float | None = 1e-5
    """The policy's learning rate during the warm start (``BCModule``'s default); ``None``:
    ``optimizer.learning_rate``. Self-play's own schedule (warm-up, cosine) starts after the warm
    start, and AdamW's moments are reset between the two, as for a self-play run started from
    the warm start's weights."""

    def __post_init__(self) -> None:
        for name in ("steps", "rounds", "seed_programs", "max_pairs", "eval_pairs"):
            if getattr(self, name) < 0:
                raise ValueError(f"warm_start.{name} must be >= 0")
        if self.batch_size < 1:
            raise ValueError("warm_start.batch_size must be >= 1")
        if self.learning_rate is not None and not self.learning_rate > 0:
            raise ValueError(f"warm_start.learning_rate must be > 0 or null, got {self.learning_rate}")
        if self.steps and not (self.rounds or self.seed_programs):
            raise ValueError("warm_start needs pairs: set warm_start.rounds or warm_start.seed_programs")


@dataclass
class Pair:
    """A program the gate admitted and what it printed; ``theme``: the topic it was written (or
    drawn) for; ``source``: ``writer`` or ``seed``."""

    program: str
    output: str
    theme: str
    source: str


def harvest_pairs(
    runner: CodeGameRunner, settings: PredictorWarmStart, generator: torch.Generator, seed: int
) -> tuple[list[Pair], dict[str, float]]:
    """Pairs from ``settings.rounds`` writer rounds and ``settings.seed_programs`` seed programs,
    every one admitted by the game's gate (its output is the gate's), distinct programs only,
    at most ``max_pairs``; and what harvesting saw (programs written, admitted, seconds)."""
    pairs: list[Pair] = []
    seen: set[str] = set()
    written = admitted = 0
    t0 = time.perf_counter()

    def add(program: str, output: str, theme: str, source: str) -> None:
        # an output no answer can state (an [OUTPUT] marker in it) cannot be a demonstration
        if program not in seen and format_prediction(output) is not None:
            seen.add(program)
            pairs.append(Pair(program, output, theme, source))

    for _ in range(settings.rounds):
        themes = runner.draw_themes(generator)
        writers, programs, gates, _ = runner.write(themes, generator)
        written += len(programs)
        for turn, program, gate in zip(writers, programs, gates, strict=True):
            if gate.valid and program is not None:
                admitted += 1
                add(program, gate.output, themes[turn.group], "writer")
    seeds = seed_programs(settings.seed_programs, seed) if settings.seed_programs else []
    verdicts = gate_programs(
        runner.sandbox, [program for _, program in seeds], runner.settings.gate, runner.special_texts
    )
    for (theme, program), gate in zip(seeds, verdicts, strict=True):
        if gate.valid:
            add(program, gate.output, theme, "seed")
    pairs = pairs[: settings.max_pairs]
    stats = {
        "writer_programs": float(written),
        "writer_admitted": float(admitted),
        "seed_programs": float(len(seeds)),
        "harvest_s": time.perf_counter() - t0,
    }
    return pairs, stats


def predictor_rows(runner: CodeGameRunner, pairs: list[Pair]) -> list[list[Segment]]:
    """One row per pair: the predictor's prompt exactly as a round renders it, then the trainable
    answer (:func:`~lit_codeRL.envs.code_game.grading.format_prediction`) and end-of-turn."""
    tokenizer = runner.chat.tokenizer
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    rows = []
    for pair in pairs:
        answer = format_prediction(pair.output)
        if answer is None:
            raise ValueError(f"no answer states the output {pair.output!r}")
        prompt = runner.chat.prompt_ids(runner.predictor_prompt(pair.program))
        ids = tokenizer(answer, add_special_tokens=False)["input_ids"] + eos
        rows.append([Segment(prompt), Segment(ids, trainable=True, turn=0)])
    return rows


def writer_rows(runner: CodeGameRunner, pairs: list[Pair]) -> list[list[Segment]]:
    """One row per pair for the writer (``rehearse_writer``): the game's writer prompt for the
    pair's topic, then the trainable program in the fence the prompt asks for and end-of-turn
    (``extract_program`` reads the program back)."""
    tokenizer = runner.chat.tokenizer
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    rows = []
    for pair in pairs:
        prompt = runner.chat.prompt_ids(runner.writer_prompt(pair.theme))
        ids = tokenizer(answer_text(pair.program), add_special_tokens=False)["input_ids"] + eos
        rows.append([Segment(prompt), Segment(ids, trainable=True, turn=0)])
    return rows


class PredictorWarmStarter:
    """The warm start's pairs, its batches and its progress (checkpointed: ``state_dict``).

    Args:
        runner: The game's runner (writer rounds, the gate, the predictor's prompt and sampling).
        settings: The warm start.
        seed: Seed of the writer rounds, the seed programs, the held-out split and the order.
        pad_token_id: Padding of the batches.
        writes: Whether the policy also plays the writer (then ``rehearse_writer`` applies).
    """

    def __init__(
        self,
        runner: CodeGameRunner,
        settings: PredictorWarmStart,
        seed: int,
        pad_token_id: int,
        writes: bool = False,
    ) -> None:
        self.runner, self.settings, self.seed, self.pad_token_id = runner, settings, seed, pad_token_id
        self.rehearse = settings.rehearse_writer and writes
        self.generator = torch.Generator().manual_seed(seed)
        self.pairs: list[Pair] | None = None
        """Training pairs (``None``: not harvested yet)."""
        self.held_out: list[Pair] = []
        self.steps_done = 0
        self.dataset: DemonstrationDataset | None = None
        self._order: dict[str, Any] | None = None

    @property
    def done(self) -> bool:
        return self.steps_done >= self.settings.steps

    def harvest(self) -> dict[str, float]:
        """Harvest the pairs and hold out the evaluation share; returns what was harvested."""
        pairs, stats = harvest_pairs(self.runner, self.settings, self.generator, self.seed)
        if not pairs:
            raise RuntimeError(
                f"the predictor's warm start found {len(pairs)} pairs ({stats['writer_admitted']:.0f} of "
                f"{stats['writer_programs']:.0f} written programs admitted): raise warm_start.rounds "
                "or warm_start.seed_programs"
            )
        random.Random(self.seed).shuffle(pairs)
        held = min(self.settings.eval_pairs, len(pairs) // 2)
        self.held_out, self.pairs = pairs[:held], pairs[held:]
        stats.update(
            pairs=float(len(self.pairs)),
            rows=float(len(self.pairs) * (2 if self.rehearse else 1)),
            held_out=float(held),
            pairs_from_writer=float(sum(p.source == "writer" for p in pairs)),
            pairs_from_seeds=float(sum(p.source == "seed" for p in pairs)),
        )
        return stats

    def next_batch(self) -> TrajectoryBatch:
        """The next ``batch_size`` training rows (shuffled epochs over the pairs)."""
        if self.pairs is None:
            raise RuntimeError("harvest() first")
        if self.dataset is None:
            self.dataset = DemonstrationDataset(
                self.rows(), self.settings.batch_size, self.pad_token_id, self.seed
            )
            if self._order is not None:
                self.dataset.load_state_dict(self._order)
        return self.dataset.next_batch()

    def rows(self) -> list[list[Segment]]:
        """The training rows: a predictor row per pair, then (``rehearse_writer``) a writer row
        per pair; the batches draw from all of them in shuffled epochs."""
        assert self.pairs is not None
        rows = predictor_rows(self.runner, self.pairs)
        return rows + writer_rows(self.runner, self.pairs) if self.rehearse else rows

    def held_out_batch(self) -> TrajectoryBatch:
        """Every held-out pair as a row (the NLL of the true answers)."""
        rows = predictor_rows(self.runner, self.held_out)
        return TrajectoryBatch.from_segments(
            rows, self.pad_token_id, rewards=torch.zeros(len(rows)), group_ids=torch.arange(len(rows))
        )

    def evaluate(self) -> dict[str, float]:
        """The predictor on the held-out programs, as a round plays and grades it: ``accuracy``
        and ``format_rate`` (an ``[OUTPUT]`` block) over ``game.predictions_per_program``
        predictions each, ``answer_tokens`` (their mean length)."""
        pairs = self.held_out
        turns = self.runner.predict(
            [p.program for p in pairs], [p.output for p in pairs], list(range(len(pairs))), self.generator
        )
        n = max(len(turns), 1)
        return {
            "accuracy": sum(t.info["correct"] for t in turns) / n,
            "format_rate": sum(t.info["parsed"] for t in turns) / n,
            "answer_tokens": sum(len(t.action_ids) for t in turns) / n,
        }

    def state_dict(self) -> dict[str, Any]:
        return {
            "generator": self.generator.get_state(),
            "steps_done": self.steps_done,
            "pairs": None if self.pairs is None else [asdict(p) for p in self.pairs],
            "held_out": [asdict(p) for p in self.held_out],
            "order": self.dataset.state_dict() if self.dataset is not None else self._order,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.generator.set_state(state["generator"])
        self.steps_done = int(state["steps_done"])
        self.pairs = None if state["pairs"] is None else [Pair(**p) for p in state["pairs"]]
        self.held_out = [Pair(**p) for p in state["held_out"]]
        self.dataset, self._order = None, state["order"]


__all__ = [
    "Pair",
    "PredictorWarmStart",
    "PredictorWarmStarter",
    "harvest_pairs",
    "predictor_rows",
    "writer_rows",
]
