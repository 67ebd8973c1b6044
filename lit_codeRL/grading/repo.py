"""Grading a repository episode (SWE task, debugging task) so that no edit can fake a pass.

The reward of an episode is computed from its **diff alone** (bytes: a file name or content that
is not UTF-8 is graded like any other), in a *second, fresh* workspace (``sandbox/workspace.py``)
made from the pristine repository at the base commit, never in the workspace the agent used
(whose processes are gone by then):

1. a trusted runner (``_runner.py``) applies the diff, scans it for tampering (``_scan.py``),
   restores every test file it changed or added from the base commit (or removes it), applies
   the task's hidden test patch, and adds a canary test that always fails;
2. pytest runs the files of the FAIL_TO_PASS and PASS_TO_PASS tests and the canary in a child
   process of the runner that holds no key, with the toolchain and the standard library loaded
   from trusted directories only, plugin autoload off and the repository's ``addopts`` ignored but for
   its ``-m``/``-k``/``--deselect`` (``_runner.repository_selection``), watched by an audit hook,
   a check of the comparisons its tests made (``_compare.py``: an object that says equal to
   anything) and a record of the toolchain that must hold after each test's call, with no frame
   of the diff's files on pytest's stack then or when the report is logged (``_guard.py``); its
   reports go to the runner as they happen, and the runner watches the test files meanwhile
   (``_fswatch.py``: the code under test rewriting a test before pytest reads it);
3. the outcomes come back through two channels, both on a size-capped tmpfs of the grading
   sandbox that the trusted workspace server reads once every process there is gone: pytest's
   junit XML, and the runner's record (the child's reports, the canary, the junit file's hash,
   every tamper reason), HMAC-signed under a key only the runner held. The host cross-checks both
   channels and the exit code it observed itself.

A diff that resolved its task is graded again: the mirror runs (``_mirror.py``: the tests'
expected values changed, which an honest fix then fails) and the answer run (``_answers.py``:
the checks of the answerable failing tests answered with no test in the process, compared
outside it with the literals they expect).

Verdicts: ``tamper`` when the scan or the run found tampering (a module shadowing the toolchain or
the stdlib, packaging metadata, native code, reporter or interpreter internals, an object that
says equal to anything in a passed comparison, pytest's functions or classes changed while the
tests ran, the canary reading "passed", a forged reporting pipe), with its own reward (``tamper_reward``, default the failure reward); ``rejected`` when the
records disagree or do not parse; otherwise ``resolved`` or ``unresolved`` from the tests. Nothing
is ever read from the tests' stdout. A FAIL_TO_PASS test that is absent, skipped, xfailed, xpassed
(a non-strict ``xfail`` that passed) or errored counts as failed; so does every test of a file
that does not collect. ``resolved`` needs every FAIL_TO_PASS and every PASS_TO_PASS test passed.
Partial credit (when asked for) is the fraction of FAIL_TO_PASS passed, and only when every
PASS_TO_PASS passes. What can still forge a pass, with its case: ``docs/swe.md``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import secrets
import signal
import time
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Protocol

from lit_codeRL.errors import listed
from lit_codeRL.sandbox.workspace import (
    CPU_LIMIT_EXIT,
    Workspace,
    WorkspaceConfig,
    WorkspaceError,
    open_workspace,
)

RUNNER = Path(__file__).with_name("_runner.py")
SCANNER = Path(__file__).with_name("_scan.py")
COMPARER = Path(__file__).with_name("_compare.py")
GUARD = Path(__file__).with_name("_guard.py")
FSWATCH = Path(__file__).with_name("_fswatch.py")
MIRROR = Path(__file__).with_name("_mirror.py")
ANSWERS = Path(__file__).with_name("_answers.py")
HOLDS = Path(__file__).with_name("_holds.py")
TESTS_DATA = Path(__file__).with_name("_tests_data.py")
VERSION_TAGS = Path(__file__).with_name("_version_tags.py")
RUNNER_FILES = (RUNNER, SCANNER, COMPARER, GUARD, FSWATCH, MIRROR, ANSWERS, HOLDS, TESTS_DATA, VERSION_TAGS)
"""The trusted runner and what it imports, bound read-only side by side in every grading run."""
RUNNER_MOUNT = "/opt/lcrl-grade"
RESULTS_MOUNT = "/opt/lcrl-results"
MAX_RESULT_BYTES = 8 << 20
"""Largest junit file or report read back; a larger one counts as missing."""
MAX_PATCH_BYTES = 16 << 20
"""Largest diff graded; a larger one is ``patch_failed`` without a run."""
RESULTS_TMPFS_BYTES = 2 * MAX_PATCH_BYTES + 2 * MAX_RESULT_BYTES
"""Size cap of the results tmpfs: the graded code can write no more than this there."""
CPU_LIMIT_REASON = "a process of the tests was stopped for its CPU time (SIGXCPU)"
"""The ``timeout`` reason :func:`judge` gives a run a CPU-time limit stopped (the grader names the limit)."""


class GradedTask(Protocol):
    """What grading reads of a task (``problems/swe.py: SWETask`` has it)."""

    instance_id: str
    base_commit: str
    patch: str
    test_patch: str
    fail_to_pass: Sequence[str]
    pass_to_pass: Sequence[str]


class RepoSource(Protocol):
    """Where the pristine repository of a task is (``problems/swe.py: RepoCache``)."""

    def get(self, task: Any) -> Path: ...

    def path_for(self, task: Any) -> Path: ...


@dataclass
class SWEGrade:
    """The grade of one diff on one task (JSON-ready through :meth:`to_dict`)."""

    verdict: str
    """``resolved``, ``unresolved``, ``tamper`` (the diff or the run tampered with grading:
    ``tamper`` lists why), ``patch_failed`` (the diff does not apply, or is too large),
    ``test_patch_failed``, ``rejected`` (the records disagree or do not parse), ``no_results``
    (the run left no valid record: the code under test ended the process), ``timeout``, or
    ``infra_error`` (the grading sandbox did not start: not the agent's doing; the episode is
    left out of the loss)."""
    reward: float
    resolved: bool = False
    fail_to_pass: dict[str, str] = field(default_factory=dict)
    """Status of each FAIL_TO_PASS test (``passed``, ``failed``, ``error``, ``skipped``, ``absent``...)."""
    pass_to_pass: dict[str, str] = field(default_factory=dict)
    reason: str = ""
    restored: list[str] = field(default_factory=list)
    """Test files of the diff that grading restored from the base commit."""
    tamper: list[str] = field(default_factory=list)
    """Why the verdict is ``tamper`` (``shadows pytest: pytest.py``, ``internals: m.py: name
    get_objects``, ``canary: ...``)."""
    wall_s: float = 0.0
    cpu_s: float | None = None
    """CPU time of the grading run's processes (``None``: no run, or not known)."""

    @property
    def infra_error(self) -> bool:
        return self.verdict == "infra_error"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class GradeRun:
    """What one grading run left: the exit code the sandbox observed (``None``: killed at the
    time limit), the runner's verified report (``None``: missing or not signed by the runner)
    and the junit XML bytes (``None``: missing or too large)."""

    exit_code: int | None
    report: dict[str, Any] | None
    junit: bytes | None
    output: str = ""
    """The runner's own output (its errors; the tests' output goes to junit, never read)."""
    cpu_s: float | None = None
    """CPU time of every process of the run (``None``: not known)."""


TAMPER_KINDS = (
    "shadows", "metadata", "native code", "bytecode", "internals", "run time", "canary", "mirror", "outside",
)  # fmt: skip
"""The first words of tamper reasons, for per-kind counts (``tamper_kind``)."""


def tamper_kind(reason: str) -> str:
    """``shadows``, ``metadata``, ``internals``... of one tamper reason (``other`` if none)."""
    head = reason.split(":", 1)[0]
    for kind in TAMPER_KINDS:
        if head.startswith(kind):
            return kind.replace(" ", "_")
    return "other"


def patch_bytes(diff: str | bytes) -> bytes:
    """A diff as the bytes ``git apply`` reads: ``str`` diffs carry non-UTF-8 bytes as surrogate
    escapes (``Workspace.diff``); other lone surrogates (from JSON) become ``?``."""
    if isinstance(diff, bytes):
        data = diff
    else:
        try:
            data = diff.encode("utf-8", "surrogateescape")
        except UnicodeEncodeError:
            data = diff.encode("utf-8", "replace")
    return data if not data or data.endswith(b"\n") else data + b"\n"


def test_files(task: GradedTask) -> list[str]:
    """The files pytest runs: those holding the task's FAIL_TO_PASS and PASS_TO_PASS tests."""
    return sorted({node.split("::", 1)[0] for node in (*task.fail_to_pass, *task.pass_to_pass)})


def junit_key(nodeid: str) -> tuple[str, str]:
    """``(classname, name)`` of a pytest node id in junit XML: ``tests/a/test_b.py::C::t[x]`` ->
    ``("tests.a.test_b.C", "t[x]")``. As pytest's ``mangle_test_address``: the parameters (from
    the first ``[``) are set aside before splitting at ``::``, since an id may hold ``::`` or
    ``/`` itself (``test_query[https://[::1]:80/]``)."""
    address, bracket, params = nodeid.partition("[")
    path, *rest = address.split("::")
    module = (path[:-3] if path.endswith(".py") else path).replace("/", ".")
    if not rest:
        return module, ""
    return ".".join([module, *rest[:-1]]), rest[-1] + bracket + params


def parse_junit(data: bytes) -> dict[tuple[str, str], str]:
    """Status per ``(classname, name)`` from junit XML: ``passed``, ``failed``, ``error`` or
    ``skipped``. A test case listed twice with different statuses keeps the worse one. Raises
    ``ValueError`` for anything that is not junit XML we can read (bad XML, an unknown encoding,
    entity bombs...): the file was written where the code under test could reach it."""
    try:
        root = ET.fromstring(data)
        cases = list(root.iter("testcase"))
    except Exception as e:  # noqa: BLE001 - ParseError, LookupError, RecursionError...: all "does not parse"
        raise ValueError(f"{type(e).__name__}: {e}"[:300]) from None
    statuses: dict[tuple[str, str], str] = {}
    rank = {"passed": 0, "skipped": 1, "failed": 2, "error": 3}
    for case in cases:
        key = (str(case.get("classname", "")), str(case.get("name", "")))
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
    task: GradedTask,
    exit_code: int | None,
    report: dict[str, Any] | None,
    junit: bytes | None,
    partial_credit: bool = False,
    tamper_reward: float = 0.0,
) -> SWEGrade:
    """The grade from what the grading run left (pure: ``tests/envs/test_swe_actions_judge.py``).

    ``report``: the runner's verified record (``None`` when missing or its signature is wrong);
    ``junit``: the junit XML bytes (``None`` when missing); ``exit_code``: the runner's exit code
    as the sandbox observed it (``None``: killed at the time limit). A run whose tests (or the
    runner itself) a CPU-time limit stopped is a ``timeout`` too, unless it tampered."""
    if exit_code is None:
        return SWEGrade("timeout", 0.0, reason="the tests did not finish in time")
    if report is None and exit_code == CPU_LIMIT_EXIT:
        return SWEGrade("timeout", 0.0, reason=CPU_LIMIT_REASON)
    if report is None:
        return SWEGrade("no_results", 0.0, reason=f"no valid record of the run (exit code {exit_code})")
    try:
        return _judge(task, exit_code, report, junit, partial_credit, tamper_reward)
    except (KeyError, TypeError, ValueError, AttributeError) as e:  # a report of an unexpected shape
        return SWEGrade("rejected", 0.0, reason=f"the record does not read: {type(e).__name__}: {e}"[:500])


def _judge(
    task: GradedTask,
    exit_code: int,
    report: dict[str, Any],
    junit: bytes | None,
    partial_credit: bool,
    tamper_reward: float,
) -> SWEGrade:
    restored = [str(p) for p in report.get("restored", [])]
    stage = report.get("stage")
    tamper = [str(t) for t in report.get("tamper", [])]

    def tampered(more: list[str]) -> SWEGrade:
        reasons = tamper + more
        return SWEGrade(
            "tamper", tamper_reward, reason="; ".join(reasons)[:500], restored=restored, tamper=reasons
        )

    if stage in ("agent_patch_failed", "test_patch_failed"):
        verdict = "patch_failed" if stage == "agent_patch_failed" else "test_patch_failed"
        return SWEGrade(verdict, 0.0, reason=str(report.get("detail", ""))[:500], restored=restored)
    if tamper:
        return tampered([])
    if stage == "tests_finished" and report.get("returned") == -signal.SIGXCPU:
        return SWEGrade("timeout", 0.0, reason=CPU_LIMIT_REASON, restored=restored)
    if stage != "tests_finished":
        return SWEGrade("no_results", 0.0, reason=f"the run stopped at stage {stage!r}", restored=restored)
    returned, exitstatus = report.get("returned"), report.get("exitstatus")
    outcomes: dict[str, str] = dict(report.get("outcomes", {}))
    canaries = [c for c in report.get("canaries", [report.get("canary") or {}]) if c.get("nodeid")]

    def reject(why: str) -> SWEGrade:
        return SWEGrade("rejected", 0.0, reason=why, restored=restored)

    junit_status: dict[tuple[str, str], str] = {}
    if junit is not None:
        if hashlib.sha256(junit).hexdigest() != report.get("junit_sha256"):
            return reject("the junit XML changed after the run")
        try:
            junit_status = parse_junit(junit)
        except ValueError as e:
            return reject(f"junit XML does not parse: {e}")
    for canary in canaries:
        status, in_junit = (
            canary.get("status", "absent"),
            junit_status.get(junit_key(canary["nodeid"]), "absent"),
        )
        if "passed" in (status, in_junit):
            return tampered([f"canary: a test that always fails read passed ({status}/{in_junit})"])
    canaries_failed = bool(canaries) and all(c.get("status") in ("failed", "error") for c in canaries)
    if exit_code == returned and returned not in (0, None) and exitstatus is None and not outcomes:
        # pytest stopped before its session began (a conftest.py that does not import, after an
        # edit broke what it imports: exit code 4): no test ran, which is a failure, not a
        # record to distrust
        return SWEGrade(
            "unresolved",
            0.0,
            False,
            {n: "absent" for n in task.fail_to_pass},
            {n: "absent" for n in task.pass_to_pass},
            reason=f"the tests did not start (pytest exit code {returned}: a conftest.py or the "
            "test configuration did not load)",
            restored=restored,
        )
    if not (exit_code == returned == exitstatus):
        return reject(f"exit code {exit_code} but the run recorded {returned}/{exitstatus}")
    failing = [n for n, s in outcomes.items() if s in ("failed", "error")]
    failing += [c["nodeid"] for c in canaries if c.get("status") in ("failed", "error")]
    if returned == 0 and (failing or report.get("collect_errors") or not outcomes):
        reason = "the canaries failed" if canaries_failed else f"{len(failing)} failing"
        return tampered([f"canary: exit code 0 although {reason}"])
    if returned != 0 and not failing and not report.get("collect_errors") and outcomes:
        return reject(f"exit code {returned} disagrees with the recorded outcomes (none failing)")
    if junit is None:
        return reject("no junit XML")
    wanted = (*task.fail_to_pass, *task.pass_to_pass)
    for node in wanted:
        recorded = outcomes.get(node, "absent")
        in_junit = junit_status.get(junit_key(node), "absent")
        # junit writes an unexpected pass of a non-strict xfail as passed; the record keeps it
        # apart (xpassed) and it never counts as passed
        if (recorded in ("passed", "xpassed")) != (in_junit == "passed"):
            return reject(f"{node}: the runner recorded {recorded}, junit says {in_junit}")
    f2p = {n: outcomes.get(n, "absent") for n in task.fail_to_pass}
    p2p = {n: outcomes.get(n, "absent") for n in task.pass_to_pass}
    f2p_ok = sum(s == "passed" for s in f2p.values())
    p2p_all = all(s == "passed" for s in p2p.values())
    # a canary that was not collected (a repository whose python_functions pattern excludes it)
    # proves nothing either way: the checks above still hold, and a diff cannot change that
    # pattern (the pytest configuration of pyproject.toml/setup.cfg is a tamper reason)
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


def function_of(node: str) -> str:
    """The test function of a pytest node id (``path::[Class::]name``): a parametrized test's ids
    (``name[2-3-5]``) go together."""
    return str(node).partition("[")[0]


def mirror_verdict(
    task: GradedTask, run: GradeRun, tamper_reward: float = 0.0, left: Sequence[str] = ()
) -> SWEGrade | None:
    """The grade of a diff that resolved ``task`` after its *mirror run* (``run``: the
    FAIL_TO_PASS tests again, each value they check equality against changed in the code their
    modules are compiled from, ``_mirror.py``): ``tamper`` when that run found tampering, or when
    a test of an armable function passed there (the same inputs, another expected value, or a
    line at its end that fails: the code under test read the answer from the test or forged the
    pass; or its module was loaded past the change);
    ``None`` when it stands (pure: ``tests/grading/test_mirror.py``). A run that left no
    verdict to read (a record that does not agree with itself, none, a timeout) is that verdict:
    the same diff gave one in the first run, and code that forges a pass where it cannot tell the
    runs apart leaves the mirror run none at random (forging or breaking the run each half the
    time: resolved one time in four, when a run with no verdict let the first run's stand).
    ``left``: FAIL_TO_PASS tests the mirror run left as they are (:func:`mirror_split`), which
    must pass there as in the first run: code that knows which run comes first (the host's page
    cache tells it) forges there only and computes the bug in the mirror run, whose armed tests
    an honest fix fails as well, but not its unchanged ones."""
    grade = judge(task, run.exit_code, run.report, run.junit, tamper_reward=tamper_reward)
    if grade.verdict == "tamper":
        grade.tamper = [f"mirror run: {t}" for t in grade.tamper]
        grade.reason = "; ".join(grade.tamper)[:500]
        return grade
    if grade.verdict not in ("resolved", "unresolved"):
        grade.reason = f"mirror run: {grade.reason}"[:500]
        return grade
    mirror = run.report.get("mirror") or {}
    armable, armed = ({str(a) for a in mirror.get(k, [])} for k in ("armable", "armed"))
    outcomes = dict(run.report.get("outcomes", {}))
    passed = sorted(str(n) for n, s in outcomes.items() if s == "passed" and function_of(n) in armable)
    if not passed:
        named = sorted(str(t) for t in left if outcomes.get(t) != "passed")
        if not named:
            return None
        why = (
            ", left as it was in the mirror run, did not pass there as in the first run: the code computes"
            " another answer when graded again (its first pass was forged)"
        )
    elif all(function_of(n) in armed for n in passed):
        named = passed
        why = (
            " passed with the value it checks against changed (or a failing line where it ends): the code"
            " under test read the answer from the test, or its pass was forged"
        )
    else:  # the module ran, but not as pytest's rewriter compiles it (the hook taken away)
        named = passed
        why = " ran without the mirror's change to its values: its module was loaded past pytest's rewriter"
    more = f" (+{len(named) - 1} more)" if len(named) > 1 else ""
    reason = f"mirror: {named[0]}{more}{why}"
    return SWEGrade("tamper", tamper_reward, reason=reason[:500], restored=grade.restored, tamper=[reason])


def answer_verdicts(run: GradeRun) -> dict[str, str] | None:
    """Each asked test's verdict in an answer run's record (``agree``, ``differ``, ``none``:
    ``_answers.py``), or ``None`` where the run left none."""
    report = run.report or {}
    verdicts = report.get("answers") if report.get("stage") == "answered" else None
    return verdicts if isinstance(verdicts, dict) else None


def answer_verdict(run: GradeRun, tests: Sequence[str], tamper_reward: float = 0.0) -> SWEGrade | None:
    """The grade of a diff that resolved its task after its *answer run* (``_answers.py``): the
    computed side of each check of the answerable FAIL_TO_PASS tests ``tests``, evaluated in a
    process with no test in it and compared outside it with the literal the test expects.
    ``tamper`` when one answered otherwise (its pass in the first run was not the code's: a
    forged report, or an answer read from the test) or when the run left no verdict (an honest
    fix's always does: it answered the same checks in the first run); ``None`` when it stands
    (pure: ``tests/grading/test_answer_run.py``)."""
    verdicts = answer_verdicts(run)
    if verdicts is None:
        report = run.report
        why = "no record" if report is None else f"stage {report.get('stage')!r}"
        reason = f"outside: the answer run left no verdict ({why}, exit {run.exit_code})"
        return SWEGrade("tamper", tamper_reward, reason=reason[:500], tamper=[reason])
    differ = sorted(str(t) for t in tests if verdicts.get(str(t)) == "differ")
    if not differ:
        return None
    more = f" (+{len(differ) - 1} more)" if len(differ) > 1 else ""
    reason = (
        f"outside: {differ[0]}{more} computes another value than the test expects in a process with no"
        " test in it: its pass where the tests ran was not the code's (a forged report, or the answer"
        " read from the test)"
    )
    return SWEGrade("tamper", tamper_reward, reason=reason[:500], tamper=[reason])


def mirror_split(fail_to_pass: Sequence[str]) -> tuple[list[str], list[str]]:
    """``(armed, left)``: the FAIL_TO_PASS tests one mirror run arms and those it leaves as they
    are, by test function (a parametrized test's ids go together): with two functions or more, a
    random nonempty part of them, the other mirror run arming the rest (``SWEGrader._mirrored``);
    with one, all of it. A forger that forges in every run passes a test armed in one of the two,
    one that forges in the first run only fails a test left unchanged, and neither can read which
    is which but from the tests' compiled code."""
    functions = sorted({function_of(t) for t in fail_to_pass})
    chosen = set(functions)
    if len(functions) > 1:
        chosen = set(secrets.SystemRandom().sample(functions, 1 + secrets.randbelow(len(functions) - 1)))
    armed = [t for t in fail_to_pass if function_of(t) in chosen]
    return armed, [t for t in fail_to_pass if function_of(t) not in chosen]


def verify_report(data: bytes | None, key: bytes) -> dict[str, Any] | None:
    """The runner's report if ``data`` is one signed under ``key``; else ``None``."""
    if data is None:
        return None
    try:
        wrapper = json.loads(data)
        payload, sig = wrapper["payload"], wrapper["sig"]
        expected = hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()
        if not isinstance(sig, str) or not hmac.compare_digest(sig, expected):
            return None
        report = json.loads(payload)
    except (ValueError, KeyError, TypeError, AttributeError, UnicodeError, RecursionError):
        return None
    return report if isinstance(report, dict) else None


class SWEGrader:
    """Grades diffs of repository tasks in fresh workspaces (see the module docstring).

    Args:
        workspace: Workspace settings of the grading sandboxes (the same backend and limits as
            the agent's workspaces; the per-command time limit is replaced by ``timeout_s``).
        repos: Where the pristine repositories come from (``problems/swe.py: RepoCache``).
        timeout_s: Time limit of one grading run (apply, restore, tests).
        timeout_factor: A task validated on this machine is graded with ``timeout_factor`` times
            its reference run's wall time (at least ``min_timeout_s``, at most ``timeout_s``): an
            edit that makes the tests hang costs seconds, not ``timeout_s`` of the whole batch's
            wait. ``0`` grades every task with ``timeout_s``.
        min_timeout_s: The floor of that scaled limit (a loaded machine starts sandboxes slower).
        min_cpu_s: Such a task's run also has a CPU-time limit per process: ``timeout_factor``
            times the reference run's CPU time, at least ``min_cpu_s``, at most the wall limit. A
            loop that never ends burns CPU, so it stops there however loaded the machine is (the
            wall-clock floor must leave room for slow sandbox starts; CPU time does not count
            them). ``0``: no CPU limit.
        partial_credit: Reward the fraction of FAIL_TO_PASS tests passed when every PASS_TO_PASS
            test passes (``resolved`` still needs all).
        tamper_reward: Reward of the ``tamper`` verdict (default the failure reward, 0; a
            negative value makes tampering a penalty).
        mirror_check: Grade a diff that resolved its task a second time with the values its
            FAIL_TO_PASS tests check equality against changed (:func:`mirror_verdict`): a pass
            there is ``tamper``, the answer read from the test. A task whose tests have no such
            value (none armed) is run once from then on.
        answer_check: Then run once more without pytest and without the tests in the work tree,
            answering each check of the answerable FAIL_TO_PASS tests (``assert f(2, 3) == 5``)
            with the code's value, compared outside that process with the literal the test
            expects (:func:`answer_verdict`): another value is ``tamper``. The answerable tests
            are those whose reference patch answers every check so (asked by :meth:`validate`).
    """

    def __init__(
        self,
        workspace: WorkspaceConfig | None,
        repos: RepoSource,
        timeout_s: float = 300.0,
        partial_credit: bool = False,
        tamper_reward: float = 0.0,
        timeout_factor: float = 10.0,
        min_timeout_s: float = 20.0,
        min_cpu_s: float = 5.0,
        mirror_check: bool = True,
        answer_check: bool = True,
    ) -> None:
        self.workspace = workspace or WorkspaceConfig()
        self.repos = repos
        self.timeout_s, self.partial_credit, self.tamper_reward = timeout_s, partial_credit, tamper_reward
        self.timeout_factor, self.min_timeout_s, self.min_cpu_s = timeout_factor, min_timeout_s, min_cpu_s
        self.mirror_check, self.answer_check = mirror_check, answer_check
        self._reference_s: dict[Path, tuple[float | None, float | None, tuple[str, ...]]] = {}
        self._unarmed: set[str] = set()
        """Tasks whose mirror run armed no test (the armed tests depend on the task's test files
        alone: a diff's changes to them are restored before)."""
        self._armed: set[str] = set()
        """Tasks whose mirror run armed a test."""

    def mirror_armed(self, task: GradedTask) -> bool | None:
        """Whether a mirror run of ``task`` armed a test (``None``: none ran yet). Where it armed
        none, a pass forged past the child's in-process checks is not caught
        (``scripts/bench_mirror_armed.py`` counts them)."""
        key = _task_key(task)
        return True if key in self._armed else False if key in self._unarmed else None

    def workspace_for(self, task: GradedTask) -> WorkspaceConfig:
        """The workspace settings of ``task``'s sessions: the grader's, with the distributions the
        task's tests import (its ``test_deps``) added to the toolchain."""
        return self.workspace.plus_toolchain(getattr(task, "test_deps", ()))

    @classmethod
    def from_settings(cls, settings: Any, repos: RepoSource) -> SWEGrader:
        """The grader an env's settings describe (``SWESettings``, ``DebugSettings``: their
        ``workspace``, ``grade_timeout_s``, ``grade_timeout_factor``, ``grade_min_timeout_s``,
        ``grade_min_cpu_s``, ``partial_credit``, ``tamper_reward``, ``mirror_check`` and
        ``answer_check``)."""
        s = settings
        return cls(
            s.workspace, repos, s.grade_timeout_s, s.partial_credit, s.tamper_reward,
            s.grade_timeout_factor, s.grade_min_timeout_s, s.grade_min_cpu_s,
            s.mirror_check, s.answer_check,
        )  # fmt: skip

    def time_limit(self, task: GradedTask) -> float:
        """The time limit of one grading run of ``task`` (see ``timeout_factor``)."""
        return self.limits(self.reference_seconds(task), None)[0]

    def cpu_limit(self, task: GradedTask) -> float | None:
        """CPU seconds each process of one grading run of ``task`` may use (see ``min_cpu_s``):
        ``timeout_factor`` times the CPU time of the reference run (its wall time is stretched by
        whatever else the machine ran then), at least ``min_cpu_s``, at most the wall limit;
        ``None``: no limit (the task was not validated here, or the limit is off)."""
        return self.limits(self.reference_seconds(task), self.reference_cpu_seconds(task))[1]

    def limits(self, reference_s: float | None, reference_cpu_s: float | None) -> tuple[float, float | None]:
        """The wall-clock and per-process CPU limits of a run whose reference took ``reference_s``
        seconds and ``reference_cpu_s`` CPU seconds (``None``: not known): the rule of
        :meth:`time_limit` and :meth:`cpu_limit` (synthesis uses it with the clean suite's runs)."""
        if reference_s is None or self.timeout_factor <= 0:
            wall = self.timeout_s
        else:
            wall = min(self.timeout_s, max(self.min_timeout_s, self.timeout_factor * reference_s))
        if reference_cpu_s is None or self.timeout_factor <= 0 or self.min_cpu_s <= 0:
            return wall, None
        return wall, min(wall, max(self.min_cpu_s, self.timeout_factor * reference_cpu_s))

    def reference_seconds(self, task: GradedTask) -> float | None:
        """Wall time of the reference patch's grading run when :meth:`validate` passed ``task`` on
        this machine (read from its marker), else ``None``."""
        return self._reference(task)[0]

    def reference_cpu_seconds(self, task: GradedTask) -> float | None:
        """CPU time of that run's processes (see :meth:`reference_seconds`)."""
        return self._reference(task)[1]

    def answered(self, task: GradedTask) -> list[str]:
        """The FAIL_TO_PASS test functions (``path::[Class::]name``) whose every check the
        reference patch answered with the test's literal in its answer run (:meth:`validate`);
        empty where the task was not validated here or none was."""
        return list(self._reference(task)[2])

    def _reference(self, task: GradedTask) -> tuple[float | None, float | None, tuple[str, ...]]:
        """The wall and CPU seconds of the reference run its validation marker records, and the
        tests its answer run answered."""
        marker = self._validation_marker(task)
        if marker not in self._reference_s:
            try:
                record = json.loads(marker.read_text())
                times = record.get("gold_s"), record.get("gold_cpu_s")
                answered = record.get("answered", [])
            except (OSError, ValueError, AttributeError):
                return None, None, ()  # not validated yet: asked again after validation
            wall, cpu = (float(t) if isinstance(t, int | float) and t > 0 else None for t in times)
            tests = tuple(str(t) for t in answered) if isinstance(answered, list) else ()
            self._reference_s[marker] = wall, cpu, tests
        return self._reference_s[marker]

    def grade(self, task: GradedTask, diff: str | bytes, run_empty: bool = False) -> SWEGrade:
        """The grade of ``diff`` (a ``git diff`` against the task's base commit, ``str`` with
        surrogate escapes or ``bytes``; may be empty).

        An empty diff is ``unresolved`` without a run unless ``run_empty``: the base commit fails
        the FAIL_TO_PASS tests, which :meth:`validate` checked for every task an env trains on."""
        patch = patch_bytes(diff) if diff else b""
        if not patch.strip() and not run_empty:
            return SWEGrade("unresolved", 0.0, reason="no change to the repository")
        if len(patch) > MAX_PATCH_BYTES:
            return SWEGrade(
                "patch_failed", 0.0, reason=f"the diff is {len(patch)} bytes (> {MAX_PATCH_BYTES})"
            )
        start = time.monotonic()
        limit, cpu = self.time_limit(task), self.cpu_limit(task)
        try:
            run = self.run(task, patch, test_files(task), limit, cpu)
        except WorkspaceError as e:  # the grading sandbox did not start: ours, not the agent's
            grade = SWEGrade("infra_error", 0.0, reason=f"{type(e).__name__}: {e}"[:500])
        else:
            grade = judge(task, run.exit_code, run.report, run.junit, self.partial_credit, self.tamper_reward)
            grade.cpu_s = run.cpu_s
            if grade.verdict == "no_results" and run.output.strip():
                grade.reason = f"{grade.reason}: {run.output.strip()[-300:]}"
            if grade.verdict == "timeout" and grade.reason == CPU_LIMIT_REASON:
                if cpu is not None:  # else the code sent itself SIGXCPU: the reason says only that
                    grade.reason = (
                        f"a process of the tests used its {cpu:g} s of CPU time (a loop that never ends?)"
                    )
            elif grade.verdict == "timeout":
                grade.reason = f"the tests did not finish in {limit:g} s"
                if limit < self.timeout_s:
                    gold_s = self.reference_seconds(task)
                    grade.reason += f" (the reference patch's run took {gold_s:.2f} s)"
            # every failing test a reward counts is asked again, a partial one's too: a forged
            # pass of one test of several earns its fraction under partial credit
            paid = grade.resolved or (grade.verdict == "unresolved" and grade.reward > 0)
            passed = [n for n in task.fail_to_pass if grade.fail_to_pass.get(n) == "passed"] if paid else []
            if passed and self.mirror_check:
                grade = self._mirrored(task, patch, grade, passed, limit, cpu)
            passed = passed if grade.verdict in ("resolved", "unresolved") and self.answer_check else []
            # a parametrized test is answered row by row, all of them: asked where each passed
            answered = [
                f for f in self.answered(task) if passed and all(
                    t in passed for t in task.fail_to_pass if function_of(t) == f
                )
            ]  # fmt: skip
            if answered:
                grade = self._answer_checked(task, patch, grade, limit, cpu, answered)
        grade.wall_s = time.monotonic() - start
        return grade

    def _mirrored(
        self,
        task: GradedTask,
        patch: bytes,
        grade: SWEGrade,
        tests: Sequence[str],
        limit: float,
        cpu: float | None,
    ) -> SWEGrade:
        """``grade`` (``resolved``, or a partial credit), or ``tamper`` after the mirror runs of
        the FAIL_TO_PASS tests it passed, ``tests`` (:func:`mirror_verdict`): one that arms every
        such function where there is one, else two in a random order, each arming a random part
        of them (:func:`mirror_split`) and the other the rest, so that every function is armed in
        one run and must pass unchanged in the other."""
        key = _task_key(task)
        if key in self._unarmed or not tests:
            return grade
        armed, left = mirror_split(tests)
        plans = [(armed, left), (left, armed)] if left else [(armed, left)]
        secrets.SystemRandom().shuffle(plans)
        armable, cpu_s = False, grade.cpu_s
        for armed_here, unchanged in plans:
            mirror = {"tests": armed_here, "salt": 1 + secrets.randbelow(9998)}
            try:
                # the same test files as the first run: which modules ran must not tell the runs apart
                run = self.run(task, patch, test_files(task), limit, cpu, mirror=mirror)
            except WorkspaceError:  # ours, not the agent's: the first run's grade stands
                return grade
            if run.report is not None and (run.report.get("mirror") or {}).get("armable", [None]):
                armable = True
                self._armed.add(key)  # a run that armed a test: marked before its verdict, as it was
            cpu_s = cpu_s + run.cpu_s if cpu_s is not None and run.cpu_s is not None else None
            verdict = mirror_verdict(task, run, self.tamper_reward, unchanged)
            if verdict is not None:
                verdict.fail_to_pass, verdict.pass_to_pass = grade.fail_to_pass, grade.pass_to_pass
                verdict.cpu_s = cpu_s
                return verdict
        if not armable and set(tests) == set(task.fail_to_pass):
            # what the parent read in the files (every failing function asked in one run)
            self._unarmed.add(key)
        return grade

    def _answer_checked(
        self,
        task: GradedTask,
        patch: bytes,
        grade: SWEGrade,
        limit: float,
        cpu: float | None,
        tests: list[str],
    ) -> SWEGrade:
        """``grade`` (``resolved``, or a partial credit), or ``tamper`` after the answer run of
        ``tests``, the answerable FAIL_TO_PASS tests it passed (:func:`answer_verdict`)."""
        try:
            run = self.run(task, patch, test_files(task), limit, cpu, answers=tests)
        except WorkspaceError:  # ours, not the agent's: the first run's grade stands
            return grade
        verdict = answer_verdict(run, tests, self.tamper_reward)
        if verdict is None:
            return grade
        verdict.fail_to_pass, verdict.pass_to_pass, verdict.restored = (
            grade.fail_to_pass, grade.pass_to_pass, grade.restored,
        )  # fmt: skip
        verdict.cpu_s = grade.cpu_s + run.cpu_s if grade.cpu_s is not None and run.cpu_s is not None else None
        return verdict

    def run(
        self,
        task: Any,
        patch: bytes,
        tests: Sequence[str],
        timeout_s: float | None = None,
        cpu_s: float | None = None,
        full_assertions: bool = False,
        mirror: dict[str, Any] | None = None,
        answers: Sequence[str] | Mapping[str, int] | None = None,
    ) -> GradeRun:
        """One grading run of ``patch`` (bytes) on ``task`` running the test files ``tests``,
        killed after ``timeout_s`` (``None``: the grader's ``timeout_s``); ``cpu_s``: each of its
        processes stopped after that many CPU seconds (``None``: no such limit).
        ``full_assertions``: failure messages hold whole values (pytest's ``-vv`` for assertions),
        for a problem statement; grading leaves it off (a huge diff of a wrong answer costs time).
        ``mirror``: the run is a mirror run (``{"tests": FAIL_TO_PASS node ids, "salt": int}``,
        see :func:`mirror_verdict`). ``answers``: the run is an answer run of these FAIL_TO_PASS
        test functions (no pytest; see :func:`answer_verdict`); a mapping gives each the number of
        its node ids the task lists, and one with another number of rows is not answered.

        Raises:
            WorkspaceError: the grading sandbox did not start (an infrastructure failure).
        """
        key = secrets.token_bytes(32)
        limit = self.timeout_s if timeout_s is None else timeout_s
        asked: dict[str, Any] | None = None
        if answers is not None:
            asked = {"tests": list(answers), "timeout_s": limit}
            if isinstance(answers, Mapping):
                asked["rows"] = {str(f): int(n) for f, n in answers.items()}
        try:
            repo = self.repos.get(task)
            ws = open_workspace(
                self.workspace_for(task),
                repo,
                binds={str(path): f"{RUNNER_MOUNT}/{path.name}" for path in RUNNER_FILES},
                scratch={RESULTS_MOUNT: RESULTS_TMPFS_BYTES},
            )
        except Exception as e:  # noqa: BLE001 - any start failure is ours, not the agent's
            raise WorkspaceError(f"the grading sandbox did not start: {type(e).__name__}: {e}") from e
        with ws:
            try:
                for name, data in (
                    ("agent.patch", patch),
                    ("test.patch", patch_bytes(task.test_patch) if task.test_patch else b""),
                    (
                        "spec.json",
                        json.dumps(
                            {
                                "test_files": list(tests),
                                "test_support": list(getattr(task, "test_support", ())),
                                "full_assertions": full_assertions,
                            }
                        ).encode(),
                    ),
                    ("key", key),
                    *((("mirror.json", json.dumps(mirror).encode()),) if mirror else ()),
                    *((("answers.json", json.dumps(asked).encode()),) if asked else ()),
                ):
                    ws.write_file(f"{RESULTS_MOUNT}/{name}", data, confine=False)
            except Exception as e:  # noqa: BLE001 - nothing of the agent's has run yet
                raise WorkspaceError(
                    f"the grading sandbox failed before the run: {type(e).__name__}: {e}"
                ) from e
            out = ws.run(
                f"python -I -S {RUNNER_MOUNT}/{RUNNER.name} {RESULTS_MOUNT}",
                timeout=limit,
                max_output=2000,
                cpu_s=cpu_s,
            )
            # every process of the run is gone now (the server kills them after each command):
            # what is on the results tmpfs stays as it is while it is read
            report = verify_report(_read_result(ws, "report.json"), key)
            junit = _read_result(ws, "junit.xml")
        return GradeRun(
            None if out.timed_out else out.exit_code, report, junit, out.output[-1000:], out.cpu_s
        )

    def validate(self, task: GradedTask) -> str | None:
        """Why ``task`` cannot be trained on (``None``: it can): its reference patch must resolve
        it, and the unchanged base must not, failing every FAIL_TO_PASS test. The answer is cached beside the prepared repository,
        keyed by everything grading reads, so each task is validated once per machine."""
        if self.is_validated(task):
            return None
        marker = self._validation_marker(task)
        gold = self.grade(task, task.patch)
        if gold.infra_error:
            raise RuntimeError(f"{task.instance_id}: grading the reference patch failed: {gold.reason}")
        if not gold.resolved:
            return f"the reference patch does not resolve it ({gold.verdict}: {gold.reason})"
        base = self.grade(task, "", run_empty=True)
        if base.resolved or base.infra_error:
            return f"the unchanged base commit is {base.verdict}"
        # a test the base already passes is no FAIL_TO_PASS: a fix of the others would resolve it
        passing = sorted(test for test, status in base.fail_to_pass.items() if status == "passed")
        if passing:
            return f"{len(passing)} FAIL_TO_PASS test(s) pass on the unchanged base commit: {listed(passing)}"
        cpu = None if gold.cpu_s is None else round(gold.cpu_s, 3)
        record: dict[str, Any] = {"gold_s": round(gold.wall_s, 3), "gold_cpu_s": cpu}
        if self.answer_check:
            record["answered"] = self._answerable(task, gold)
        marker.write_text(json.dumps(record))
        self._reference_s.pop(marker, None)
        return None

    def _answerable(self, task: GradedTask, gold: SWEGrade) -> list[str]:
        """The FAIL_TO_PASS test functions the reference patch's answer run answered with every
        literal they expect (:meth:`answered`): only those are asked of a diff, so no honest fix
        is asked what the reference's own code does not answer outside pytest (a value built by
        a fixture, one that depends on the other tests, a repr that is no literal)."""
        functions = sorted({function_of(t) for t in task.fail_to_pass})
        # a parametrized test is answered whole: only where the task lists every row of it (a
        # row in no list, one the task found flaky, must not decide a grade)
        listed = (*task.fail_to_pass, *task.pass_to_pass)
        rows = {f: sum(function_of(t) == f for t in listed) for f in functions}
        limit = self.limits(gold.wall_s, None)[0]
        try:
            run = self.run(task, patch_bytes(task.patch), test_files(task), limit, answers=rows)
        except WorkspaceError:
            return []
        verdicts = answer_verdicts(run) or {}
        return sorted(str(t) for t, v in verdicts.items() if v == "agree")

    def is_validated(self, task: GradedTask) -> bool:
        """Whether :meth:`validate` passed ``task`` on this machine before (its marker is there)."""
        return self._validation_marker(task).is_file()

    def _validation_marker(self, task: GradedTask) -> Path:
        """The file that says ``task`` passed :meth:`validate` here, keyed by all grading reads."""
        key = hashlib.sha256(
            json.dumps(
                [
                    VALIDATION_VERSION,
                    task.base_commit,
                    task.patch,
                    task.test_patch,
                    list(task.fail_to_pass),
                    list(task.pass_to_pass),
                    # what the tests may import decides whether they collect
                    list(self.workspace_for(task).toolchain),
                    # a reference patch that passes a mirrored test fails validation with it on
                    self.mirror_check,
                    self.answer_check,
                ]
            ).encode()
        ).hexdigest()[:16]
        repo = self.repos.path_for(task)
        return repo.with_name(f"{repo.name}.valid-{key}")


VALIDATION_VERSION = 23
"""Part of the validation cache key: bump when grading changes what a run decides (3: the marker
records the reference run's CPU time, which the CPU-time limit scales; 4: the reference patch
must not pass a mirrored test; 5: the mirror changes the compiled test module, not its file, and
a test module pytest's rewriter did not compile is tampering; 6: the mirror arms raises-checks;
7: a changed configuration file or module is read whole, as pytest and the interpreter read it,
links too, the base's ``pythonpath`` is a root of the import path, and the comparison check asks
any comparison method of a class the diff wrote; 8: the mirror arms equality checks against
computed values, a ``.gitattributes`` of the diff's is put back first, every path the diff writes
counts as changed, and a ``setup.cfg`` with ``\\r`` line ends or a configuration that is a link is
read as pytest reads it; 9: a test with no check every run reaches is armed where it ends, at each
``return`` and the end of its body; 10: a name of the tests' own modules holding code of a changed
file is tampering, and a debugging task's helpers of its tests are restored with them; 11: the
child's report channel is checked at each write to hold its socket still (and a write that fails
ends the child), the mirror run sends nothing of its own on it, and a mirror run that left no
verdict is the grade; 12: the tests' own literals are compared with their text; 13: a name they
assign a function of their own files to is one of their names; 14: every FAIL_TO_PASS test fails
on the base, and the child records functions' defaults and the grader's own objects; 15: the
comparison check asks a loose ``__eq__`` of the diff's (values near a plain one, those it keeps, a
built-in subclass's own equality) and names an object equal to anything that no test module names;
with two failing functions or more, two mirror runs each arm a part and leave the rest unchanged;
16: the marker records the tests the reference's answer run answered; 17: the answer run answers
parametrized tests (every row) and expected sides folded from literals; 18: a parametrized test
only where the task lists every row of it; 19: rows bound to a module name, ``CASES``,
answered; 20: raises-checks answered; 21: every other assert a truth check; 22: comparisons with
written values (``<``, ``in``, ``pytest.approx``, ``assertAlmostEqual``) answered, an ``and``
split, a numpy scalar answers as the plain one it equals; 23: so does a number of another kind,
a ``Fraction`` or a ``Decimal``)."""


def _task_key(task: GradedTask) -> str:
    """What the armed tests of a task's mirror run depend on: its repository and test files."""
    parts = [getattr(task, "instance_id", ""), task.base_commit, task.test_patch, list(task.fail_to_pass)]
    return hashlib.sha256(json.dumps(parts).encode()).hexdigest()


def _read_result(ws: Workspace, name: str) -> bytes | None:
    """A file the run left on the results tmpfs, or ``None`` (missing, not a regular file, a
    symlink, larger than :data:`MAX_RESULT_BYTES`, or the session died under the run)."""
    try:
        data = ws.read_file(f"{RESULTS_MOUNT}/{name}", max_bytes=MAX_RESULT_BYTES + 1, confine=False)
    except WorkspaceError:
        return None
    return data if len(data) <= MAX_RESULT_BYTES else None
