"""Task synthesis: bugs injected into working code, validated by its tests (``lit-coderl synth``).

SWE-smith's procedural recipe (arXiv 2504.21798) on this project's sandbox: from a repository
whose test suite passes, one AST mutation per candidate (:mod:`.mutations`, on a concrete syntax
tree so the diff is minimal), grouped by function (:mod:`.candidates`); each candidate validated by
running the suite in a sandbox workspace, FAIL_TO_PASS and PASS_TO_PASS measured against clean
runs (:mod:`.validate`); a statement from what a user sees, checked not to leak the change
(:mod:`.statements`); rows in SWE-bench and debugging formats (:mod:`.tasks`). Sources: any
repository (:mod:`.repository`), the shipped SWE repositories and debugging programs, and MBPP's
reference solutions as single-file tasks made at run time (:mod:`.mbpp`, ``debug:mbpp:<path>``).
The command line is :mod:`.cli`.
"""
