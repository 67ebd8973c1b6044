"""The action space of ``CodeGenerationEnv``: edit operations, then a vocabulary of code tokens.

Argument slots (``<arg0>``, ``<arg1>`` ...) render as the current problem's parameter names, so one
action set serves every signature; ``vocab_size`` pads the vocabulary with further integer literals
(the design's default is 5,000 code tokens).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence

from lit_codeRL import pyparse
from lit_codeRL.problems.record import Problem
from lit_codeRL.problems.signature import signature_from_tests

NEWLINE, INDENT, DEDENT, DELETE, END = "<newline>", "<indent>", "<dedent>", "<delete>", "<end>"
EDIT_OPS: tuple[str, ...] = (NEWLINE, INDENT, DEDENT, DELETE, END)
"""Edit operations; they are always the first actions, in this order."""

DEFAULT_CODE_TOKENS: tuple[str, ...] = (
    # statements and keywords
    "return", "if", "elif", "else", "for", "in", "while", "not", "and", "or", "pass", "break",
    "continue", "True", "False", "None",
    # operators and punctuation (no ``**``: a few tokens of it can build numbers that hang the run)
    "+", "-", "*", "/", "//", "%", "==", "!=", "<", "<=", ">", ">=", "=", "+=", "-=",
    "(", ")", "[", "]", ",", ":",
    # builtins
    "abs", "max", "min", "len", "sum", "range", "sorted", "int", "str", "bool", "round",
    # literals
    "0", "1", "2", "10",
)  # fmt: skip
"""Core code tokens of the design's default vocabulary (argument slots are added per problem set)."""

ARG_SLOT = re.compile(r"^<arg(\d+)>$")


def signature_of(problem: Problem) -> tuple[str, list[str]]:
    """``(header line, parameter names)`` of the function the agent writes, e.g.
    ``("def add(a, b):", ["a", "b"])``, from the starter code (or the entry point and tests)."""
    if problem.starter_code:
        header = next(
            (ln.strip() for ln in problem.starter_code.splitlines() if ln.strip().startswith("def ")), None
        )
        if header:
            tree = pyparse.parse(header + "\n    pass\n")
            func = tree.body[0]
            assert isinstance(func, ast.FunctionDef)
            return header, [a.arg for a in func.args.args]
    if not problem.entry_point:
        raise ValueError(f"problem {problem.task_id} has neither starter code nor an entry point")
    return signature_from_tests(problem.entry_point, problem.io_pairs)


def statement_of(problem: Problem) -> str:
    """The task statement without the starter code a loader may append to the prompt (seed JSON
    does): the signature is already the env's pre-filled first line and its own observation features."""
    return problem.prompt.removesuffix((problem.starter_code or "").strip()).strip()


def build_vocabulary(
    problems: Sequence[Problem],
    code_tokens: Sequence[str] | None = None,
    vocab_size: int | None = None,
) -> tuple[str, ...]:
    """Code tokens of the action space (edit ops excluded).

    ``code_tokens`` (default :data:`DEFAULT_CODE_TOKENS`) plus one argument slot per parameter of the
    widest signature and the integers the docstrings mention; then, if ``vocab_size`` is given, more
    integer literals until there are exactly ``vocab_size`` tokens.
    """
    tokens = list(dict.fromkeys(code_tokens if code_tokens is not None else DEFAULT_CODE_TOKENS))
    max_arity = max((len(signature_of(p)[1]) for p in problems), default=0)
    tokens += [f"<arg{i}>" for i in range(max_arity)]
    for p in problems:
        tokens += re.findall(r"\b\d{1,3}\b", statement_of(p))
    tokens = list(dict.fromkeys(tokens))
    if vocab_size is not None:
        if vocab_size < len(tokens):
            raise ValueError(
                f"vocab_size={vocab_size} is smaller than the {len(tokens)} tokens the problems need"
            )
        present = set(tokens)
        n = 0
        while len(tokens) < vocab_size:
            if str(n) not in present:
                tokens.append(str(n))
            n += 1
    return tuple(tokens)
