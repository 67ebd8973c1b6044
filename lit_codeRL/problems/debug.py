"""Debugging tasks: a buggy Python program and its pytest tests, graded like SWE tasks.

A :class:`DebugTask` is the starting files (the program with its bug and the tests that show it),
a description of what the program should do, and usually a reference fix. The debugging gym lets
an agent run the tests under pdb and edit the program; the reward is *not* computed where the
agent worked. Instead :meth:`DebugTask.to_swe_task` turns the task into an
:class:`~lit_codeRL.problems.swe.SWETask` whose base commit holds the starting files, so the SWE
grader (``grading/repo.py``) grades the episode's ``git diff`` in a fresh workspace: the diff
is applied, every test file it touched is restored from the base (the grader's own
``is_test_path`` rule decides which files are tests here too), and a trusted runner reports the
outcomes through junit XML and an HMAC-signed record, never through stdout. Agents that edit the
tests, add a ``conftest.py`` or print "3 passed" score 0, as the SWE reward-hack suite checks.

Sources (:func:`load_debug_tasks`):

* ``embedded`` / ``debug``: the tasks shipped in ``data/debug/tasks.jsonl`` (self-written, built
  by ``scripts/make_debug_tasks.py`` from ``data/debug/src``).
* A ``.jsonl``/``.json``/``.parquet`` file, or a directory of them, whose rows are either
  debugging rows as in the SWE-PDB design (``files: [{path, content}]``, ``task_name`` or ``id``,
  optional ``entry_point``, ``description``, ``fix``, nested ``extra_info``), or KodCode rows
  (``question``, ``solution``, ``test``): a KodCode row holds a correct solution, not a bug, so it
  becomes a task whose ``solution.py`` is a stub that raises ``NotImplementedError`` and whose fix
  is the solution. KodCode's data is CC BY-NC 4.0: it is read from the user's files, never shipped.
  A test file outside the grader's test-path rule (SWE-PDB rows use ``test.py``) is renamed
  ``test_<name>`` and the entry point follows, or an agent's edit of it would survive grading.

The FAIL_TO_PASS and PASS_TO_PASS node ids a grade needs are not in the files: they are measured
once per machine by running the tests at the base in a sandbox workspace through the grader's
trusted runner (tests that fail there are FAIL_TO_PASS, tests that pass are PASS_TO_PASS), and
cached beside the task's git directory, keyed by a hash of its files.

The work is split by job, every public name re-exported here: ``debug_task`` (the record, its SWE
task, the ``Problem`` it rides in), ``debug_repo`` (the git repository, the fix diff, the runs
that measure the base, the cache files), ``debug_validation`` (which tasks to keep),
``debug_rows`` (loading rows) and ``kodcode_stub`` (the stub a KodCode row starts from).
"""

from __future__ import annotations

from lit_codeRL.problems.debug_rows import (
    EMBEDDED_FILE,
    EMBEDDED_NAMES,
    KODCODE_SOLUTION,
    KODCODE_TEST,
    embedded_tasks_file,
    load_debug_tasks,
    task_from_row,
)
from lit_codeRL.problems.debug_task import (
    CACHE_ENV,
    DEFAULT_CACHE,
    DEFAULT_TEST_COMMAND,
    FAILING,
    DebugTask,
    DebugTaskInvalid,
    cache_root,
    debug_problem,
    debug_task,
    default_grader,
)
from lit_codeRL.problems.debug_validation import validate_debug_tasks, why_not_trainable
from lit_codeRL.problems.kodcode_stub import kodcode_stub

__all__ = [
    "CACHE_ENV",
    "DEFAULT_CACHE",
    "DEFAULT_TEST_COMMAND",
    "EMBEDDED_FILE",
    "EMBEDDED_NAMES",
    "FAILING",
    "KODCODE_SOLUTION",
    "KODCODE_TEST",
    "DebugTask",
    "DebugTaskInvalid",
    "cache_root",
    "debug_problem",
    "debug_task",
    "default_grader",
    "embedded_tasks_file",
    "kodcode_stub",
    "load_debug_tasks",
    "task_from_row",
    "validate_debug_tasks",
    "why_not_trainable",
]
