"""Grading a repository episode from its diff alone, in a fresh sandbox workspace, so that no edit
can fake a pass: shared by the SWE env, the debugging gym and the debugging tasks' own
measurement (``repo.py``; the trusted in-sandbox runner ``_runner.py`` and its static tamper scan
``_scan.py``). Sits above ``sandbox/`` and below ``problems/`` and ``envs/``."""

from lit_codeRL.grading.repo import (
    GradeRun,
    SWEGrade,
    SWEGrader,
    judge,
    junit_key,
    parse_junit,
    patch_bytes,
    tamper_kind,
    test_files,
)

__all__ = [
    "GradeRun",
    "SWEGrade",
    "SWEGrader",
    "judge",
    "junit_key",
    "parse_junit",
    "patch_bytes",
    "tamper_kind",
    "test_files",
]
