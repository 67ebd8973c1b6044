"""Played reference trajectories kept on disk, so a BC run replays none it has played before.

Playing a task's reference trajectory runs its tests in the sandbox several times: the 596
trajectories of the agent recipe's BC stage (546 debugging, 50 SWE) took 6 minutes on 2 cores,
several times the 51 s of its 120 optimizer steps on an H200, and every BC run over the same
tasks played them again. The episodes (text only: prompt, actions, observations, grade) are stored under the synth
cache (``$LIT_CODERL_SYNTH_CACHE``, else ``~/.cache/lit-coderl/synth``) in ``reference/``.

The key is everything an episode depends on: the env (``debug`` or ``swe``) and its settings, the
recovery fractions, each task's content (not where its repository lies: ``repo_source`` is a path,
``base_commit`` names the content), and a digest of the source of every module under
``lit_codeRL/envs`` and ``lit_codeRL/sandbox``, so that a change to how episodes are scripted,
played or observed plays them again instead of serving stale ones.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import hashlib
import json
import logging
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from lit_codeRL.envs.reference import ReferenceEpisode
from lit_codeRL.problems import Problem
from lit_codeRL.problems.synth.cache_dir import cache_root

logger = logging.getLogger(__name__)

PACKAGE = Path(__file__).resolve().parents[1]
CODE_DIRS = ("envs", "sandbox")
"""The packages whose source is part of the key."""
PATH_FIELDS = frozenset({"repo_source", "repo_cache", "python"})
"""Task and settings fields (at any depth: ``workspace.python``) that say where files lie on this
machine, not what they are: a cache made on the dev box must serve the GPU machine, whose Python
is elsewhere."""


@functools.cache
def code_digest() -> str:
    """sha256 over the source of every module that scripts, plays or observes an episode."""
    digest = hashlib.sha256()
    for folder in CODE_DIRS:
        for path in sorted((PACKAGE / folder).rglob("*.py")):
            digest.update(str(path.relative_to(PACKAGE)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _without_paths(fields: dict[str, Any]) -> dict[str, Any]:
    return {
        k: _without_paths(v) if isinstance(v, dict) else v for k, v in fields.items() if k not in PATH_FIELDS
    }


def _task_content(problem: Problem) -> Any:
    task = problem.metadata.get("swe_task") or problem.metadata.get("debug_task")
    if dataclasses.is_dataclass(task) and not isinstance(task, type):
        return _without_paths(dataclasses.asdict(task))
    return {"task_id": problem.task_id, "prompt": problem.prompt}


def cache_key(kind: str, problems: list[Problem], settings: Any, mix: Mapping[str, Any]) -> str:
    """The digest that names the cached episodes of ``problems`` played in env ``kind`` with the
    env ``settings`` and the trajectory ``mix`` (the arguments of the env's ``reference_episodes``
    that choose which trajectories are played and how they read: ``recoveries``, ``explain``...)."""
    spec = {
        "kind": kind,
        "code": code_digest(),
        "settings": _without_paths(dataclasses.asdict(settings))
        if dataclasses.is_dataclass(settings)
        else settings,
        "mix": dict(sorted(mix.items())),
        "tasks": [_task_content(p) for p in problems],
    }
    return hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()


def cache_path(key: str, kind: str) -> Path:
    return cache_root() / "reference" / f"{kind}-{key[:24]}.json.gz"


def cached_episodes(
    kind: str,
    problems: list[Problem],
    settings: Any,
    mix: Mapping[str, Any],
    play: Callable[[], list[ReferenceEpisode]],
) -> list[ReferenceEpisode]:
    """The episodes ``play()`` returns for these problems, from the cache when it has them."""
    path = cache_path(cache_key(kind, problems, settings, mix), kind)
    if path.is_file():
        try:
            with gzip.open(path, "rt", encoding="utf-8") as f:
                rows = json.load(f)
            episodes = [ReferenceEpisode(**{**row, "context": tuple(row["context"])}) for row in rows]
            logger.info("%d %s reference trajectories from %s", len(episodes), kind, path)
            try:  # marks the file used: scripts/gpu_stage.sh ships only the files a run read
                os.utime(path)
            except OSError:
                pass
            return episodes
        except (OSError, ValueError, TypeError, KeyError) as err:  # a torn or foreign file: play again
            logger.warning("ignoring the reference-trajectory cache %s (%s)", path, err)
    logger.info(
        "playing the %s reference trajectories of %d tasks (none cached as %s)", kind, len(problems), path
    )
    episodes = play()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        with gzip.open(tmp, "wt", encoding="utf-8") as f:
            json.dump([dataclasses.asdict(e) for e in episodes], f)
        os.replace(tmp, path)  # atomic: ranks playing the same tasks at once each write whole files
    except OSError as err:  # a read-only home: the run goes on uncached
        logger.warning("could not cache reference trajectories at %s (%s)", path, err)
    return episodes
