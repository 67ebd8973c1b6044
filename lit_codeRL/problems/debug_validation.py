"""Which debugging tasks are worth training on: the fix resolves the task and the base does not."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from lit_codeRL.grading import SWEGrader
from lit_codeRL.problems.debug_task import DebugTask, DebugTaskInvalid

# The name the loader had before it was split: users filter and tests capture these warnings by it.
log = logging.getLogger("lit_codeRL.problems.debug")


def validate_debug_tasks(
    tasks: Sequence[DebugTask],
    grader: SWEGrader,
    root: str | Path | None = None,
    workers: int = 1,
) -> list[DebugTask]:
    """The tasks worth training on, in order; each other one dropped with a warning saying why
    (:func:`why_not_trainable`)."""
    reasons = why_not_trainable(tasks, grader, root, workers)
    for task, why in zip(tasks, reasons, strict=True):
        if why:
            log.warning("debug task %s dropped: %s", task.task_id, why)
    dropped = sum(1 for why in reasons if why)
    if dropped:
        log.warning("%d of %d debug tasks dropped by validation", dropped, len(tasks))
    return [task for task, why in zip(tasks, reasons, strict=True) if not why]


def why_not_trainable(
    tasks: Sequence[DebugTask],
    grader: SWEGrader,
    root: str | Path | None = None,
    workers: int = 1,
    sandbox_errors_as_reasons: bool = False,
) -> list[str | None]:
    """Why each task cannot be trained on (``None``: it can), in order.

    A task with a reference fix is kept when the fix resolves it and the untouched base does not
    (:meth:`SWEGrader.validate` on the converted task, cached per machine). A task without one is
    kept when its base fails a test, with a warning that it is unvalidated (no grade can reach 1
    for sure). ``workers`` tasks are checked at a time (each check is sandboxed subprocesses). One
    INFO line says how many were validated on this machine before (a marker beside the prepared
    repository: ``scripts/gpu_stage.sh`` ships them) and how long the others took. A sandbox that
    fails under a task raises ``RuntimeError``, or with ``sandbox_errors_as_reasons`` is that
    task's reason (``sandbox error: ...``).
    """
    known: set[str] = set()

    def check(task: DebugTask) -> str | None:
        try:
            return check_one(task)
        except RuntimeError as err:
            if not sandbox_errors_as_reasons:
                raise
            return f"sandbox error: {err}"

    def check_one(task: DebugTask) -> str | None:
        try:
            swe = task.to_swe_task(root, grader)
        except DebugTaskInvalid as err:
            return str(err).removeprefix(f"{task.task_id}: ")
        if grader.is_validated(swe):
            known.add(task.task_id)  # a set's add is atomic under the GIL
            return None
        if task.fix is None:
            log.warning(
                "debug task %s kept unvalidated: it has no reference fix (its base fails %d test(s))",
                task.task_id,
                len(swe.fail_to_pass),
            )
            return None
        return grader.validate(swe)

    start = time.monotonic()
    with ThreadPoolExecutor(max(1, workers)) as pool:
        reasons = list(pool.map(check, tasks))
    log.info(
        "validated %d debug tasks: %d on this machine before, the other %d in %.0f s",
        len(tasks),
        len(known),
        len(tasks) - len(known),
        time.monotonic() - start,
    )
    return reasons
