"""The signature of the function a problem asks for, when its source gives none: read off the tests."""

from __future__ import annotations

import ast

from lit_codeRL import pyparse


def signature_from_tests(entry_point: str, io_pairs: tuple[tuple[str, str], ...]) -> tuple[str, list[str]]:
    """``(header line, parameter names)`` of ``entry_point`` as its first test calls it, e.g.
    ``("def add(x0, x1):", ["x0", "x1"])`` for the io pair ``("2, 3", "5")``.

    Positional arguments become ``x0, x1, ...``; keyword arguments keep their names. Without io pairs
    the function takes no parameters.
    """
    params: list[str] = []
    if io_pairs:
        call = pyparse.parse(f"f({io_pairs[0][0]})", mode="eval").body
        assert isinstance(call, ast.Call)
        params = [f"x{i}" for i in range(len(call.args))] + [kw.arg for kw in call.keywords if kw.arg]
    return f"def {entry_point}({', '.join(params)}):", params
