"""``HarnessRunner``: episodes of unmodified agent programs, trained on through the gateway's records.

The drop-in for :class:`~lit_codeRL.rollout.episodes.EpisodeRunner` when ``env.name: harness``
(same ``run`` signature, same :class:`Episode` records, so the rollout dataset, the algorithms,
the dumps and the evaluation are unchanged). One ``run``:

1. opens one gateway episode per (problem, sample), each on a unix socket of its own in a fresh
   host directory, and the episode's workspace with that directory bound in (``HarnessEnv.start``);
2. starts every agent program at once (threads wait on their sandboxes) while this thread, which
   owns the engine, answers their calls in batches (``Gateway.pump``): the agents sample from the
   live policy, whose weights the engine follows after every optimizer step;
3. closes each episode's socket when its agent exits (a late call finds nothing), grades each
   diff in a fresh workspace, and rebuilds each episode's rows from its recorded calls, exact ids
   only (``gateway/records.py``): the first row is the :class:`Episode`, rows of a rewritten
   history are its ``extra_rows``, every row sharing the episode's reward. Of a call with several
   choices only the one the agent acted on is trained (``env.harness.train_choices``).
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import torch

from lit_codeRL.envs.harness.bridge import socket_path
from lit_codeRL.envs.harness.env import HarnessEnv, HarnessState
from lit_codeRL.gateway.records import CallRecord, Row, build_rows
from lit_codeRL.gateway.requests import ServeLimits
from lit_codeRL.gateway.server import EpisodeLog, Gateway, GatewayConfig
from lit_codeRL.policy.engine import GenerationEngine, SamplingParams
from lit_codeRL.policy.loading import embedded_ids
from lit_codeRL.problems import Problem
from lit_codeRL.rollout.chat import ChatFormat
from lit_codeRL.rollout.episodes import Episode, Turn
from lit_codeRL.rollout.trajectory import Segment, interaction_segments

logger = logging.getLogger(__name__)


class HarnessRunner:
    """Runs agent-program episodes of ``env`` against ``engine`` (see the module docstring).

    Args:
        engine: The engine the gateway samples from (the trainer's, synced after each step).
        env: The harness env (workspaces, the agent command, grading).
        sampling: The run's sampling: imposed on every call (temperature, nucleus; ``max_tokens``
            capped by ``max_new_tokens``), whatever the agent asks for, since the trainer's
            log-probs assume it.
        max_context_tokens: A call whose prompt + ``max_tokens`` exceeds it is refused with a
            ``context_length_exceeded`` 400 (the agent sees it; its episode goes on being graded).
            ``None``: the model's context (:func:`model_context`), never unbounded: a prompt an
            agent makes as long as a body holds would hold every episode's generation.
        system_prompt: Unused by the agent (it brings its own prompts); kept for the runner interface.
    """

    max_turns = 1
    """Evaluation counts one agent run as one attempt (its calls are the agent's business)."""
    settle_timeout_s = 30.0
    """How long after an episode closes its calls still being answered may take to be recorded
    (a client that does not read its reply must not hold the training step); then it is frozen."""

    def __init__(
        self,
        engine: GenerationEngine,
        env: HarnessEnv,
        sampling: SamplingParams,
        max_context_tokens: int | None = None,
        system_prompt: str | None = None,
        max_batch_rows: int = 64,
    ) -> None:
        self.engine, self.env, self.sampling = engine, env, sampling
        self.chat = ChatFormat(engine.tokenizer, system_prompt)
        if max_context_tokens is None:
            max_context_tokens = model_context(engine)
        config = GatewayConfig(
            served_name=env.settings.served_name,
            limits=ServeLimits(
                max_tokens=sampling.max_new_tokens,
                max_context_tokens=max_context_tokens,
                max_n=env.settings.max_n,
                max_calls_per_episode=env.settings.max_calls,
                max_inflight_per_episode=env.settings.max_inflight_calls,
            ),
            max_batch_rows=max_batch_rows,
            max_body_mb=env.settings.max_body_mb,
            require_episode=True,
            max_connections_per_socket=env.settings.max_connections,
            idle_timeout_s=env.settings.idle_timeout_s,
            write_timeout_s=env.settings.write_timeout_s,
        )
        vocab = embedded_ids(getattr(engine, "model", None))
        self.gateway = Gateway(engine.tokenizer, config, forced_sampling=sampling, vocab_size=vocab).start()
        self.rollouts = 0
        self.policy_version: int | None = None
        """Stamped on every call of the next rollouts (the trainer sets its optimizer step here);
        ``None``: the index of the rollout."""

    def run(
        self,
        problems: list[Problem],
        num_generations: int = 1,
        generator: torch.Generator | None = None,
        stats: dict[str, float] | None = None,
        first_group: int = 0,
    ) -> list[Episode]:
        """``num_generations`` agent episodes per problem, group-contiguous."""
        stats = stats if stats is not None else {}
        n, env = num_generations, self.env
        flat = [p for p in problems for _ in range(n)]
        statements = [env.statement(p) for p in flat]
        self.gateway.policy_version = self.rollouts if self.policy_version is None else self.policy_version
        self.rollouts += 1
        dirs = [Path(tempfile.mkdtemp(prefix="lcrl-gw-", dir="/tmp")) for _ in flat]
        keys = [self.gateway.open_episode(socket_path=str(socket_path(d))) for d in dirs]
        logs: dict[str, Any] = {}
        states: list[HarnessState] = []
        try:
            samples = [i % n for i in range(len(flat))]
            states = env._parallel(env.start, flat, dirs, keys, samples)
            t0 = time.perf_counter()
            futures = [
                env._pool.submit(env.run_agent, s, text) for s, text in zip(states, statements, strict=True)
            ]

            closed_at: dict[str, float] = {}

            def all_closed() -> bool:
                """Close the socket of each episode whose agent exited; True once all have."""
                for key, future in zip(keys, futures, strict=True):
                    if future.done() and key not in logs:
                        logs[key] = self._close(key)
                        closed_at[key] = time.monotonic()
                # a reply the agent got just before it exited is recorded a moment later
                late = time.monotonic() - self.settle_timeout_s
                return len(logs) == len(keys) and all(
                    self.gateway.settled(logs[key]) or closed_at[key] < late for key in logs
                )

            self.gateway.pump(self.engine, all_closed, generator)
            for future in futures:
                future.result()
            stats["generate_s"] = stats.get("generate_s", 0.0) + time.perf_counter() - t0
            t1 = time.perf_counter()
            results = env._parallel(env.grade, states)
            stats["reward_wait_s"] = stats.get("reward_wait_s", 0.0) + time.perf_counter() - t1
        finally:
            for key in keys:  # an error above: stop answering every episode of this run
                if key not in logs:
                    logs[key] = self._close(key)
            for log in logs.values():  # what is recorded now is final (a late record would race the rows)
                self.gateway.freeze(log)
            for state in states:
                env._close(state.workspace)
            for d in dirs:
                shutil.rmtree(d, ignore_errors=True)
        episodes = []
        for i, (problem, state, key, result) in enumerate(zip(flat, states, keys, results, strict=True)):
            episode = self._episode(problem, first_group + i // n, statements[i], logs[key], state, result)
            rows = [episode.segments(), *episode.extra_rows]
            stats["completion_tokens"] = stats.get("completion_tokens", 0.0) + sum(
                len(seg.ids) for row in rows for seg in row if seg.trainable
            )
            episodes.append(episode)
        return episodes

    def _close(self, key: str) -> Any:
        """The episode's closed log; a gateway that fails to close it fails that episode only
        (``gateway_error``), never the rollout."""
        try:
            return self.gateway.close_episode(key)
        except Exception as err:  # noqa: BLE001
            logger.warning("harness: closing gateway episode %s: %s", key, repr(err))
            return EpisodeLog(key, closed=True, failure=repr(err))

    def _episode(
        self, problem: Problem, group: int, statement: str, log: Any, state: HarnessState, result: Any
    ) -> Episode:
        """The episode's first row as an :class:`Episode`, later rows as its ``extra_rows``, the
        grade on its last turn (every row is trained with the episode's return)."""
        laid = build_rows(log.calls, train_choices=self.env.settings.train_choices)
        rows = laid.rows
        tokenizer = self.engine.tokenizer
        if rows:
            first = rows[0]
            episode = Episode(problem, group, first.prompt_ids, tokenizer.decode(first.prompt_ids), state)
            episode.turns = [self._turn(t.choice, t.observation_ids) for t in first.turns]
        else:  # the agent never called the model: nothing to train, the grade still counts
            ids = self.chat.prompt_ids(statement)
            episode = Episode(problem, group, ids, self.chat.prompt_text(statement), state)
            episode.turns = [Turn([], [], "", "stop")]
        episode.extra_rows = [_segments(row) for row in rows[1:]]
        last = episode.turns[-1]
        last.reward = float(result.reward)
        last.info.update(result.info)
        last.info.setdefault("episode", {}).update(
            {
                "gateway": {
                    "calls": len(log.calls),
                    "rows": len(rows),
                    "merged_calls": laid.merged_calls,
                    "rewritten_calls": laid.rewritten_calls,
                    "dropped_choices": laid.dropped_choices,
                    "requests": log.requests,
                    "errors": log.errors,
                    "replayed_retries": log.replayed_retries,
                },
                "calls": _call_dumps(log.calls),
            }
        )
        if log.failure:
            episode.valid, episode.end_reason = False, "gateway_error"
        elif result.info.get("masked") or result.info.get("sandbox_error"):
            episode.valid, episode.end_reason = False, str(result.info.get("verdict", "sandbox_error"))
        elif result.terminated:
            episode.terminated, episode.end_reason = True, "terminated"
        else:
            episode.truncated, episode.end_reason = True, "agent_timeout"
        return episode

    def _turn(self, choice: Any, observation_ids: list[int]) -> Turn:
        text = choice.text
        observation = (
            self.engine.tokenizer.decode(observation_ids, skip_special_tokens=True) if observation_ids else ""
        )
        return Turn(
            choice.token_ids,
            choice.logprobs,
            text,
            choice.finish_reason,
            observation=observation,
            observation_ids=list(observation_ids),
        )

    def close(self) -> None:
        self.gateway.stop()
        self.env.close()


def model_context(engine: Any) -> int | None:
    """The longest prompt + completion ``engine`` serves: vLLM's ``max_model_len``, else the
    model's ``max_position_embeddings``; ``None`` when neither is known (a remote engine, whose
    server bounds its own context)."""
    limit = getattr(engine, "max_model_len", None)
    if limit is None:
        config = getattr(getattr(engine, "model", None), "config", None)
        limit = getattr(config, "max_position_embeddings", None)
    return int(limit) if isinstance(limit, int) and limit > 0 else None


def _segments(row: Row) -> list[Segment]:
    return interaction_segments(
        row.prompt_ids, [(t.choice.token_ids, t.choice.logprobs, t.observation_ids) for t in row.turns]
    )


def _call_dumps(calls: list[CallRecord]) -> list[dict[str, Any]]:
    """The recorded calls in the rollout dump: their exact ids, what the served ids are checked
    against. A continued call (its prompt an earlier chat call's prompt, then that call's first
    choice, then new messages: ``render.py``) holds that call's position as ``prompt_extends`` and,
    as ``prompt_ids``, only the ids after its choice; any other call its whole prompt. (Written
    whole, the prompts of a history of k calls took k times its length: an agent's 200 calls of a
    full context wrote tens of MB of ``rollouts.jsonl`` a sample, gigabytes a step.)"""
    out = []
    for k, call in enumerate(calls):
        base = _continued_from(calls, k) if call.continued else None
        cut = 0 if base is None else len(calls[base].prompt_ids) + len(calls[base].choices[0].token_ids)
        out.append(
            {
                "index": call.index,
                "continued": call.continued,
                "prompt_extends": base,
                "policy_version": call.policy_version,
                "prompt_ids": call.prompt_ids[cut:],
                "choices": [
                    {"token_ids": c.token_ids, "finish_reason": c.finish_reason} for c in call.choices
                ],
            }
        )
    return out


def _continued_from(calls: list[CallRecord], k: int) -> int | None:
    """Position of the latest chat call before ``k`` whose prompt and first choice ``calls[k]``'s
    prompt starts with (the call the gateway continued: almost always the one just before)."""
    prompt = calls[k].prompt_ids
    for j in range(k - 1, -1, -1):
        call = calls[j]
        if call.kind != "chat" or not call.choices:
            continue
        n, ids = len(call.prompt_ids), call.choices[0].token_ids
        if n + len(ids) <= len(prompt) and prompt[:n] == call.prompt_ids and prompt[n : n + len(ids)] == ids:
            return j
    return None
