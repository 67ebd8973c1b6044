"""Validating candidate bugs by running the tests: FAIL_TO_PASS and PASS_TO_PASS are measured.

Every run is the grader's own (``grading/repo.py``): a fresh sandbox workspace from the pristine
repository, the candidate's diff applied, the trusted runner, statuses read from its signed record
and junit XML, never from stdout (``problems/debug_repo.py: _run_tests``). The clean suite runs
``clean_runs`` times first: tests that fail in any clean run (or flip between runs) are neither
FAIL_TO_PASS nor PASS_TO_PASS. A candidate is kept (:func:`classify`) when

* its run finished (no timeout, no sandbox failure) and collected exactly the clean run's test ids
  (a bug that breaks an import would otherwise turn a whole module "failing": SWE-smith's early
  rule, fixed in its PR #95; R2E-Gym demands identical id sets too);
* at least one clean-passing test fails (FAIL_TO_PASS), at most ``max_fail_to_pass`` of them;
* at least ``min_pass_to_pass`` clean-passing tests still pass (PASS_TO_PASS).

A candidate's run has the limits a grade of a validated task has (``SWEGrader.time_limit``): the
grader's ``timeout_factor`` times the clean runs' wall time (at least ``min_timeout_s``) and CPU
time per process (at least ``min_cpu_s``). Bugs that make a loop never end are common (a dropped
``i += 1``, an inverted step); each would otherwise hold a worker for the grader's whole
``timeout_s`` (300 s), and they are dropped anyway.
"""

from __future__ import annotations

import logging
import re
import xml.etree.ElementTree as ET
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

from lit_codeRL.grading import SWEGrader
from lit_codeRL.grading.repo import junit_key
from lit_codeRL.problems.debug_repo import _run_tests
from lit_codeRL.problems.swe import SWETask
from lit_codeRL.problems.synth import run_cache
from lit_codeRL.problems.synth.candidates import Candidate

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class SuiteRun:
    """One run of the test modules: status and failure message per node id."""

    verdict: str
    """The grader's verdict of the run (``resolved``/``unresolved`` when it finished)."""
    statuses: dict[str, str]
    """Node id -> ``passed``/``failed``/``error``/``skipped``."""
    messages: dict[str, str] = field(default_factory=dict)
    """Node id -> its junit failure message (the assertion with expected and actual values)."""
    collect_errors: tuple[str, ...] = ()
    reason: str = ""
    wall_s: float = 0.0
    cpu_s: float | None = None
    """CPU time of the run's processes (``None``: not known)."""
    output: str = ""
    """The end of what the run printed (see ``debug_repo._Run.output``)."""
    collect_reasons: dict[str, str] = field(default_factory=dict)
    """Node id of a collection error -> why (pytest's last ``E`` line: ``ModuleNotFoundError: No
    module named 'six'``)."""


@dataclass(frozen=True)
class Baseline:
    """The clean suite: every test id it collects and those that passed in every clean run."""

    ids: frozenset[str]
    passing: tuple[str, ...]
    wall_s: float | None = None
    """The slowest clean run's wall time (``None``: not measured)."""
    cpu_s: float | None = None
    """The most CPU time a clean run used (``None``: not known)."""
    unstable: tuple[str, ...] = ()
    """Test ids some clean runs collected and others did not, left out of ``ids``: a
    parametrization named after objects hashed by address (a set holding ``None`` on Python
    before 3.12, ``isodate``'s), which no grading run can name again."""
    failing: tuple[str, ...] = ()
    """Test ids that failed or errored in some clean run (of ``ids``, not ``passing``): never
    graded, counted in the report. Empty in a baseline cached before it was recorded."""
    first_failure: str = ""
    """``node: message`` of the first of ``failing`` that has a message (what the warning that
    names them says of why: ``async def functions are not natively supported``)."""


@dataclass(frozen=True)
class Bug:
    """A validated candidate."""

    candidate: Candidate
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    messages: dict[str, str]
    """Failure messages of the FAIL_TO_PASS tests."""


def _junit_problems(junit: bytes | None) -> list[tuple[tuple[str, str], ET.Element]]:
    """``((classname, name), element)`` of each ``failure``/``error`` of a junit file (none when
    it does not parse)."""
    if not junit:
        return []
    try:
        root = ET.fromstring(junit)
    except ET.ParseError:
        return []
    return [
        ((case.get("classname", ""), case.get("name", "")), child)
        for case in root.iter("testcase")
        for child in case
        if child.tag in ("failure", "error")
    ]


_SHORTENED = re.compile(r"(?:\.\.\.)?\n\[(?:\+\d+ more lines?|truncated); full report in element text\]\Z")
"""The last line pytest (9.1 on) puts on a ``message`` attribute it cut to 500 characters."""


def whole_message(message: str, text: str) -> str:
    """``message`` as the test raised it where pytest cut it (:data:`_SHORTENED`): the element
    ``text`` when it is the message itself (``pytest.fail(..., pytrace=False)``, which the
    held-out answers fail with: 64 of more-itertools' 1,500 were lost), else the ``E`` lines
    of its last block (the exception's own lines, never the code quoted above them), each only
    when it goes on from what pytest kept; else what it kept, without its note."""
    cut = _SHORTENED.search(message)
    if cut is None:
        return message
    kept = message[: cut.start()]
    lines = text.splitlines()
    marked = [line == "E" or line.startswith("E ") for line in lines]  # not "Example.py:3: ..."
    end = len(lines)
    while end and not marked[end - 1]:
        end -= 1
    start = end
    while start and marked[start - 1]:
        start -= 1
    block = lines[start:end]
    if block:
        # "E" and the indent of the first line: the exception's lines are marked alike
        width = len(block[0]) - len(block[0][1:].lstrip(" "))
        block = [line[width:] for line in block]
    label, _, rest = kept.partition(": ")  # "Failed: " is on the message, not on its text
    for whole in ("\n".join(block), text, f"{label}: {text}" if rest else ""):
        if whole and whole.startswith(kept):
            return whole
    return kept


def failure_messages(junit: bytes | None, node_ids: Sequence[str]) -> dict[str, str]:
    """The ``message`` attribute of each failed or erroring test case among ``node_ids`` (pytest
    puts the assertion there, with its rewritten values; the traceback text is not read: it
    quotes the code under test, which would show the bug), whole where pytest cut it
    (:func:`whole_message`)."""
    by_key: dict[tuple[str, str], str] = {}
    for key, element in _junit_problems(junit):
        if element.get("message"):
            by_key.setdefault(key, whole_message(element.get("message", ""), element.text or ""))
    found = {node: by_key.get(junit_key(node), "") for node in node_ids}
    return {node: message for node, message in found.items() if message}


def collect_reasons(junit: bytes | None, nodes: Sequence[str]) -> dict[str, str]:
    """Why each of ``nodes`` (collection errors: ``tests/t.py``, ``tests/t.py::C``) did not
    collect: the last ``E`` line of its junit error (the exception pytest printed), else its
    last line, else the error's message. Read for the user's one-line error only (the test code
    is the user's own)."""
    if not nodes:  # every run that collected: its junit is not parsed a second time
        return {}
    by_key: dict[tuple[str, str], str] = {}
    for key, element in _junit_problems(junit):
        if element.tag == "error":
            lines = (element.text or "").splitlines()
            said = [line[1:].strip() for line in lines if line.startswith("E ")]
            # no E line: pytest's own words (a nose-style yield test: "'yield' keyword is allowed
            # in fixtures, but not in tests (test_x)"), else the message ("collection failure")
            said = said or [line.strip() for line in lines if line.strip()] or [element.get("message", "")]
            by_key.setdefault(key, " ".join(said[-1].split())[:200])
    out = {}
    for node in nodes:
        module, name = junit_key(node)
        # pytest's junit names a module's collection error by the module alone (classname "")
        why = by_key.get((module, name) if name else ("", module))
        if why:
            out[node] = why
    return out


def run_suite(
    grader: SWEGrader,
    task: SWETask,
    diff: str,
    modules: Sequence[str],
    timeout_s: float | None = None,
    cpu_s: float | None = None,
) -> SuiteRun:
    """Run every test of ``modules`` on ``task``'s base with ``diff`` applied (see the module
    docstring), within ``timeout_s`` (``None``: the grader's) and ``cpu_s`` CPU seconds per process.
    Raises ``RuntimeError`` when the sandbox failed (ours, not the candidate's)."""
    # whole values in the messages: a statement shows what a user would see with ``pytest -vv``
    run = _run_tests(grader, task, diff, modules, timeout_s, cpu_s, full_assertions=True)
    failed = [node for node, status in run.fail_to_pass.items() if status != "passed"]
    return SuiteRun(
        run.verdict,
        dict(run.fail_to_pass),
        failure_messages(run.junit, failed),
        tuple(run.collect_errors),
        run.reason,
        run.wall_s,
        run.cpu_s,
        run.output,
        collect_reasons(run.junit, run.collect_errors),
    )


class SuiteDoesNotCollect(ValueError):
    """The clean suite has collection errors: ``nodes`` (test modules, or a directory whose
    ``conftest.py`` or ``__init__.py`` fails), with why where pytest said (``reasons``)."""

    def __init__(self, nodes: Sequence[str], reasons: Mapping[str, str] | None = None) -> None:
        self.nodes = tuple(nodes)
        self.reasons = dict(reasons or {})
        super().__init__(
            f"the clean test suite does not collect: {why_not_collected(self.nodes, self.reasons)}"
        )


def why_not_collected(nodes: Sequence[str], reasons: Mapping[str, str]) -> str:
    """``nodes`` grouped by reason, the commonest first: ``ModuleNotFoundError: No module named
    'astroid' (tests/a.py, tests/b.py); ModuleNotFoundError: No module named 'six' (tests/c.py)``
    (a missing test dependency is named once, with what needs it); those pytest gave no reason
    for last."""
    groups: dict[str, list[str]] = {}
    for node in nodes:
        groups.setdefault(reasons.get(node, ""), []).append(node)
    parts = []
    for why, members in sorted(groups.items(), key=lambda item: (not item[0], -len(item[1]), item[0])):
        shown = ", ".join(members[:3]) + (f", and {len(members) - 3} more" if len(members) > 3 else "")
        parts.append(f"{why} ({shown})" if why else shown)
    text = "; ".join(parts)
    return text if len(text) <= 600 else text[:595] + " ..."


def baseline(
    grader: SWEGrader, task: SWETask, modules: Sequence[str], clean_runs: int = 2, cache: Path | None = None
) -> Baseline:
    """The clean suite run ``clean_runs`` times (read from ``cache``, a :func:`run_cache.tree_dir`,
    when it holds them). Raises ``ValueError`` when it does not run cleanly (a timeout, a
    collection error, no test) or no test passes in every run."""
    path = cache / f"baseline-{max(1, clean_runs)}.json" if cache else None
    data = run_cache.load(path)
    if data is not None:
        try:
            return Baseline(
                frozenset(data["ids"]),
                tuple(data["passing"]),
                data["wall_s"],
                data["cpu_s"],
                tuple(data.get("unstable", ())),
                tuple(data.get("failing", ())),
                str(data.get("first_failure", "")),
            )
        except (KeyError, TypeError):
            pass
    clean = _measure_baseline(grader, task, modules, clean_runs)
    run_cache.store(path, {**asdict(clean), "ids": sorted(clean.ids)})
    return clean


def _measure_baseline(grader: SWEGrader, task: SWETask, modules: Sequence[str], clean_runs: int) -> Baseline:
    runs: list[SuiteRun] = []
    for _ in range(max(1, clean_runs)):  # checked one by one: a suite that hangs stops at its first
        run = run_suite(grader, task, "", modules)
        if run.verdict == "timeout":
            raise ValueError(
                f"the clean test suite did not run: timeout ({run.reason}; the limit is "
                f"{grader.timeout_s:g} s: a test that never ends?)"
            )
        if run.verdict not in ("resolved", "unresolved"):
            ended = (
                ": the test process ended before pytest finished (a test or conftest.py that calls "
                "sys.exit or os._exit, or kills its process?)"
                if run.verdict in ("rejected", "no_results")
                else ""
            )
            raise ValueError(
                f"the clean test suite did not run: {run.verdict} ({run.reason}){ended}"
                f"{_printed_error(run.output) if ended else ''}{_changes_its_own_files(run)}"
            )
        if run.collect_errors:
            raise SuiteDoesNotCollect(run.collect_errors, run.collect_reasons)
        runs.append(run)
    first = runs[0]
    if not first.statuses:
        if first.reason:  # pytest stopped before collecting (a conftest that does not load)
            raise ValueError(f"the clean test suite: {first.reason}{_printed_error(first.output)}")
        raise ValueError(f"no test collected from {', '.join(modules)[:300]}{_printed_error(first.output)}")
    # ids every run collected: the others are named after something that differs from process to
    # process, and no later run could be graded on them
    seen = {node for run in runs for node in run.statuses}
    varying = {_function(node) for node in seen if not all(node in run.statuses for run in runs)}
    # every id of such a parametrized test: one that two runs happened to name alike is no steadier
    stable = [node for node in first.statuses if _function(node) not in varying]
    unstable = sorted(seen - set(stable))
    if not stable:
        raise ValueError(
            f"the clean test suite collects different tests from run to run: each of its test ids "
            f"differs ({', '.join(unstable[:3])}, ...)"
        )
    passing = tuple(node for node in stable if all(run.statuses.get(node) == "passed" for run in runs))
    if not passing:
        raise ValueError(f"no test passes on the clean repository: {_why_none_passes(runs)}")
    cpu = [run.cpu_s for run in runs]
    failing = [node for node in stable if any(run.statuses.get(node) in ("failed", "error") for run in runs)]
    said = [(node, run.messages[node]) for node in failing for run in runs if run.messages.get(node)]
    return Baseline(
        frozenset(stable),
        passing,
        max(run.wall_s for run in runs),
        None if None in cpu else max(c for c in cpu if c is not None),
        tuple(unstable),
        tuple(failing),
        _said(*said[0]) if said else "",
    )


def _changes_its_own_files(run: SuiteRun) -> str:
    """Why a clean run is ``tamper`` when the suite itself changed files among its tests (aiofiles
    renames and deletes files under ``tests/resources`` through the code under test): grading
    watches those files, since code under test that rewrites what the tests read forges their
    answers, and it cannot tell the test asking for the change from the code making it."""
    if run.verdict != "tamper" or "while the tests ran" not in run.reason:
        return ""
    return (
        ": its own tests change files among the tests (they write, rename or delete them in place), "
        "which grading cannot tell from the code under test rewriting what the tests read; this "
        "repository gives no task (tests that write under tmp_path do)"
    )


def _function(node: str) -> str:
    """The test a node id names, without its parameters (``t.py::test_x[a-b]`` -> ``t.py::test_x``)."""
    return node.split("[", 1)[0]


def _printed_error(output: str) -> str:
    """``: <pytest's error line>`` from the end of a run's output, or nothing: ``E
    ModuleNotFoundError: No module named 'hypothesis'`` under ``ImportError while loading
    conftest``; the last ``INTERNALERROR>`` line when pytest itself failed (``filterwarnings =
    error`` and a marker of a plugin the sandbox lacks); ``mainloop: caught unexpected
    SystemExit!`` when importing a test module exits (a module-level ``unittest.main()``)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = (
        [line for line in lines if line.startswith("E ")]
        or [line for line in lines if line.startswith("INTERNALERROR>") and "File " not in line]
        or [line for line in lines if "Error" in line or "error:" in line or line.startswith("mainloop:")]
    )
    return f": {' '.join(errors[-1].split())[:200]}" if errors else ""


def _why_none_passes(runs: Sequence[SuiteRun]) -> str:
    """What the clean runs said instead (a repository that needs a build, a service or a package
    the sandbox lacks fails every test the same way): the statuses counted, and the first
    message."""
    first = runs[0]
    counts = Counter(first.statuses.values())
    said = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    node = next(iter(first.messages), None)
    if node is None:
        return said
    return f"{said}; {_said(node, first.messages[node])}"


def _said(node: str, message: str) -> str:
    """``node: message`` on one line, the message cut at 200 characters, and what to do when it
    says pytest had no plugin to run an ``async def`` test."""
    message = " ".join(message.split())
    hint = (
        " (name the suite's async plugin, pytest-asyncio or anyio, in --test-deps)"
        if "async def functions are not natively supported" in message
        else ""
    )
    return f"{node}: {message[:200]}{hint}"


def candidate_limits(grader: SWEGrader, clean: Baseline) -> tuple[float, float | None]:
    """The wall-clock and per-process CPU limits of a candidate's run (see the module docstring):
    the grader's own rule for a validated task (``SWEGrader.limits``), the clean suite standing
    in for the reference (no CPU limit when its wall time was not measured)."""
    return grader.limits(clean.wall_s, clean.cpu_s if clean.wall_s is not None else None)


def classify(
    clean: Baseline, run: SuiteRun, max_fail_to_pass: int, min_pass_to_pass: int
) -> tuple[tuple[str, ...], tuple[str, ...]] | str:
    """``(FAIL_TO_PASS, PASS_TO_PASS)`` of a candidate's run, or why it is rejected (pure)."""
    if run.verdict == "timeout":
        return "timeout"
    if run.verdict not in ("resolved", "unresolved"):
        return f"run {run.verdict}"
    if run.collect_errors:
        return "collection error"
    if not run.statuses:
        return "no test ran"  # pytest stopped before its session (a conftest that does not import)
    if not clean.ids <= set(run.statuses) or (not clean.unstable and set(run.statuses) != clean.ids):
        return "test ids differ"  # beside ids that differ from run to run anyway (Baseline.unstable)
    fail = tuple(node for node in clean.passing if run.statuses.get(node) != "passed")
    keep = tuple(node for node in clean.passing if run.statuses.get(node) == "passed")
    if not fail:
        return "no test fails"
    if len(fail) > max_fail_to_pass:
        return "too many tests fail"
    if len(keep) < min_pass_to_pass:
        return "too few tests still pass"
    return fail, keep


SAME_FAILURES = "same failing tests as another bug of its function"


def validate_functions(
    groups: dict[str, list[Candidate]],
    check: Callable[[Candidate], tuple[tuple[str, ...], tuple[str, ...], dict[str, str]] | str],
    per_function: int,
    tries_per_function: int,
    workers: int,
) -> tuple[list[Bug], dict[str, int]]:
    """Try each function's candidates in order until ``per_function`` are kept (at most
    ``tries_per_function`` tried; a bug failing the same tests as one already kept of its function
    is not kept: SWE-smith de-duplicates on (function, FAIL_TO_PASS)); functions run ``workers``
    at a time. Returns the bugs (in
    function order) and how many candidates were rejected for each reason."""

    def one_function(group: list[Candidate]) -> tuple[list[Bug], list[str]]:
        kept: list[Bug] = []
        reasons: list[str] = []
        for candidate in group[:tries_per_function]:
            if len(kept) >= per_function:
                break
            outcome = check(candidate)
            if isinstance(outcome, str):
                reasons.append(outcome)
            elif any(bug.fail_to_pass == outcome[0] for bug in kept):
                # the tests cannot tell it from a bug already kept: the same task to a learner
                reasons.append(SAME_FAILURES)
            else:
                kept.append(Bug(candidate, *outcome))
        return kept, reasons

    bugs: list[Bug] = []
    rejected: dict[str, int] = {}
    with ThreadPoolExecutor(max(1, workers)) as pool:
        for kept, reasons in pool.map(one_function, list(groups.values())):
            bugs += kept
            for reason in reasons:
                rejected[reason] = rejected.get(reason, 0) + 1
    return bugs, rejected


FLAKY_FAILURES = "flaky: its failing tests passed in a second run"


def remeasure(
    bugs: Sequence[Bug],
    run_again: Callable[[Candidate], SuiteRun],
    min_pass_to_pass: int,
    workers: int,
) -> tuple[list[Bug], tuple[str, ...], dict[str, int]]:
    """The kept ``bugs`` measured a second time (``run_again``): a flaky test passes the clean runs
    one time in ``2**clean_runs`` and can then fail in a candidate's one run, a FAIL_TO_PASS that
    no fix makes pass for sure. A test whose outcome differs between the two runs of one bug is
    left out of every bug's lists (as one failing in a clean run is: a flaky test), and a bug whose
    second run did not finish, or that is left without a failing test or with fewer than
    ``min_pass_to_pass`` passing, is dropped. Returns the bugs, the flaky tests and the
    rejections."""
    with ThreadPoolExecutor(max(1, workers)) as pool:
        second = list(pool.map(run_again, [bug.candidate for bug in bugs]))
    flaky: set[str] = set()
    for bug, run in zip(bugs, second, strict=True):
        if run.verdict in ("resolved", "unresolved"):
            flaky |= {node for node in bug.fail_to_pass if run.statuses.get(node) == "passed"}
            flaky |= {node for node in bug.pass_to_pass if run.statuses.get(node) != "passed"}
    kept: list[Bug] = []
    rejected: Counter[str] = Counter()
    for bug, run in zip(bugs, second, strict=True):
        fail = tuple(node for node in bug.fail_to_pass if node not in flaky)
        keep = tuple(node for node in bug.pass_to_pass if node not in flaky)
        if run.verdict not in ("resolved", "unresolved"):
            rejected[f"second run: {run.verdict}"] += 1
        elif not fail:
            rejected[FLAKY_FAILURES] += 1
        elif len(keep) < min_pass_to_pass:
            rejected["too few tests still pass"] += 1
        else:
            kept.append(Bug(bug.candidate, fail, keep, {n: m for n, m in bug.messages.items() if n in fail}))
    return kept, tuple(sorted(flaky)), dict(rejected)


def workspace_check(
    grader: SWEGrader,
    task: SWETask,
    modules: Sequence[str],
    clean: Baseline,
    max_fail_to_pass: int,
    min_pass_to_pass: int,
    cache: Path | None = None,
) -> Callable[[Candidate], tuple[tuple[str, ...], tuple[str, ...], dict[str, str]] | str]:
    """The check :func:`validate_functions` runs per candidate for a repository: its suite run
    in a sandbox workspace within :func:`candidate_limits` (read from ``cache``, a
    :func:`run_cache.tree_dir`, when it holds it; a sandbox failure is never cached), classified."""
    measure = workspace_run(grader, task, modules, clean, cache)

    def check(candidate: Candidate) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, str]] | str:
        run = measure(candidate)
        if run.verdict == "sandbox error":
            return "sandbox error"
        outcome = classify(clean, run, max_fail_to_pass, min_pass_to_pass)
        if isinstance(outcome, str):
            return outcome
        fail, keep = outcome
        return fail, keep, {node: run.messages.get(node, "") for node in fail}

    return check


def workspace_run(
    grader: SWEGrader,
    task: SWETask,
    modules: Sequence[str],
    clean: Baseline,
    cache: Path | None = None,
    attempt: int = 0,
) -> Callable[[Candidate], SuiteRun]:
    """A candidate's suite run in a sandbox workspace within :func:`candidate_limits` (read from
    ``cache`` when it holds it; a sandbox failure, verdict ``sandbox error``, is never cached);
    ``attempt``: which run of the candidate (:func:`remeasure`'s second is ``1``)."""
    limits = candidate_limits(grader, clean)

    def measure(candidate: Candidate) -> SuiteRun:
        path = run_cache.run_path(cache, candidate.diff, limits, attempt) if cache else None
        run = _cached_run(run_cache.load(path))
        if run is None:
            try:
                run = run_suite(grader, task, candidate.diff, modules, *limits)
            except RuntimeError as err:
                log.warning("synth: %s: %s", candidate.function, err)
                return SuiteRun("sandbox error", {}, reason=str(err))
            if run.verdict in ("resolved", "unresolved", "timeout"):  # not what a crash left
                run_cache.store(path, asdict(run))
        return run

    return measure


def _cached_run(data: dict | None) -> SuiteRun | None:
    if data is None:
        return None
    try:
        return SuiteRun(
            verdict=data["verdict"],
            statuses=dict(data["statuses"]),
            messages=dict(data["messages"]),
            collect_errors=tuple(data["collect_errors"]),
            reason=data["reason"],
            wall_s=data["wall_s"],
            cpu_s=data["cpu_s"],
        )
    except (KeyError, TypeError, ValueError):
        return None
