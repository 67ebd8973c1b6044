"""Reference trajectories of SWE tasks: the gold patch applied as an agent would, for BC.

An episode of two turns, played for real in a workspace so that the observation between them is
exactly what the env shows: ``<execute>git apply <<'PATCH' ... PATCH</execute>`` (the task's
reference patch through a heredoc), then ``<submit/>``. The episode is graded like any other; a
trajectory that does not resolve its task is dropped (and counted), which validates the task too.
"""

from __future__ import annotations

from dataclasses import dataclass

from lit_codeRL.envs.swe.env import ContainerEnv
from lit_codeRL.problems.swe import SWETask

HEREDOC = "LCRL_PATCH"


@dataclass
class ReferenceEpisode:
    task: SWETask
    prompt: str
    """The first observation (the task prompt)."""
    actions: list[str]
    observations: list[str]
    """What the env answered after each action but the last."""
    reward: float


def apply_patch_action(patch: str) -> str:
    body = patch if patch.endswith("\n") else patch + "\n"
    if f"\n{HEREDOC}\n" in f"\n{body}":
        raise ValueError("the patch contains the heredoc marker")
    return f"I will apply the fix.\n<execute>git apply <<'{HEREDOC}'\n{body}{HEREDOC}</execute>"


SUBMIT_ACTION = "The fix is applied. <submit/>"


def reference_episode(env: ContainerEnv, task: SWETask) -> ReferenceEpisode:
    """Play the reference trajectory of ``task`` in ``env`` (its single-episode interface)."""
    first = env.reset(task)
    action = apply_patch_action(task.patch)
    observation, _, done, _ = env.step(action)
    if done:
        return ReferenceEpisode(task, first["prompt"], [action], [], 0.0)
    _, reward, _, _ = env.step(SUBMIT_ACTION)
    return ReferenceEpisode(task, first["prompt"], [action, SUBMIT_ACTION], [observation], reward)
