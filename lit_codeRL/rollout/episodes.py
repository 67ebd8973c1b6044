"""``EpisodeRunner``: many text episodes stepped in lockstep with one batched generate per turn.

Turn 1 samples ``num_generations`` actions per problem from one prefill of its prompt; later
turns generate over the live episodes' own contexts (prompt, actions and observations so far).
Actions are handed to the env as soon as they finish, so the sandbox grades while the rest of
the batch still decodes. The runner owns the limits: ``max_turns`` and ``max_context_tokens``
cut an episode (``truncated``); the env ends it when it is solved or over (``terminated``).

An episode becomes one training row (:meth:`Episode.segments`, ``rollout/trajectory.py``): the
prompt, then each action (trainable, with its sampling log-probs) and the observation after it
(masked).

Action tokens are always the exact sampled ids; only observations are tokenized from text.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import Any

import torch

from lit_codeRL.envs.protocol import Action, TextEnv
from lit_codeRL.envs.text import clean_text
from lit_codeRL.policy.engine import GenerationEngine, SamplingParams
from lit_codeRL.problems import Problem
from lit_codeRL.rollout.chat import ChatFormat
from lit_codeRL.rollout.trajectory import Segment, interaction_segments


@dataclass
class Turn:
    """One action of the policy and what the env made of it."""

    action_ids: list[int]
    logprobs: list[float]
    text: str
    finish_reason: str
    reward: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)
    observation: str = ""
    """Feedback after this action (empty when the episode ended with it)."""
    observation_ids: list[int] = field(default_factory=list)


@dataclass
class Episode:
    """A whole interaction of one problem with the policy."""

    problem: Problem
    group: int
    prompt_ids: list[int]
    prompt_text: str
    state: Any = None
    turns: list[Turn] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    valid: bool = True
    """False when grading a step failed in the sandbox: no reward, left out of the loss."""
    end_reason: str = ""
    """``terminated``, ``max_turns``, ``context``, ``env_truncated`` or ``sandbox_error``."""
    extra_rows: list[list[Segment]] = field(default_factory=list)
    """Further training rows of the same episode, each trained with its return: an agent program
    that rewrote its history (``rollout/harness.py``). Empty for every other runner."""

    @property
    def done(self) -> bool:
        return self.terminated or self.truncated or not self.valid

    @property
    def episode_return(self) -> float:
        return float(sum(t.reward for t in self.turns))

    def context_ids(self) -> list[int]:
        ids = list(self.prompt_ids)
        for t in self.turns:
            ids += t.action_ids + t.observation_ids
        return ids

    def segments(self) -> list[Segment]:
        """One row for the whole episode: prompt, then (action, observation) per turn."""
        return interaction_segments(
            self.prompt_ids, [(t.action_ids, t.logprobs, t.observation_ids) for t in self.turns]
        )

    def first_success_turn(self) -> int | None:
        """1-based turn whose action passed every test, if any."""
        for k, t in enumerate(self.turns):
            if t.info.get("verdict") == "passed":
                return k + 1
        return None

    def record(self) -> dict[str, Any]:
        """JSON-ready summary for logs and rollout dumps (token ids included, for BC)."""
        last = self.turns[-1] if self.turns else Turn([], [], "", "length")
        ids = self.context_ids()
        spans, pos = [], len(self.prompt_ids)
        for t in self.turns:
            spans.append([pos, pos + len(t.action_ids)])
            pos += len(t.action_ids) + len(t.observation_ids)
        completion = last.text if len(self.turns) == 1 else _transcript(self.turns)
        return {
            "problem_id": self.problem.task_id,
            "group": self.group,
            "prompt": self.prompt_text,
            "completion": completion,
            "reward": self.episode_return,
            "verdict": last.info.get("verdict", ""),
            "pass_fraction": float(last.info.get("pass_fraction", 0.0) or 0.0),
            "completion_tokens": sum(len(t.action_ids) for t in self.turns),
            "finished": last.finish_reason != "length",
            "sandbox_s": float(sum(t.info.get("wall_time_s", 0.0) or 0.0 for t in self.turns)),
            "num_turns": len(self.turns),
            "success_turn": self.first_success_turn(),
            "terminated": self.terminated,
            "truncated": self.truncated,
            "end_reason": self.end_reason,
            "valid": self.valid,
            "turns": [
                {
                    "text": t.text,
                    "reward": t.reward,
                    "verdict": t.info.get("verdict", ""),
                    "finish_reason": t.finish_reason,
                    "observation": t.observation,
                    **t.info.get("dump", {}),
                }
                for t in self.turns
            ],
            **last.info.get("episode", {}),
            "input_ids": ids,
            "trainable_spans": spans,
        }


def _transcript(turns: list[Turn]) -> str:
    parts = []
    for k, t in enumerate(turns, 1):
        parts.append(f"[turn {k}]\n{t.text}")
        if t.observation:
            parts.append(f"[feedback]\n{t.observation}")
    return "\n".join(parts)


class EpisodeRunner:
    """Runs batches of episodes of ``env`` with ``engine`` (see the module docstring).

    Args:
        engine: Any :class:`~lit_codeRL.policy.engine.GenerationEngine`.
        env: Any :class:`~lit_codeRL.envs.protocol.TextEnv`.
        sampling: Sampling of every turn.
        max_turns: Actions per episode at most; an episode still going after it is truncated.
        max_context_tokens: An episode whose next turn would not fit (context + observation +
            ``max_new_tokens``) is truncated instead; ``None``: no limit.
        system_prompt: System message of every episode (``None``: the template's default).
    """

    def __init__(
        self,
        engine: GenerationEngine,
        env: TextEnv,
        sampling: SamplingParams,
        max_turns: int = 1,
        max_context_tokens: int | None = None,
        system_prompt: str | None = None,
    ) -> None:
        if max_turns < 1:
            raise ValueError(f"max_turns must be >= 1, got {max_turns}")
        stops = [t for t in getattr(env, "stop_strings", []) if t not in sampling.stop]
        if stops:  # the env's action format ends at these (``</execute>``): stop there
            sampling = dataclasses.replace(sampling, stop=[*sampling.stop, *stops])
        self.engine, self.env, self.sampling = engine, env, sampling
        self.max_turns, self.max_context_tokens = max_turns, max_context_tokens
        self.chat = ChatFormat(engine.tokenizer, system_prompt)
        self._prompt_cache: dict[str, tuple[list[int], str]] = {}

    def _prompt(self, observation: str) -> tuple[list[int], str]:
        if observation not in self._prompt_cache:  # the one prompt path: ChatFormat, as everywhere else
            self._prompt_cache[observation] = (
                self.chat.prompt_ids(observation),
                self.chat.prompt_text(observation),
            )
        return self._prompt_cache[observation]

    def run(
        self,
        problems: list[Problem],
        num_generations: int = 1,
        generator: torch.Generator | None = None,
        stats: dict[str, float] | None = None,
        first_group: int = 0,
    ) -> list[Episode]:
        """``num_generations`` episodes per problem, group-contiguous (group ids from ``first_group``).

        ``stats`` accumulates ``generate_s`` and ``reward_wait_s``, and the env's own time outside
        the turns: ``env_reset_s`` (an agent env opens a workspace per episode) and
        ``env_finish_s`` (it grades an episode cut at its last turn, then closes it)."""
        stats = stats if stats is not None else {}
        n = num_generations
        t0 = time.perf_counter()
        starts = self.env.reset_batch([p for p in problems for _ in range(n)])
        stats["env_reset_s"] = stats.get("env_reset_s", 0.0) + time.perf_counter() - t0
        episodes = []
        for i, start in enumerate(starts):
            ids, text = self._prompt(start.observation)
            episodes.append(Episode(problems[i // n], first_group + i // n, ids, text, start.state))
        for turn in range(self.max_turns):
            live = [e for e in episodes if not e.done]
            if not live:
                break
            if turn == 0:
                # Rows of a group share the prompt: prefill it once, sample n continuations.
                prompts = [episodes[g * n].prompt_ids for g in range(len(problems))]
                self._turn(live, prompts, n, generator, stats, last=self.max_turns == 1)
            else:
                self._turn(
                    live, [e.context_ids() for e in live], 1, generator, stats, turn == self.max_turns - 1
                )
        t0 = time.perf_counter()
        self._finish(episodes)
        stats["env_finish_s"] = stats.get("env_finish_s", 0.0) + time.perf_counter() - t0
        return episodes

    def _finish(self, episodes: list[Episode]) -> None:
        """Tell an env that holds per-episode resources (workspaces) that its episodes ended.

        ``finish_batch(states, truncated)`` (optional) may return a final result for an episode
        the runner cut: its reward is added to the last turn (SWE: the grade of the diff as it
        stands) and its info merged there."""
        finish = getattr(self.env, "finish_batch", None)
        if finish is None:
            return
        results = finish([e.state for e in episodes], [e.truncated and e.valid for e in episodes])
        for episode, result in zip(episodes, results, strict=True):
            if result is None or not episode.turns:
                continue
            last = episode.turns[-1]
            last.reward += float(result.reward)
            last.info.update(result.info)
            if result.info.get("sandbox_error") or result.info.get("masked"):
                episode.valid, episode.end_reason = False, str(result.info.get("verdict", "sandbox_error"))

    def _turn(
        self,
        live: list[Episode],
        prompts: list[list[int]],
        n: int,
        generator: torch.Generator | None,
        stats: dict[str, float],
        last: bool,
    ) -> None:
        tokenizer = self.engine.tokenizer
        pending: list[tuple[list[int], Any]] = []

        def submit(rows: list[int], token_ids: list[list[int]], reasons: list[str]) -> None:
            texts = tokenizer.batch_decode(token_ids, skip_special_tokens=True)
            actions = [Action(t, r) for t, r in zip(texts, reasons, strict=True)]
            pending.append((rows, self.env.step_batch([live[r].state for r in rows], actions)))

        ids, mask = self.engine.pad_prompts(prompts)
        t0 = time.perf_counter()
        out = self.engine.generate(ids, mask, self.sampling, n, generator, on_finished=submit)
        stats["generate_s"] = stats.get("generate_s", 0.0) + time.perf_counter() - t0
        stats["completion_tokens"] = stats.get("completion_tokens", 0.0) + float(out.num_completion_tokens)
        t0 = time.perf_counter()
        for rows, handle in pending:
            for r, result in zip(rows, handle.result(), strict=True):
                length = int(out.completion_mask[r].sum())
                episode = live[r]
                step = Turn(
                    action_ids=out.completion_ids[r, :length].tolist(),
                    logprobs=out.logprobs[r, :length].tolist(),
                    text=out.texts[r],
                    finish_reason=out.finish_reasons[r] if out.finish_reasons else "stop",
                    reward=float(result.reward),
                    info=dict(result.info),
                )
                episode.turns.append(step)
                self._after_step(episode, step, result, last)
        stats["reward_wait_s"] = stats.get("reward_wait_s", 0.0) + time.perf_counter() - t0

    def _after_step(self, episode: Episode, step: Turn, result: Any, last: bool) -> None:
        if result.info.get("sandbox_error"):
            episode.valid, episode.end_reason = False, "sandbox_error"
        elif result.info.get("masked"):  # the env's own limit stopped it (e.g. its time budget)
            episode.valid, episode.end_reason = False, str(result.info.get("verdict", "masked"))
        elif result.terminated:
            episode.terminated, episode.end_reason = True, "terminated"
        elif result.truncated:
            episode.truncated, episode.end_reason = True, "env_truncated"
        elif last:
            episode.truncated, episode.end_reason = True, "max_turns"
        else:
            # the dump keeps the text the policy reads (observation_ids cleans it the same way)
            observation = clean_text(result.observation)
            obs_ids = self.chat.observation_ids(observation, step.action_ids)
            size = len(episode.context_ids()) + len(obs_ids) + self.sampling.max_new_tokens
            if self.max_context_tokens is not None and size > self.max_context_tokens:
                episode.truncated, episode.end_reason = True, "context"
            else:
                step.observation, step.observation_ids = observation, obs_ids
