"""Scoring a Q-policy on ``CodeGenerationEnv`` problems: one episode per (problem, seed), the
per-problem success rate, and the table ``lit-coderl test`` prints.

Actions are chosen exactly as in training (:func:`~lit_codeRL.rollout.experience.select_actions`:
ε-greedy over the env's action mask), so ``epsilon=0`` is the greedy policy the training curve
``greedy/train_solved`` measures.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from lit_codeRL.rollout.experience import QFunction, select_actions


def run_episode(env: Any, q_fn: QFunction, problem_index: int, epsilon: float = 0.0, seed: int = 0) -> dict:
    """One episode of ``env`` on problem ``problem_index`` with the policy ``q_fn``; its outcome."""
    obs, info = env.reset(seed=seed, options={"problem_index": problem_index})
    rng = np.random.default_rng(seed)
    total, done = 0.0, False
    while not done:
        # float(): under bf16-mixed autocast (`lit-coderl test` on a CPU with native bf16) the Q-values
        # come back in bf16, which numpy has no type for
        q = q_fn(torch.from_numpy(obs).unsqueeze(0)).float().numpy()
        action = int(select_actions(q, env.action_masks()[None], epsilon, rng)[0])
        obs, reward, terminated, truncated, info = env.step(action)
        total += reward
        done = terminated or truncated
    return {
        "task_id": env.problem.task_id,
        "solved": bool(info["all_passed"]),
        "pass_fraction": float(info["pass_fraction"]),
        "return": total,
        "steps": int(info["steps"]),
        "code": info["code"],
    }


def evaluate_problem(
    env: Any, q_fn: QFunction, split: str, problem_index: int, episodes: int, epsilon: float
) -> dict:
    """``episodes`` episodes (seeds ``0..episodes-1``) on one problem: success rate, mean fraction of
    tests passed, and the last episode's code and length."""
    runs = [run_episode(env, q_fn, problem_index, epsilon, seed=k) for k in range(episodes)]
    return {
        "split": split,
        "task_id": runs[0]["task_id"],
        "success_rate": float(np.mean([r["solved"] for r in runs])),
        "pass_fraction": float(np.mean([r["pass_fraction"] for r in runs])),
        "steps": runs[-1]["steps"],
        "code": runs[-1]["code"],
    }


def format_results(rows: list[dict]) -> str:
    """Per-problem table (split, task, success rate, tests passed) followed by each generated program."""
    lines = [f"{'split':<6} {'task':<24} {'success':>8} {'tests':>6}"]
    for r in rows:
        lines.append(
            f"{r['split']:<6} {r['task_id']:<24} {r['success_rate']:>8.2f} {r['pass_fraction']:>6.2f}"
        )
    for split in sorted({r["split"] for r in rows}):
        split_rows = [r for r in rows if r["split"] == split]
        solved = sum(r["success_rate"] == 1.0 for r in split_rows)
        lines.append(f"{split}: {solved}/{len(split_rows)} problems solved")
    for r in rows:
        lines.append(f"--- {r['split']} {r['task_id']} (success {r['success_rate']:.2f})")
        lines.append(r["code"].rstrip())
    return "\n".join(lines)
