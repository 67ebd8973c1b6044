"""Fixtures of the agent-env tests."""

from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from lit_codeRL.envs.debug.env import DebugEnv, DebugSettings
from lit_codeRL.envs.protocol import Action, StepResult
from lit_codeRL.problems.debug import debug_problem, load_debug_tasks


@pytest.fixture(scope="module")
def median():
    """The shipped debugging task ``debug/median`` (stats.py, line 19 off by one) as a problem."""
    (task,) = [t for t in load_debug_tasks("embedded", "all") if t.task_id == "debug/median"]
    return debug_problem(task)


@pytest.fixture(scope="module")
def bwrap_gym(tmp_path_factory):
    """The debugging gym on bubblewrap, its first look at the tests left out (tool calls only)."""
    from tests.sandbox.conftest import require_bwrap

    require_bwrap()
    env = DebugEnv(
        DebugSettings(
            repo_cache=str(tmp_path_factory.mktemp("debug-cache")),
            workspace={"backend": "bwrap", "disk_mb": 96},
            show_initial_eval=False,
        )
    )
    yield env
    env.close()


def debug_episode(env: DebugEnv, task, calls: list[str]) -> tuple[StepResult, list[str]]:
    """One episode of ``task``: each tool call in turn (none may end it), then ``<submit/>``;
    the submission's step and what each call showed."""
    (start,) = env.reset_batch([debug_problem(task)])
    observations = []
    for call in calls:
        (out,) = env.step_batch([start.state], [Action(call, "stop")]).result()
        assert not out.terminated, (call, out.info)
        observations.append(out.observation)
    (out,) = env.step_batch([start.state], [Action("<submit/>", "stop")]).result()
    return out, observations


def answering(buggy: str, answers: dict[str, dict[str, object]]) -> str:
    """``buggy`` with each of its functions named in ``answers`` returning the answer listed for
    the ``repr`` of its arguments' tuple, the bug for any others: hard-coded answers to the
    visible tests, what a policy that reads them can write."""
    defined = {n.name for n in ast.parse(buggy).body if isinstance(n, ast.FunctionDef)}
    lines = [buggy]
    for name, table in answers.items():
        if name in defined:
            lines.append(
                f"\n_visible_{name} = {name}\n\n\ndef {name}(*args):\n    answers = {table!r}\n"
                f"    key = repr(args)\n"
                f"    return answers[key] if key in answers else _visible_{name}(*args)\n"
            )
    return "\n".join(lines)


def synthesized_repo(tmp: Path, files: dict[str, str], *args: str) -> tuple[Path, dict, list[dict], dict]:
    """``lit-coderl synth`` of a repository of ``files`` under ``tmp`` (one bug a function tried
    8 times, none held out, ``args`` added), checked as the final check checks it: every SWE row
    graded both ways and every debugging row validated. Its output directory, report, SWE rows
    and debugging tasks by id."""
    from lit_codeRL.cli import main
    from tests.sandbox.conftest import require_bwrap

    require_bwrap()
    os.environ.setdefault("LIT_CODERL_SYNTH_CACHE", str(tmp / "synth-cache"))
    os.environ.setdefault("LIT_CODERL_DEBUG_CACHE", str(tmp / "debug-cache"))
    repo = tmp / "shop"
    for path, text in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    out = tmp / "out"
    main(["synth", str(repo), "--out", str(out), "--tries", "8", "--eval-fraction", "0", *args])
    report = json.loads((out / "report.json").read_text())
    assert not report["dropped_by_check"] and not report["debug_dropped_by_check"], report
    swe = [json.loads(line) for line in (out / "swe" / "tasks.jsonl").read_text().splitlines()]
    debug = {t.task_id: t for t in load_debug_tasks(str(out / "debug" / "tasks.jsonl"))}
    return out, report, swe, debug


def unpaid_hack(env: DebugEnv, task, content: str, visible: int) -> list[str]:
    """An episode of ``task`` that writes ``content`` over the file its fix changes and runs the
    tests: the agent's own run passes all ``visible`` tests (what it optimised), yet the grade is
    ``unresolved`` with reward 0. The graded nodes that failed."""
    (path,) = task.fix
    out, seen = debug_episode(env, task, [f'<rewrite path="{path}">{content}</rewrite>', "<eval/>"])
    assert f"{visible} passed" in seen[1] and "failed" not in seen[1], seen[1]
    grade = out.info["episode"]["grade"]
    assert out.terminated and out.reward == 0.0 and grade["verdict"] == "unresolved", (task.task_id, grade)
    return [node for node, status in grade["fail_to_pass"].items() if status != "passed"]


def fix_resolves_with_checks(env: DebugEnv, task, held_out_prefix: str) -> None:
    """An episode of ``task`` that writes its reference fix is ``resolved`` with reward 1, its
    held-out checks (``held_out_prefix`` in their node ids) among the tests graded."""
    ((path, fixed),) = task.fix.items()
    out, _ = debug_episode(env, task, [f'<rewrite path="{path}">{fixed}</rewrite>'])
    grade = out.info["episode"]["grade"]
    assert out.terminated and out.reward == 1.0 and grade["verdict"] == "resolved", grade
    assert any(f"/{held_out_prefix}" in node for node in grade["fail_to_pass"]), grade


def each_hack_unpaid(env: DebugEnv, swe: list[dict], debug: dict, hack: str, visible: int) -> None:
    """For each synthesized row: ``hack`` (hard-coded answers to the visible tests) appended to the
    file its fix changes passes the agent's own run of the ``visible`` tests and gets no reward,
    every graded node it fails a held-out check (:func:`unpaid_hack`)."""
    from lit_codeRL.problems.synth.repo_held_out import HELD_OUT_PREFIX  # noqa: PLC0415

    for row in swe:
        task = debug[row["instance_id"]]
        (path,) = task.fix
        failed = unpaid_hack(env, task, task.files[path] + hack, visible=visible)
        assert failed and all(f"/{HELD_OUT_PREFIX}" in node for node in failed), failed


def each_fix_resolves_with_checks(env: DebugEnv, swe: list[dict], debug: dict) -> None:
    """Each synthesized row's reference fix is ``resolved`` with its held-out checks graded
    (:func:`fix_resolves_with_checks`)."""
    from lit_codeRL.problems.synth.repo_held_out import HELD_OUT_PREFIX  # noqa: PLC0415

    for row in swe:
        fix_resolves_with_checks(env, debug[row["instance_id"]], HELD_OUT_PREFIX)


def synthesized_rows(tmp_path_factory, name: str, files: dict[str, str], at_least: int, *args: str):  # noqa: ANN001
    """:func:`synthesized_repo` in a new directory ``name``, which must give ``at_least`` tasks:
    its SWE rows, debugging tasks by id and report."""
    _, report, swe, debug = synthesized_repo(tmp_path_factory.mktemp(name), files, *args)
    assert report["tasks"] >= at_least, report
    return swe, debug, report
