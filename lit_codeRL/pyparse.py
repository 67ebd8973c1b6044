"""``ast.parse`` that is safe to call from several threads at once.

CPython before 3.13 keeps the AST constructor's recursion counter per interpreter, not per thread
(gh-106905, gh-95185): two threads converting trees at once can leave it off and raise
``SystemError: AST constructor recursion depth mismatch`` for a perfectly valid source. The
sandbox pool grades a batch from a thread pool, so every parse in the library goes through one
lock; a parse takes microseconds, the lock costs nothing measurable.

The sources parsed are data (task programs, agents' and models' code), so the warnings the
compiler raises about them (``SyntaxWarning: invalid escape sequence '\\w'`` on Python 3.12, a
``DeprecationWarning`` before) are not the user's to read: they are silenced here, where the
lock also keeps two parses from changing the warning filters at once (Python 3.12 printed 54 such
lines into a GPU run's log while it built the MBPP debugging tasks).
"""

from __future__ import annotations

import ast
import threading
import warnings

_LOCK = threading.Lock()


def parse(source: str, mode: str = "exec") -> ast.AST:
    """``ast.parse(source, mode=mode)`` under a process-wide lock, the source's own warnings
    silenced. Raises what ``ast.parse`` raises."""
    with _LOCK, warnings.catch_warnings():
        warnings.simplefilter("ignore", SyntaxWarning)
        warnings.simplefilter("ignore", DeprecationWarning)
        return ast.parse(source, mode=mode)
