"""``ast.parse`` that is safe to call from several threads at once.

CPython before 3.13 keeps the AST constructor's recursion counter per interpreter, not per thread
(gh-106905, gh-95185): two threads converting trees at once can leave it off and raise
``SystemError: AST constructor recursion depth mismatch`` for a perfectly valid source. The
sandbox pool grades a batch from a thread pool, so every parse in the library goes through one
lock; a parse takes microseconds, the lock costs nothing measurable.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, mode: str = "exec") -> ast.AST:
    """``ast.parse(source, mode=mode)`` under a process-wide lock. Raises what ``ast.parse`` raises."""
    with _LOCK:
        return ast.parse(source, mode=mode)
