"""``lit-coderl episode ROLLOUTS.jsonl``: one dumped episode as text a person reads top to bottom.

Every run writes its episodes to ``rollouts.jsonl`` (``RolloutModule.log_rollout``): the prompt,
each turn's text, the env's per-turn dump (for the agent envs: the tool call, its arguments, its
output, the diff after an edit) and the episode's grade. This prints one of them as Markdown: the
task, then every turn (what the policy wrote, the call it made, what came back), then the final
diff and the score with the status of every graded test.

    lit-coderl episode runs/ppo_debug/version_0/rollouts.jsonl                 # the first episode
    lit-coderl episode ROLLOUTS --step 3 --problem debug/median --index 1      # a chosen one
    lit-coderl episode ROLLOUTS --best --out episode.md                        # the highest reward
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from lit_codeRL.envs.text import clean_text
from lit_codeRL.errors import ConfigError

_SKIP = {"text", "reward", "verdict", "finish_reason", "observation", "output", "diff", "tool", "action"}


def records(path: Path) -> Iterator[dict[str, Any]]:
    """The episode records of a rollout dump, in order."""
    if not path.is_file():
        raise ConfigError(f"no rollout dump at {path}")
    with path.open() as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    yield json.loads(line)
                except json.JSONDecodeError as err:
                    raise ConfigError(f"{path}:{n}: not a JSON record ({err.msg})") from err


def _fence(text: str, lang: str = "") -> str:
    text = text.rstrip("\n")
    ticks = "````" if "```" in text else "```"
    return f"{ticks}{lang}\n{text}\n{ticks}"


def render_episode(record: dict[str, Any]) -> str:
    """One episode record as Markdown (see the module docstring)."""
    out = [
        f"# Episode {record.get('problem_id', '?')}"
        + (f" (step {record['step']}, group {record.get('group', '?')})" if "step" in record else ""),
        "",
        f"**Reward {record.get('reward', 0.0):g}**, verdict `{record.get('verdict', '')}`, "
        f"{record.get('num_turns', len(record.get('turns', [])))} turns, ended: "
        f"{record.get('end_reason') or ('terminated' if record.get('terminated') else 'truncated')}"
        + ("" if record.get("valid", True) else " (left out of the loss)"),
        "",
        "## Task (the first observation)",
        "",
        _fence(_user_part(record.get("prompt", ""))),
    ]
    for k, turn in enumerate(record.get("turns", []), 1):
        out += ["", f"## Turn {k}", "", "**Policy:**", "", _fence(turn.get("text", ""))]
        tool = turn.get("tool") or turn.get("action")
        if tool:
            args = {key: v for key, v in turn.items() if key not in _SKIP and not isinstance(v, (dict, list))}
            shown = ", ".join(f"{key}={v!r}" for key, v in args.items() if key not in ("content", "command"))
            call = turn.get("command") or turn.get("content")
            out += ["", f"**Tool call:** `{tool}`" + (f" ({shown})" if shown else "")]
            if call and tool != "error":
                out += ["", _fence(str(call))]
        feedback = turn.get("observation") or turn.get("output")
        if feedback:
            out += ["", "**Environment:**", "", _fence(str(feedback))]
        if turn.get("diff"):
            out += ["", "**Diff after this turn:**", "", _fence(turn["diff"], "diff")]
    gateway = record.get("gateway")
    if isinstance(gateway, dict):  # an agent program's episode (env.name: harness)
        out += [
            "",
            "## Agent program",
            "",
            f"Exit code {record.get('agent_exit_code')}, {record.get('agent_s', 0):g} s"
            + (", killed at its wall clock" if record.get("agent_timed_out") else "")
            + f"; {gateway.get('calls', 0)} calls through the gateway, {gateway.get('rows', 0)} training rows "
            f"({gateway.get('merged_calls', 0)} calls continued a row, {gateway.get('rewritten_calls', 0)} "
            "started one after a rewritten history"
            + (
                f"; {gateway['dropped_choices']} choices the agent did not act on left untrained"
                if gateway.get("dropped_choices")
                else ""
            )
            + ")",
        ]
        if record.get("agent_log"):
            out += ["", "Its output (the tail):", "", _fence(record["agent_log"])]
    grade = record.get("grade")
    if record.get("diff") is not None or grade:
        out += ["", "## Result", ""]
        if record.get("diff"):
            out += [_fence(record["diff"], "diff"), ""]
        if isinstance(grade, dict):
            out.append(
                f"Grade: `{grade.get('verdict')}`, reward {grade.get('reward')}"
                + (f" ({grade['reason']})" if grade.get("reason") else "")
            )
            if grade.get("verdict") == "tamper":
                out += ["", "**Tampering found** (the policy reached for the grader, not the bug):"]
                out += [f"- {reason}" for reason in grade.get("tamper") or ["(no reason recorded)"]]
            if record.get("agent_fault"):
                out.append("The agent broke its own workspace: graded as a failure, not masked.")
            for group in ("fail_to_pass", "pass_to_pass"):
                for test, status in (grade.get(group) or {}).items():
                    out.append(f"- {test}: {status}")
    # files, names and program output may hold undecodable bytes or control characters (and dumps
    # written before the envs cleaned them hold them raw): shown as escapes, never sent to a terminal
    return clean_text("\n".join(out) + "\n")


def _user_part(prompt: str) -> str:
    """The user message of a chat-templated prompt (its text between the user and assistant tags)."""
    for start, end in (("<|im_start|>user\n", "<|im_end|>"), ("[INST]", "[/INST]")):
        if start in prompt:
            return prompt.split(start, 1)[1].split(end, 1)[0]
    return prompt


def select(
    path: Path, index: int = 0, step: int | None = None, problem: str | None = None, best: bool = False
) -> dict[str, Any]:
    """The chosen episode: the ``index``-th of those matching ``step``/``problem`` (or the one with
    the highest reward)."""
    chosen = [
        r
        for r in records(path)
        if not r.get("extra_row")  # a further row of an episode already listed (an agent program's)
        and (step is None or r.get("step") == step)
        and (problem is None or r.get("problem_id") == problem)
    ]
    if not chosen:
        raise ConfigError(f"no episode in {path} matches step={step} problem={problem}")
    if best:
        return max(chosen, key=lambda r: float(r.get("reward", 0.0)))
    if not -len(chosen) <= index < len(chosen):
        raise ConfigError(f"--index {index}: only {len(chosen)} matching episodes")
    return chosen[index]


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(prog="lit-coderl episode", description=__doc__.split("\n\n")[0])
    ap.add_argument("rollouts", type=Path, help="a run's rollouts.jsonl")
    ap.add_argument("--index", type=int, default=0, help="which matching episode (0 = first, -1 = last)")
    ap.add_argument("--step", type=int, default=None, help="only episodes of this training step")
    ap.add_argument("--problem", default=None, help="only episodes of this problem / task id")
    ap.add_argument("--best", action="store_true", help="the matching episode with the highest reward")
    ap.add_argument("--out", type=Path, default=None, help="write the Markdown here instead of stdout")
    ns = ap.parse_args(argv)
    text = render_episode(select(ns.rollouts, ns.index, ns.step, ns.problem, ns.best))
    if ns.out:
        ns.out.write_text(text)
        print(f"wrote {ns.out}")
    else:
        print(text, end="")
