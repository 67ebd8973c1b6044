"""Grading a SWE episode so that no edit can fake a pass.

The reward of an episode is computed from its **diff alone**, in a *second, fresh* workspace
(``sandbox/workspace.py``) made from the pristine repository at the base commit, never in the
workspace the agent used (whose processes are gone by then):

1. the agent's diff is applied, every test file it changed or added is restored from the base
   commit (or removed), and the task's hidden test patch is applied;
2. pytest runs the files of the FAIL_TO_PASS and PASS_TO_PASS tests inside that workspace, driven
   by a trusted runner (``_grade_runner.py``) that starts before any of the agent's code, ignores
   the repository's ``addopts`` and leaves with ``os._exit`` (no ``atexit`` hook of the code
   under test runs);
3. the outcomes come back through two independent machine-readable channels, both written into a
   host directory bound only into the grading sandbox: pytest's junit XML, and the runner's own
   record of every test report, HMAC-signed under a key the runner deleted before any repository
   code was imported. The host reads them after the grading sandbox is closed (so no background
   process can rewrite them meanwhile) and cross-checks both channels and the exit code it
   observed itself. Any disagreement rejects the result (reward 0), as swebench 5 rejects a log
   that claims success while the exit code says otherwise.

Nothing is ever read from the tests' stdout. A FAIL_TO_PASS test that is absent, skipped,
xfailed or errored counts as failed; so does every test of a file that does not collect.
``resolved`` needs every FAIL_TO_PASS and every PASS_TO_PASS test passed. Partial credit (when
asked for) is the fraction of FAIL_TO_PASS passed, and only when every PASS_TO_PASS passes.

What this does not stop: the code under test shares pytest's process, so a program written
against this very runner (walking its frames to find the key and rewriting both records
consistently) could forge a pass. Every generic trick (prints, conftest, skip, exit, editing
tests, atexit, background writers, a broken collection) scores 0; ``tests/envs/test_swe_hacks.py``
keeps that true.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import shutil
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from lit_codeRL.problems.swe import RepoCache, SWETask
from lit_codeRL.sandbox.workspace import WorkspaceConfig, open_workspace

RUNNER = Path(__file__).with_name("_grade_runner.py")
RUNNER_MOUNT = "/opt/lcrl-grade"
RESULTS_MOUNT = "/opt/lcrl-results"
MAX_RESULT_BYTES = 8 << 20


@dataclass
class SWEGrade:
    """The grade of one diff on one task (JSON-ready through :meth:`to_dict`)."""

    verdict: str
    """``resolved``, ``unresolved``, ``patch_failed`` (the diff does not apply),
    ``test_patch_failed``, ``rejected`` (the records disagree), ``no_results`` (the run left no
    valid record: the code under test ended the process), ``timeout``, or ``infra_error`` (the
    grading sandbox failed: not the agent's doing; the episode is left out of the loss)."""
    reward: float
    resolved: bool = False
    fail_to_pass: dict[str, str] = field(default_factory=dict)
    """Status of each FAIL_TO_PASS test (``passed``, ``failed``, ``error``, ``skipped``, ``absent``...)."""
    pass_to_pass: dict[str, str] = field(default_factory=dict)
    reason: str = ""
    restored: list[str] = field(default_factory=list)
    """Test files of the diff that grading restored from the base commit."""
    wall_s: float = 0.0

    @property
    def infra_error(self) -> bool:
        return self.verdict == "infra_error"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def test_files(task: SWETask) -> list[str]:
    """The files pytest runs: those holding the task's FAIL_TO_PASS and PASS_TO_PASS tests."""
    return sorted({node.split("::", 1)[0] for node in (*task.fail_to_pass, *task.pass_to_pass)})


def junit_key(nodeid: str) -> tuple[str, str]:
    """``(classname, name)`` of a pytest node id in junit XML: ``tests/a/test_b.py::C::t[x]`` ->
    ``("tests.a.test_b.C", "t[x]")``."""
    path, *rest = nodeid.split("::")
    module = path[:-3] if path.endswith(".py") else path
    parts = [module.replace("/", "."), *rest[:-1]]
    return ".".join(parts), rest[-1] if rest else ""


def parse_junit(data: bytes) -> dict[tuple[str, str], str]:
    """Status per ``(classname, name)`` from junit XML: ``passed``, ``failed``, ``error`` or
    ``skipped``. A test case listed twice with different statuses keeps the worse one."""
    root = ET.fromstring(data)
    statuses: dict[tuple[str, str], str] = {}
    rank = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
    for case in root.iter("testcase"):
        key = (case.get("classname", ""), case.get("name", ""))
        tags = {child.tag for child in case}
        status = (
            "error"
            if "error" in tags
            else "failed"
            if "failure" in tags
            else "skipped"
            if "skipped" in tags
            else "passed"
        )
        if key not in statuses or rank[status] > rank[statuses[key]]:
            statuses[key] = status
    return statuses


def judge(
    task: SWETask,
    exit_code: int | None,
    report: dict[str, Any] | None,
    junit: bytes | None,
    partial_credit: bool = False,
) -> SWEGrade:
    """The grade from what the grading run left (pure: ``tests/envs/test_swe_grading.py``).

    ``report``: the runner's verified record (``None`` when missing or its signature is wrong);
    ``junit``: the junit XML bytes (``None`` when missing); ``exit_code``: the runner's exit code
    as the sandbox observed it (``None``: killed at the time limit)."""
    if exit_code is None:
        return SWEGrade("timeout", 0.0, reason="the tests did not finish in time")
    if report is None:
        return SWEGrade("no_results", 0.0, reason=f"no valid record of the run (exit code {exit_code})")
    restored = list(report.get("restored", []))
    stage = report.get("stage")
    if stage in ("agent_patch_failed", "test_patch_failed"):
        verdict = "patch_failed" if stage == "agent_patch_failed" else "test_patch_failed"
        return SWEGrade(verdict, 0.0, reason=str(report.get("detail", ""))[:500], restored=restored)
    if stage != "tests_finished":
        return SWEGrade("no_results", 0.0, reason=f"the run stopped at stage {stage!r}", restored=restored)
    returned, exitstatus = report.get("returned"), report.get("exitstatus")
    outcomes: dict[str, str] = report.get("outcomes", {})

    def reject(why: str) -> SWEGrade:
        return SWEGrade("rejected", 0.0, reason=why, restored=restored)

    if not (exit_code == returned == exitstatus):
        return reject(f"exit code {exit_code} but the run recorded {returned}/{exitstatus}")
    failing = [n for n, s in outcomes.items() if s in ("failed", "error")]
    if (returned == 0) != (not failing and not report.get("collect_errors") and bool(outcomes)):
        return reject(f"exit code {returned} disagrees with the recorded outcomes ({len(failing)} failing)")
    if junit is None:
        return reject("no junit XML")
    try:
        junit_status = parse_junit(junit)
    except ET.ParseError as e:
        return reject(f"junit XML does not parse: {e}")
    wanted = (*task.fail_to_pass, *task.pass_to_pass)
    for node in wanted:
        recorded = outcomes.get(node, "absent")
        in_junit = junit_status.get(junit_key(node), "absent")
        if (recorded == "passed") != (in_junit == "passed"):
            return reject(f"{node}: the runner recorded {recorded}, junit says {in_junit}")
    f2p = {n: outcomes.get(n, "absent") for n in task.fail_to_pass}
    p2p = {n: outcomes.get(n, "absent") for n in task.pass_to_pass}
    f2p_ok = sum(s == "passed" for s in f2p.values())
    p2p_all = all(s == "passed" for s in p2p.values())
    resolved = bool(f2p) and f2p_ok == len(f2p) and p2p_all
    reward = 1.0 if resolved else (f2p_ok / len(f2p) if partial_credit and p2p_all and f2p else 0.0)
    return SWEGrade(
        "resolved" if resolved else "unresolved",
        reward,
        resolved,
        f2p,
        p2p,
        reason="" if resolved else _why_unresolved(f2p, p2p),
        restored=restored,
    )


def _why_unresolved(f2p: dict[str, str], p2p: dict[str, str]) -> str:
    bad = [f"{n}: {s}" for n, s in {**f2p, **p2p}.items() if s != "passed"]
    return "; ".join(bad[:5]) + (f" (+{len(bad) - 5} more)" if len(bad) > 5 else "")


def read_report(results: Path, key: bytes) -> dict[str, Any] | None:
    """The runner's report if present, small enough, and signed under ``key``; else ``None``."""
    data = _read_small(results / "report.json")
    if data is None:
        return None
    try:
        wrapper = json.loads(data)
        payload, sig = wrapper["payload"], wrapper["sig"]
        expected = hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()
        if not isinstance(sig, str) or not hmac.compare_digest(sig, expected):
            return None
        report = json.loads(payload)
    except (ValueError, KeyError, TypeError, AttributeError):
        return None
    return report if isinstance(report, dict) else None


def _read_small(path: Path) -> bytes | None:
    if not path.is_file() or path.is_symlink() or path.stat().st_size > MAX_RESULT_BYTES:
        return None
    return path.read_bytes()


class SWEGrader:
    """Grades diffs of SWE tasks in fresh workspaces (see the module docstring).

    Args:
        workspace: Workspace settings of the grading sandboxes (the same backend and limits as
            the agent's workspaces; the per-command time limit is replaced by ``timeout_s``).
        repos: Where the pristine repositories come from (prepared once per task).
        timeout_s: Time limit of one grading run (apply, restore, tests).
        partial_credit: Reward the fraction of FAIL_TO_PASS tests passed when every PASS_TO_PASS
            test passes (``resolved`` still needs all).
    """

    def __init__(
        self,
        workspace: WorkspaceConfig | None = None,
        repos: RepoCache | None = None,
        timeout_s: float = 300.0,
        partial_credit: bool = False,
    ) -> None:
        self.workspace = workspace or WorkspaceConfig()
        self.repos = repos or RepoCache()
        self.timeout_s, self.partial_credit = timeout_s, partial_credit

    def grade(self, task: SWETask, diff: str, run_empty: bool = False) -> SWEGrade:
        """The grade of ``diff`` (a ``git diff`` against the task's base commit; may be empty).

        An empty diff is ``unresolved`` without a run unless ``run_empty``: the base commit fails
        the FAIL_TO_PASS tests, which :meth:`validate` checked for every task an env trains on."""
        if not diff.strip() and not run_empty:
            return SWEGrade("unresolved", 0.0, reason="no change to the repository")
        start = time.monotonic()
        results = Path(tempfile.mkdtemp(prefix="lcrl-grade-"))
        try:
            grade = self._grade(task, diff, results)
        finally:
            shutil.rmtree(results, ignore_errors=True)
        grade.wall_s = time.monotonic() - start
        return grade

    def validate(self, task: SWETask) -> str | None:
        """Why ``task`` cannot be trained on (``None``: it can): its reference patch must resolve
        it and the unchanged base must not. The answer is cached beside the prepared repository,
        keyed by everything grading reads, so each task is validated once per machine."""
        key = hashlib.sha256(
            json.dumps(
                [task.base_commit, task.patch, task.test_patch, task.fail_to_pass, task.pass_to_pass]
            ).encode()
        ).hexdigest()[:16]
        repo = self.repos.path_for(task)
        marker = repo.with_name(f"{repo.name}.valid-{key}")
        if marker.is_file():
            return None
        gold = self.grade(task, task.patch)
        if gold.infra_error:
            raise RuntimeError(f"{task.instance_id}: grading the reference patch failed: {gold.reason}")
        if not gold.resolved:
            return f"the reference patch does not resolve it ({gold.verdict}: {gold.reason})"
        base = self.grade(task, "", run_empty=True)
        if base.resolved or base.infra_error:
            return f"the unchanged base commit is {base.verdict}"
        marker.write_text(json.dumps({"gold_s": round(gold.wall_s, 3)}))
        return None

    def _grade(self, task: SWETask, diff: str, results: Path) -> SWEGrade:
        key = secrets.token_bytes(32)
        (results / "key").write_bytes(key)
        (results / "agent.patch").write_text(diff if not diff or diff.endswith("\n") else diff + "\n")
        (results / "test.patch").write_text(task.test_patch)
        (results / "spec.json").write_text(json.dumps({"test_files": test_files(task)}))
        try:
            repo = self.repos.get(task)
            with open_workspace(
                self.workspace,
                repo,
                binds={str(RUNNER): f"{RUNNER_MOUNT}/{RUNNER.name}"},
                writable_binds={str(results): RESULTS_MOUNT},
            ) as ws:
                out = ws.run(
                    f"python -I -S {RUNNER_MOUNT}/{RUNNER.name} {RESULTS_MOUNT}",
                    timeout=self.timeout_s,
                    max_output=2000,
                )
            # the grading sandbox is closed: nothing of the code under test runs any more
        except Exception as e:  # noqa: BLE001 - any sandbox failure is ours, not the agent's
            return SWEGrade("infra_error", 0.0, reason=f"{type(e).__name__}: {e}"[:500])
        report = read_report(results, key)
        junit = _read_small(results / "junit.xml")
        return judge(task, None if out.timed_out else out.exit_code, report, junit, self.partial_credit)
