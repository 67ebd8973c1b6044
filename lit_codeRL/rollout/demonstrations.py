"""Demonstrations for behavioural cloning, laid out as the same trajectory record rollouts use.

Three kinds of source (``DemonstrationSettings.source``):

* **a problem source** (``embedded``, an MBPP file or directory, seed JSON, ``humaneval``...): each
  problem with a reference solution becomes one row, its prompt rendered exactly as rollouts
  render it (env observation -> chat template) and its answer in the code fence rollouts are
  asked for, ended by the end-of-turn token;
* **SWE or debugging tasks** (``swe``, ``swe:<file or dataset>``, ``debug``, ``debug:<file>``):
  each task's reference trajectory, derived from its gold fix (``envs/swe/reference.py``,
  ``envs/debug/reference.py``: run the tests, look at the code around each change, make it with a
  targeted edit, run the tests again, submit), played for real in the env that
  ``DemonstrationSettings.env`` configures (the RL run's settings: the prompt and every
  observation are the env's own), kept only when its grade resolves the task (the others are
  dropped and counted in one warning). A row holds exactly the tokens an RL rollout of the same
  text holds (:func:`episode_segments`): the actions trainable, the observations masked;
* **a rollout dump** (``rollouts.jsonl`` of any lit-coderl run, single- or multi-turn): rows
  rebuilt from the saved token ids, trainable exactly on the spans the policy wrote (observations
  stay masked), optionally only those with ``reward >= min_reward`` (filtered BC / rejection
  sampling fine-tuning).
"""

from __future__ import annotations

import json
import logging
import random
from collections.abc import Iterator
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

import torch
from torch.utils.data import IterableDataset

from lit_codeRL.envs.reference import ReferenceEpisode, ends_at_stop
from lit_codeRL.envs.settings import EnvSettings
from lit_codeRL.errors import ConfigError, listed
from lit_codeRL.problems import Problem
from lit_codeRL.problems.prompts import format_prompt
from lit_codeRL.rollout.chat import ChatFormat
from lit_codeRL.rollout.prompts import ProblemSettings, load_problem_set
from lit_codeRL.rollout.reference_cache import cached_episodes
from lit_codeRL.rollout.trajectory import Segment, TrajectoryBatch

logger = logging.getLogger(__name__)


@dataclass
class DemonstrationSettings:
    """Where demonstrations come from and which to keep."""

    source: str = "embedded"
    """A problem source with reference solutions (``embedded``, an MBPP file/dir, seed JSON,
    ``humaneval``), SWE or debugging tasks whose reference trajectories are played (``swe``,
    ``swe:<file>``, ``debug``, ``debug:<file>``), or a ``rollouts.jsonl`` dump of a lit-coderl run."""
    split: str = "train"
    """Split of a problem source (MBPP: train = task ids 601-974)."""
    limit: int | None = None
    """Use only the first ``limit`` demonstrations (SWE and debugging sources: play only the first
    ``limit`` tasks; a task's recovery trajectory is a row beside its reference one)."""
    min_reward: float | None = None
    """Rollout dumps: keep only episodes with at least this return (``None``: all)."""
    max_length: int = 1024
    """Drop demonstrations longer than this many tokens (prompt included)."""
    system_prompt: str | None = None
    """System message of rendered prompts (as in ``problems.system_prompt`` of the RL run)."""
    num_shown_tests: int = 1
    """Tests shown in rendered prompts (as in the RL run)."""
    also: list[str] = field(default_factory=list)
    """More sources whose demonstrations join ``source``'s, read with the same settings (e.g.
    ``debug:mbpp:<data>`` with ``also: [swe:<tasks.jsonl>]``: one BC over debugging and SWE
    trajectories, each played in its own env). ``limit`` applies to each source."""
    recoveries: float = 0.0
    """Debugging sources: the fraction of tasks (chosen by a hash of the task id) that also get a
    recovery trajectory: a wrong edit of the fix's lines (one mutation of the fixed code; a masked
    action, context and not a target), the tests seen failing, then the fix. Trajectories of
    fixes alone never show a failed attempt, and BC on them answers failing tests by submitting.
    Only a fix that is one edit of one short file has one (``envs/debug/reference.py``)."""
    recoveries_elsewhere: float = 0.0
    """Debugging sources: the fraction of recovery trajectories (another hash of the task id)
    whose wrong edit is of another line than the fix's: the tests seen failing, that line changed
    back, then the fix. Same-line recoveries teach a failed edit to be made again on the same
    lines; these, that it may have been in the wrong place."""
    misquotes: float = 0.0
    """SWE and debugging sources: the fraction of tasks (by another hash of the task id) that also
    get a misquote trajectory: the first change tried with a quote of the lines that has one line
    written wrong (spacing, a letter, quote marks, indentation: a masked action), the tool's
    refusal showing the file's closest lines, then the change quoting them. BC on fixes alone
    never sees a refused quote, and 36 of 81 SWE ``replace`` commands of the H200 run misquoted.
    Only a task whose first change is a quote-based replace has one (``misquote_actions`` of
    ``envs/*/reference.py``)."""
    explain: bool = False
    """SWE and debugging sources: each edit's lead-in first names the bug, the smallest changed
    span and what it should be (``In line 7, `//` should be `%`.``; ``envs/reference.py``'s
    ``edit_reason``), so the policy imitates deciding the change before it writes the line."""
    cache: bool = True
    """SWE and debugging sources: reuse trajectories played before for the same tasks, env
    settings, recovery fraction and env code (``rollout/reference_cache.py``, under
    ``$LIT_CODERL_SYNTH_CACHE``); playing them runs each task's tests several times."""
    env: EnvSettings = field(default_factory=EnvSettings)
    """SWE and debugging sources: the env the reference trajectories are played in; only its
    ``swe`` or ``debug`` block is read (``name`` and the turn limits are not). Give it the RL run's
    ``env`` block: the prompt and every observation (the tools in the prompt, the output limits,
    the tool preset) are the env's own, so a run with other settings would train on text its
    policy never sees."""

    def __post_init__(self) -> None:
        for name in ("recoveries", "recoveries_elsewhere", "misquotes"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ConfigError(f"demonstrations.{name} must be in [0, 1], got {getattr(self, name)}")
        if isinstance(self.env, dict):  # from a checkpoint's plain hparams
            self.env = EnvSettings(**self.env)


def is_rollout_dump(path: Path) -> bool:
    if not (path.is_file() and path.suffix == ".jsonl"):
        return False
    with path.open() as f:
        first = f.readline()
    try:
        row = json.loads(first)
    except json.JSONDecodeError:
        return False
    return isinstance(row, dict) and "input_ids" in row and "trainable_spans" in row


def answer_text(solution: str) -> str:
    """A reference solution in the fence the prompt asks for (``format_prompt``'s last line)."""
    code = solution.replace("\r\n", "\n").strip("\n")
    return f"```python\n{code}\n```"


def problem_demonstrations(
    problems: list[Problem], chat: ChatFormat, num_shown_tests: int
) -> list[list[Segment]]:
    """One row per problem with a reference solution: prompt, then the answer and end-of-turn."""
    tokenizer = chat.tokenizer
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    rows = []
    for p in problems:
        if not p.reference_solution:
            continue
        prompt = chat.prompt_ids(format_prompt(p, num_shown_tests))
        answer = tokenizer(answer_text(p.reference_solution), add_special_tokens=False)["input_ids"] + eos
        rows.append([Segment(prompt), Segment(answer, trainable=True, turn=0)])
    return rows


def dump_demonstrations(path: Path, min_reward: float | None) -> list[list[Segment]]:
    """Rows rebuilt from a rollout dump: the prompt, then alternating trainable and masked spans."""
    rows = []
    with path.open() as f:
        for line_no, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                ids, spans = rec["input_ids"], rec["trainable_spans"]
            except (json.JSONDecodeError, KeyError, TypeError) as err:
                raise ConfigError(f"{path}:{line_no}: not a rollout record with token ids ({err})") from None
            if min_reward is not None and float(rec.get("reward", 0.0)) < min_reward:
                continue
            if rec.get("valid") is False or not spans:
                continue
            segs, pos = [Segment(ids[: spans[0][0]])], spans[0][0]
            for turn, (a, b) in enumerate(spans):
                if a > pos:
                    segs.append(Segment(ids[pos:a], turn=turn - 1))
                segs.append(Segment(ids[a:b], trainable=True, turn=turn))
                pos = b
            if pos < len(ids):
                segs.append(Segment(ids[pos:], turn=len(spans) - 1))
            rows.append(segs)
    return rows


def episode_segments(episode: ReferenceEpisode, chat: ChatFormat, stop_strings: list[str]) -> list[Segment]:
    """A played episode as one trajectory row with the tokens an RL rollout of the same text has.

    The prompt through :meth:`ChatFormat.prompt_ids`; each action's own tokens (trainable), and
    end-of-turn after it only where the episode runner's sampler would have had to write one: an
    action that ends at one of the env's stop strings (``</execute>``, ``</edit>``, ``<submit/>``
    in the debugging gym) stops generation there, exactly as sampled; one that does not (the SWE
    ``<submit/>``) ends with EOS; then each observation through :meth:`ChatFormat.observation_ids`
    after the action's ids (masked), as the runner appends it."""
    tokenizer = chat.tokenizer
    eos = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    segs = [Segment(chat.prompt_ids(episode.prompt))]
    for turn, action in enumerate(episode.actions):
        ids = tokenizer(action, add_special_tokens=False)["input_ids"]
        if not ends_at_stop(action, stop_strings):
            ids = ids + eos
        segs.append(Segment(ids, turn not in episode.context, turn=turn))
        if turn < len(episode.observations):
            segs.append(Segment(chat.observation_ids(episode.observations[turn], ids), turn=turn))
    return segs


def reference_demonstrations(
    problems: list[Problem],
    chat: ChatFormat,
    env: EnvSettings,
    recoveries: float = 0.0,
    cache: bool = False,
    explain: bool = False,
    recoveries_elsewhere: float = 0.0,
    misquotes: float = 0.0,
) -> list[list[Segment]]:
    """The reference trajectory of every SWE or debugging task (see the module docstring), played
    in the env ``env.swe`` or ``env.debug`` configures, as trajectory rows (debugging tasks: also
    the ``recoveries`` fraction's recovery trajectories); those that do not resolve their task are
    dropped and counted in one warning. ``cache``: episodes played before come from disk.
    ``explain``: each edit's lead-in names the bug first. ``recoveries_elsewhere``: the fraction
    of recovery trajectories whose wrong edit is of another line. ``misquotes``: the fraction of
    tasks that also get a misquote trajectory (both envs)."""
    debug = "debug_task" in problems[0].metadata
    # A reference trajectory's final diff is the task's own fix, written by no policy: the mirror
    # and answer runs (more grading runs of each resolved episode, looking for code that forged
    # the first) have nothing to catch there, and they were 60% of the time playing took (71 of
    # 119 s of grading for 12 MBPP tasks' 21 trajectories). Whether a task's fix survives the
    # mirror is validation's question, asked of the tasks RL trains on. The cache key keeps the
    # settings as given: the trajectories played are the same.
    unmirrored = {"mirror_check": False, "answer_check": False}
    if debug:
        from lit_codeRL.envs.debug.env import DebugEnv
        from lit_codeRL.envs.debug.reference import reference_episodes as debug_episodes

        environment: Any = DebugEnv(replace(env.debug, **unmirrored))
        mix: dict[str, Any] = dict(
            recoveries=recoveries,
            explain=explain,
            elsewhere=recoveries_elsewhere if recoveries else 0.0,
            misquotes=misquotes,
        )
        reference_episodes: Any = partial(debug_episodes, **mix)
    else:
        from lit_codeRL.envs.swe.env import ContainerEnv
        from lit_codeRL.envs.swe.reference import reference_episodes as swe_episodes

        environment = ContainerEnv(data_name_or_path=None, settings=replace(env.swe, **unmirrored))
        mix = dict(explain=explain, misquotes=misquotes)
        reference_episodes = partial(swe_episodes, **mix)

    def play() -> list[ReferenceEpisode]:
        with environment:
            return reference_episodes(environment, problems)

    if cache:
        kind, settings = ("debug", env.debug) if debug else ("swe", env.swe)
        episodes = cached_episodes(kind, problems, settings, mix, play)
    else:
        episodes = play()
    dropped = [f"{e.task_id} ({e.verdict or 'unresolved'})" for e in episodes if not e.resolved]
    if dropped:
        logger.warning(
            "%d of %d %s reference trajectories did not resolve their task and were dropped: %s",
            len(dropped),
            len(episodes),
            environment.name,
            listed(dropped, 10, "; "),
        )
    stops = list(environment.stop_strings)
    return [episode_segments(e, chat, stops) for e in episodes if e.resolved]


def load_demonstrations(settings: DemonstrationSettings, tokenizer) -> list[list[Segment]]:
    """Every kept demonstration as trajectory segments (``source``'s, then each of ``also``'s); a
    clear error when a source gives none."""
    rows = _source_demonstrations(settings, tokenizer)
    for source in settings.also:
        rows += _source_demonstrations(replace(settings, source=source, also=[]), tokenizer)
    return rows


def _source_demonstrations(settings: DemonstrationSettings, tokenizer) -> list[list[Segment]]:
    path, limit = Path(settings.source).expanduser(), settings.limit
    if is_rollout_dump(path):
        rows = dump_demonstrations(path, settings.min_reward)
    else:
        problems = load_problem_set(ProblemSettings(source=settings.source, split=settings.split))
        chat = ChatFormat(tokenizer, settings.system_prompt)
        if problems and ("swe_task" in problems[0].metadata or "debug_task" in problems[0].metadata):
            # each played trajectory costs sandbox runs: play only as many tasks as are wanted
            rows = reference_demonstrations(
                problems[: settings.limit],
                chat,
                settings.env,
                settings.recoveries,
                settings.cache,
                settings.explain,
                settings.recoveries_elsewhere,
                settings.misquotes,
            )
            limit = None  # the tasks were limited: a task's recovery row is its second
        else:
            rows = problem_demonstrations(problems, chat, settings.num_shown_tests)
    kept = [r for r in rows if sum(len(s.ids) for s in r) <= settings.max_length]
    too_long, rows = len(rows) - len(kept), kept[:limit]
    logger.info(
        "demonstrations: %d rows from %s (split %s; %d longer than max_length %d left out)",
        len(rows),
        settings.source,
        settings.split,
        too_long,
        settings.max_length,
    )
    if not rows:
        raise ConfigError(
            f"no demonstrations from {settings.source!r} (split {settings.split!r}): no reference "
            f"solutions, every row filtered by min_reward/max_length, or an empty dump"
        )
    return rows


class DemonstrationDataset(IterableDataset):
    """Endless shuffled batches of demonstrations (epoch after epoch); position is checkpointed."""

    def __init__(self, rows: list[list[Segment]], batch_size: int, pad_token_id: int, seed: int = 0) -> None:
        super().__init__()
        self.rows, self.batch_size, self.pad_token_id, self.seed = rows, batch_size, pad_token_id, seed
        self.epoch, self.position = 0, 0

    def _order(self) -> list[int]:
        order = list(range(len(self.rows)))
        random.Random(self.seed + self.epoch).shuffle(order)
        return order

    def __iter__(self) -> Iterator[TrajectoryBatch]:
        while True:
            yield self.next_batch()

    def next_batch(self) -> TrajectoryBatch:
        order, picked = self._order(), []
        while len(picked) < self.batch_size:
            if self.position >= len(order):
                self.epoch, self.position = self.epoch + 1, 0
                order = self._order()
            picked.append(order[self.position])
            self.position += 1
        return TrajectoryBatch.from_segments(
            [self.rows[i] for i in picked],
            self.pad_token_id,
            rewards=torch.zeros(len(picked)),
            group_ids=torch.arange(len(picked)),
            records=[{"demonstration": i} for i in picked],
        )

    def state_dict(self) -> dict[str, Any]:
        return {"epoch": self.epoch, "position": self.position, "seed": self.seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.epoch, self.position, self.seed = state["epoch"], state["position"], state["seed"]
