"""The validity gate of the code-output game: does a program the writer wrote count?

A program counts only if it is short, parses, passes a static (AST) check of its imports and
names, and then, run ``GateSettings.hash_seed_runs`` times (8) in the sandbox under a trusted
harness (``_harness.py``), each time with another hash seed, and ``malloc_runs`` times (2) more
under the C allocator (``PYTHONMALLOC=malloc``: objects at other addresses), finishes within the time and step
budgets, prints something of bounded size with no memory address in it, and prints the same thing
every time. The predictor then has to predict exactly that output; anything the predictor could
not know (a hash seed, an address, the clock) must not be in it.

Two layers enforce the same rules, because a static check can be fooled:

* **static** (here, in the trainer): the AST may import only ``GateSettings.allowed_imports``, may
  not name a private or dunder attribute, a dunder name or an introspection attribute
  (:data:`BANNED_ATTRIBUTES`), and may not mention a builtin of :data:`BANNED_NAMES`;
* **runtime** (in the sandbox, before the program's first instruction): imports go through a guard
  that hands the program only the allowed modules, the banned builtins are stubs that refuse, the
  compiled bytecode is scanned for private and introspection attributes (every attribute a program
  without ``getattr`` can reach is named there), ``print`` writes into a bounded buffer and a
  ``sys.settrace`` counter stops the program past ``max_steps``. The verdict comes back through the
  sandbox's own channels (``ExecutionResult.verdict`` and ``exception_type``), never from the
  program's output.

Hash seeds: the sandbox's workers run ``python -I``, which ignores ``PYTHONHASHSEED``; each worker
has its own random seed and every program it forks shares it, so two runs that land on one worker
would hash alike. The harness therefore starts a fresh interpreter per run with ``PYTHONHASHSEED``
set to a seed given here. The first run's seed is fixed (:data:`TARGET_HASH_SEED`), so the target
is the same whenever the gate judges the program again; the others are drawn at random, all
distinct. Cost: the first runs of a batch go out together, and only programs whose first run is
clean get the other ``hash_seed_runs + malloc_runs - 1`` runs (again all at once, spread over the workers), so a
refused program costs one interpreter start.

Format strings: ``str.format``/``str.format_map`` look attributes and items up by names written in
a string (``"{0.__self__}".format(print)``), which is ``getattr`` with a string, so the attribute
names ``format`` and ``format_map`` are refused like ``getattr`` (see :data:`BANNED_ATTRIBUTES`).
The other formatting routes do no attribute lookup by a string: an f-string's lookups are compiled
into its bytecode (checked like any attribute), an f-string built at run time needs ``eval``,
``format(x, spec)`` and ``%`` take a spec or mapping keys only, and ``string.Formatter`` is hidden.
"""

from __future__ import annotations

import ast
import re
import secrets
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

from lit_codeRL import pyparse
from lit_codeRL.envs.base import Executor
from lit_codeRL.envs.code_game.grading import format_prediction, normalise_output
from lit_codeRL.sandbox.types import ExecutionResult, Program, Verdict

GateReason = Literal[
    "ok",
    "no_program",
    "empty",
    "too_long",
    "syntax_error",
    "banned_import",
    "banned_name",
    "import_blocked",
    "timeout",
    "step_budget",
    "runtime_error",
    "memory_limit",
    "output_limit",
    "no_output",
    "address_in_output",
    "nondeterministic",
    "unanswerable_output",
    "sandbox_error",
]

REASONS: dict[str, str] = {
    "ok": "valid: the program counts, and ``GateResult.output`` is what the predictor must predict",
    "no_program": "no program in the answer: no closed ```python block, and the answer is not a "
    "program by itself (extract_program found none; set by the runner, not by the gate)",
    "empty": "no program (blank text; the runner passes '' when extract_program found none)",
    "too_long": "longer than max_program_chars",
    "syntax_error": "does not parse",
    "banned_import": "static: imports a module outside allowed_imports, or a relative import",
    "banned_name": "static or runtime: names a private/dunder attribute, a dunder name, an "
    "introspection attribute or a banned builtin",
    "import_blocked": "runtime: tried to import a module outside allowed_imports",
    "timeout": "ran past timeout_s of wall-clock time",
    "step_budget": "ran past max_steps traced steps (or removed the step counter)",
    "runtime_error": "raised (any exception, SystemExit included) or its interpreter was killed",
    "memory_limit": "ran out of memory (the sandbox's address-space limit)",
    "output_limit": "printed more than max_output_chars characters",
    "no_output": "printed fewer than min_output_chars characters (after stripping)",
    "address_in_output": "its output holds a memory address (0x and 6+ hex digits)",
    "nondeterministic": "runs with different hash seeds printed different outputs",
    "unanswerable_output": "no answer states the output: it holds an [OUTPUT]/[/OUTPUT] marker or a "
    "<think>...</think> section, which parse_prediction cuts (grading.format_prediction finds none), "
    "or the text of one of the policy's special tokens (<|im_end|>...: the tokenizer makes it the "
    "token itself, which ends the answer), so every prediction would be wrong by construction",
    "sandbox_error": "infrastructure failure: no verdict on the program; the runner masks it "
    "(no reward, out of the loss). Never the writer's fault",
}
"""Every ``GateResult.reason``, a closed set, with what it means."""

BANNED_NAMES: dict[str, str] = {
    "eval": "runs a string as code: a route around every static check",
    "exec": "runs a string as code: a route around every static check",
    "compile": "makes code objects from strings: a route around every static check",
    "__import__": "imports a module named at run time: a route around the import rule",
    "open": "files: reads what the predictor cannot see, writes outside stdout",
    "input": "reads stdin: the output would depend on input the predictor does not get",
    "globals": "the namespace as a dict: reaches __builtins__ and names by string",
    "locals": "the namespace as a dict: reaches names by string",
    "vars": "an object's __dict__: private and dunder attributes by string",
    "getattr": "attribute access by a computed name: a route around the attribute rule",
    "setattr": "attribute access by a computed name: a route around the attribute rule",
    "delattr": "attribute access by a computed name: a route around the attribute rule",
    "breakpoint": "starts a debugger (imports pdb, reads stdin)",
    "help": "imports pydoc and reads files",
    "exit": "raises SystemExit from inside the harness; a program ends by running off its end",
    "quit": "raises SystemExit from inside the harness; a program ends by running off its end",
    "copyright": "a site builtin that reads files",
    "credits": "a site builtin that reads files",
    "license": "a site builtin that reads files",
    "memoryview": "raw views of object buffers, the usual start of memory-level exploits; no short "
    "program needs one",
    "id": "an object's memory address: differs between runs in a way the predictor cannot know",
    "hash": "an object's hash is its memory address, and the address's low bits (inside its page) "
    "are the same in every run: hash(object()) % 256 passed every run yet no predictor can know it; "
    "a string's hash follows the hash seed",
}
"""Builtins a program may not mention (static) and that refuse when called (runtime), and why."""

BANNED_ATTRIBUTES: frozenset[str] = frozenset(
    {
        # generators, coroutines, async generators and tracebacks lead to frames without a single
        # underscore; frames lead to every caller's globals and builtins (the harness's ``sys``)
        *("gi_frame", "gi_code", "gi_yieldfrom", "gi_running", "gi_suspended"),
        *("cr_frame", "cr_code", "cr_await", "cr_origin", "cr_running", "cr_suspended"),
        *("ag_frame", "ag_code", "ag_await", "ag_running"),
        *("tb_frame", "tb_next", "tb_lasti", "tb_lineno"),
        *("f_back", "f_builtins", "f_code", "f_globals", "f_locals", "f_lasti", "f_lineno"),
        *("f_trace", "f_trace_lines", "f_trace_opcodes"),
        *("co_code", "co_consts", "co_names", "co_varnames", "co_filename"),
        # a format field ``{0.name}``/``{0[key]}`` looks up a name written in a string: the same
        # as getattr with a string, which reaches dunders no AST or bytecode shows
        # (``"{0.__self__...}".format(print)``); f-strings do all the formatting a program needs
        *("format", "format_map"),
    }
)
"""Attributes without an underscore a program may not name: introspection (frames, code objects)
and the format-string methods (``str.format``, ``str.format_map``: lookups by a string). Every
attribute that starts with ``_`` is refused too."""

VETTED_IMPORTS: dict[str, frozenset[str]] = {
    "math": frozenset(),
    "cmath": frozenset(),
    "itertools": frozenset(),
    "collections": frozenset(),
    "collections.abc": frozenset(),
    "heapq": frozenset(),
    "bisect": frozenset(),
    "re": frozenset(),
    "json": frozenset(),
    "random": frozenset(),
    "statistics": frozenset(),
    "fractions": frozenset(),
    "decimal": frozenset(),
    "textwrap": frozenset(),
    "copy": frozenset(),
    "numbers": frozenset(),
    # attribute lookup by a program-supplied name: Formatter().get_field("0.__class__", ...)
    "string": frozenset({"Formatter"}),
    # attrgetter/methodcaller: attribute lookup by a program-supplied name
    "operator": frozenset({"attrgetter", "methodcaller"}),
    # update_wrapper/wraps copy attributes named by the program; singledispatch evaluates string
    # annotations (typing.get_type_hints runs eval)
    "functools": frozenset({"update_wrapper", "wraps", "singledispatch", "singledispatchmethod"}),
}
"""The modules ``allowed_imports`` may name, each with the members the program does not see.

Allowing a module hands the program all of its public functions, so each was checked for: running
a program-supplied string as code (``typing``, ``timeit``, ``dataclasses``-style code generation
from unchecked text), looking attributes up by a program-supplied name (``operator.attrgetter``,
``string.Formatter``, ``functools.update_wrapper``), importing by name (``importlib``, ``pickle``),
files, processes, threads, the clock (``time``, ``datetime``: a date both runs agree on is still
unknowable to the predictor) and the interpreter (``sys``, ``gc``, ``inspect``). Add a module only
after the same audit. The program gets a copy of each module holding its public, non-module
attributes (``re.enum`` is not there, so ``re.enum.sys`` is no way to ``sys``)."""

PROGRAM_FILENAME = "<codegame>"
"""The filename the harness compiles the program with (tracebacks, and the import guard's test of
who is importing)."""

ALLOCATORS = ("pymalloc", "malloc")
"""The allocators a run can use: CPython's own (the target's, and every hash-seed run's) and the C
library's (``GateSettings.malloc_runs``), under which objects sit at other addresses."""

TARGET_HASH_SEED = 0
"""``PYTHONHASHSEED`` of a program's first run, whose output is the target: fixed, so judging the
program again (or on another machine with the same Python) records the same target."""

_HARNESS_TEXT = (Path(__file__).parent / "_harness.py").read_text(encoding="utf-8")
_STARTUP_S = 10.0
"""Time the harness allows the fresh interpreter to start; not counted against ``timeout_s``."""
_ADDRESS = re.compile(r"0x[0-9a-fA-F]{6,}")
_STEPS = re.compile(r"codegame-steps (\d+)")
_PYTHON_TAGS = ("", "python", "python3", "py")
_ANY_FENCE = re.compile(r"^[ \t]*```", re.MULTILINE)


@dataclass
class GateSettings:
    """What a written program must satisfy to count."""

    allowed_imports: list[str] = field(default_factory=list)
    """Modules the program may import (``import x``, ``import x.y``, ``from x import y``); empty:
    no import at all. Each must be one of :data:`VETTED_IMPORTS` (see there why)."""
    timeout_s: float = 2.0
    """Wall-clock limit of one run, from the program's first instruction (the harness's own
    interpreter start is not counted)."""
    max_steps: int = 100_000
    """Traced steps one run may take: ``sys.settrace`` events with per-opcode events on (call,
    line, opcode, return, exception), about one per bytecode instruction executed, library code
    included; CRUXEval's filter allows 100k traced bytecode steps. Unlike the timeout it does not
    depend on the machine's load."""
    max_output_chars: int = 1000
    """Most characters the program may print (before any stripping)."""
    max_program_chars: int = 2000
    """Most characters of program source."""
    min_output_chars: int = 1
    """Fewest characters the output must keep after stripping whitespace (0: printing nothing is
    allowed)."""
    hash_seed_runs: int = 8
    """Runs of each program, each with its own hash seed, that must all print the same output. A
    program whose output is a fair coin over hash seeds (``print(list({"x", "y"}))``) passes only
    when all k runs agree: probability 2 * 0.5^k; k = 8 gives 0.78% < 1% (two runs: 50%)."""
    malloc_runs: int = 2
    """Further runs, after the ``hash_seed_runs``, under the C allocator (``PYTHONMALLOC=malloc``,
    each with another random hash seed), that must print the same output too. The harness's heap
    shift moves only a program's first allocations; one that allocates past the shifted blocks
    (thousands of objects) gets fresh pymalloc pools at the same offsets inside their pages in
    every run, so an address bit it prints late (``repr`` sliced past ``0x``, a set of objects'
    order) was the same in all pymalloc runs. Under malloc the same objects sit elsewhere, the
    output differs and the program is refused as ``nondeterministic``. 0: no such run."""

    def __post_init__(self) -> None:
        if isinstance(self.allowed_imports, str):
            raise ValueError("allowed_imports must be a list of module names, not one string")
        self.allowed_imports = list(self.allowed_imports)
        for name in self.allowed_imports:
            if name not in VETTED_IMPORTS:
                raise ValueError(
                    f"allowed_imports: {name!r} is not one of the vetted modules {sorted(VETTED_IMPORTS)}; "
                    "a module is vetted after checking it cannot run program strings as code, look up "
                    "attributes or import modules by a program-supplied name, or reach files, processes, "
                    "the clock or the interpreter (gate.VETTED_IMPORTS)"
                )
        if not self.timeout_s > 0:
            raise ValueError(f"timeout_s must be > 0, got {self.timeout_s}")
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        if self.max_program_chars < 1:
            raise ValueError(f"max_program_chars must be >= 1, got {self.max_program_chars}")
        if self.min_output_chars < 0:
            raise ValueError(f"min_output_chars must be >= 0, got {self.min_output_chars}")
        if self.malloc_runs < 0:
            raise ValueError(f"malloc_runs must be >= 0, got {self.malloc_runs}")
        if self.hash_seed_runs < 2:
            raise ValueError(
                f"hash_seed_runs must be >= 2 (a single run cannot see a hash seed), got {self.hash_seed_runs}"
            )
        if self.max_output_chars < max(1, self.min_output_chars):
            raise ValueError(
                f"max_output_chars ({self.max_output_chars}) must be >= 1 and >= min_output_chars "
                f"({self.min_output_chars})"
            )


@dataclass
class GateResult:
    """The gate's verdict on one program."""

    valid: bool
    """Whether the program counts (``reason == "ok"``)."""
    reason: str
    """One of :data:`REASONS`."""
    output: str
    """What the program printed in its first run (hash seed :data:`TARGET_HASH_SEED`) when the
    runs ran to their end; the target of the predictions when ``valid``. ``""`` otherwise."""
    detail: dict = field(default_factory=dict)
    """JSON-ready specifics: ``stage`` (``static``/``runtime``); for static refusals the offending
    ``name`` and ``line``; for runs the ``seeds`` and per run its reason, verdict, exception,
    informational ``steps`` and wall time (and both outputs when they differ)."""

    def to_dict(self) -> dict:
        return {"valid": self.valid, "reason": self.reason, "output": self.output, "detail": self.detail}


def extract_program(text: str) -> str | None:
    """The program in the writer's answer, or ``None`` when there is none.

    The rule: the first closed fenced block tagged ``python``, ``python3``, ``py`` or untagged
    (its text, with a trailing newline); else, when the answer has no fence at all, the whole text
    (stripped) if it parses as Python; else ``None``. A block tagged with another language, an
    unclosed fence (a cut-off answer) or prose that does not parse is no program.
    """
    if not isinstance(text, str):
        return None
    text = text.replace("\r\n", "\n")
    body = _first_block(text)
    if body is not None:
        body = body.strip("\n")
        return body + "\n" if body.strip() else None
    if _ANY_FENCE.search(text):
        return None
    body = text.strip()
    if not body:
        return None
    try:
        pyparse.parse(body)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return body + "\n"


def _first_block(text: str) -> str | None:
    """The body of the first closed fenced block tagged with a name of :data:`_PYTHON_TAGS` (its
    opening line, then the next line that is only a fence), or ``None``. Line by line, not a regex:
    a lazy body scanned the rest of the text from every opening fence, quadratic in the number
    of them, and the writer's text is the policy's."""
    lines = text.split("\n")
    start, at = None, 0
    for i, line in enumerate(lines):
        fence = line.strip(" \t")
        if start is None:  # an opening line needs a newline after it
            if i < len(lines) - 1 and fence.startswith("```") and fence[3:].lstrip(" \t") in _PYTHON_TAGS:
                start = at + len(line) + 1
        elif fence == "```":
            return text[start:at]
        at += len(line) + 1
    return None


def gate_programs(
    sandbox: Executor,
    sources: Sequence[str],
    settings: GateSettings | None = None,
    unstatable: Sequence[str] = (),
) -> list[GateResult]:
    """Judge each program of ``sources`` (in order): the static check here, then
    ``settings.hash_seed_runs`` runs of the survivors in ``sandbox``, each with another hash seed
    (the first runs of all programs at once, then the rest for those whose first run was clean, so
    they spread over the workers). ``unstatable``: texts no prediction can hold, the predictor's
    special tokens' (``policy.special_tokens.special_texts``); an output holding one is
    ``unanswerable_output``. See the module docstring and :data:`REASONS`."""
    return _gate(sandbox, sources, settings or GateSettings(), unstatable=unstatable)


def _gate(
    sandbox: Executor,
    sources: Sequence[str],
    settings: GateSettings,
    *,
    static_check: bool = True,
    seeds: Sequence[int] | None = None,
    unstatable: Sequence[str] = (),
) -> list[GateResult]:
    """:func:`gate_programs` with two hooks for tests only: ``static_check=False`` skips the AST
    parse and check so the runtime guards face a program the static check would refuse, and
    ``seeds`` fixes the hash seeds, the target's first (equal seeds show that the seed is what
    decides; their count replaces ``hash_seed_runs``)."""
    _check_capture(sandbox, settings)
    results: list[GateResult | None] = []
    for source in sources:
        source = source if isinstance(source, str) else ""
        results.append(_precheck(source, settings, static_check))
    running = {
        i: (
            src,
            list(seeds) if seeds is not None else _run_seeds(settings.hash_seed_runs + settings.malloc_runs),
        )
        for i, (src, res) in enumerate(zip(sources, results, strict=True))
        if res is None
    }
    # The target runs first: most refused programs fail there (an error, a budget, no output), and
    # running their other seeds would only repeat the refusal.
    first = {
        i: sandbox.submit(_program(src, run_seeds[0], settings, _allocator(0, settings)))
        for i, (src, run_seeds) in running.items()
    }
    runs = {i: [future.result()] for i, future in first.items()}
    rest = {
        i: [
            sandbox.submit(_program(src, seed, settings, _allocator(k, settings)))
            for k, seed in enumerate(run_seeds[1:], start=1)
        ]
        for i, (src, run_seeds) in running.items()
        if _judge_runs(runs[i], run_seeds[:1], settings, unstatable).valid
    }
    for i, futures in rest.items():
        runs[i].extend(f.result() for f in futures)
    for i, (_, run_seeds) in running.items():
        results[i] = _judge_runs(runs[i], run_seeds[: len(runs[i])], settings, unstatable)
    return [r for r in results if r is not None]


def _allocator(k: int, settings: GateSettings) -> str:
    """The allocator of run ``k`` (0: the target): pymalloc for the ``hash_seed_runs``, malloc after."""
    return ALLOCATORS[1] if k >= settings.hash_seed_runs else ALLOCATORS[0]


def _run_seeds(runs: int) -> list[int]:
    """:data:`TARGET_HASH_SEED` and ``runs - 1`` random seeds, all distinct, in [1, 2**32 - 1]."""
    seeds = [TARGET_HASH_SEED]
    while len(seeds) < runs:
        seed = secrets.randbelow(2**32 - 1) + 1
        if seed not in seeds:
            seeds.append(seed)
    return seeds


def _check_capture(sandbox: Executor, settings: GateSettings) -> None:
    cap = getattr(getattr(sandbox, "config", None), "max_capture_bytes", None)
    if isinstance(cap, int) and 4 * settings.max_output_chars + 1024 > cap:
        raise ValueError(
            f"max_output_chars={settings.max_output_chars} needs the sandbox to capture up to "
            f"{4 * settings.max_output_chars + 1024} bytes of stdout; its max_capture_bytes is {cap}"
        )


def _refusal(reason: str, **detail: object) -> GateResult:
    return GateResult(valid=False, reason=reason, output="", detail={"stage": "static", **detail})


def _precheck(source: str, settings: GateSettings, static_check: bool) -> GateResult | None:
    """The checks that need no sandbox; ``None`` when the program goes on to run."""
    if not source.strip():
        return _refusal("empty")
    if len(source) > settings.max_program_chars:
        return _refusal("too_long", chars=len(source))
    if not static_check:
        return None
    try:
        tree = pyparse.parse(source)  # (its SyntaxWarnings, "is" with a literal..., are no verdict)
    except (SyntaxError, ValueError, RecursionError, MemoryError) as e:
        return _refusal("syntax_error", error=f"{type(e).__name__}: {e}"[:300])
    found = static_violation(tree, settings.allowed_imports)
    if found is None:
        return None
    reason, name, line = found
    return _refusal(reason, name=name, line=line)


def static_violation(tree: ast.AST, allowed_imports: Sequence[str] = ()) -> tuple[str, str, int] | None:
    """The first (in source order) rule the AST breaks, as ``(reason, name, line)``; ``None`` when
    it breaks none. ``reason`` is ``banned_import`` or ``banned_name``.

    Names: a name starting with ``__`` (``__builtins__``, ``__import__``, ``__class__``) and every
    name of :data:`BANNED_NAMES` are refused, in any context (an alias ``f = eval`` too). Private
    names of the program's own (``_``, ``_x``) are allowed: they reach only its own namespace, and
    ``for _ in ...`` is everywhere. Attributes: any starting with ``_`` and those of
    :data:`BANNED_ATTRIBUTES`, also as class-pattern keywords (``case C(__class__=c)``) and as
    names imported ``from`` a module. Defining ``__init__``/``__repr__``... in a class is allowed
    (a ``def`` binds a name, it reaches nothing).
    """
    allowed = set(allowed_imports)
    prefixes = {a.rsplit(".", i)[0] for a in allowed for i in range(a.count(".") + 1)}
    for node in _source_order(tree):
        line = getattr(node, "lineno", 0)
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in allowed:
                    return "banned_import", alias.name, line
                if alias.asname and alias.asname.startswith("__"):
                    return "banned_name", alias.asname, line
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level or not module:
                return "banned_import", "." * node.level + module, line
            for alias in node.names:
                if alias.name != "*" and alias.name.startswith("_"):
                    return "banned_name", alias.name, line
                if alias.asname and alias.asname.startswith("__"):
                    return "banned_name", alias.asname, line
                if module not in allowed and not (alias.name != "*" and f"{module}.{alias.name}" in prefixes):
                    return "banned_import", module, line
        elif isinstance(node, ast.Name):
            if node.id.startswith("__") or node.id in BANNED_NAMES:
                return "banned_name", node.id, line
        elif isinstance(node, ast.Attribute):
            if node.attr.startswith("_") or node.attr in BANNED_ATTRIBUTES:
                return "banned_name", node.attr, line
        elif isinstance(node, ast.MatchClass):
            for attr in node.kwd_attrs:
                if attr.startswith("_") or attr in BANNED_ATTRIBUTES:
                    return "banned_name", attr, line
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)):
            if node.name and node.name.startswith("__"):
                return "banned_name", node.name, line
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            for name in node.names:
                if name.startswith("__"):
                    return "banned_name", name, line
    return None


def _source_order(tree: ast.AST):  # noqa: ANN202 - a generator of nodes
    """Every node, depth first in source order (so the first violation is the first in the text)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(list(ast.iter_child_nodes(node))))


def _program(source: str, seed: int, settings: GateSettings, allocator: str = ALLOCATORS[0]) -> Program:
    """One run of ``source`` under the harness, hash-seeded with ``seed``, under ``allocator``."""
    allowed = sorted(settings.allowed_imports)
    job = {
        "seed": int(seed),
        "allocator": allocator,
        "timeout_s": float(settings.timeout_s),
        "startup_s": _STARTUP_S,
        "harness": _HARNESS_TEXT,
        "inner": {
            "source": source,
            "filename": PROGRAM_FILENAME,
            "allowed": allowed,
            "hidden_members": {name: sorted(VETTED_IMPORTS[name]) for name in allowed},
            "banned_names": sorted(BANNED_NAMES),
            "banned_attributes": sorted(BANNED_ATTRIBUTES),
            "max_steps": int(settings.max_steps),
            "max_output_chars": int(settings.max_output_chars),
        },
    }
    return Program(
        code=f"{_HARNESS_TEXT}\nouter_main({job!r})\n", timeout_s=settings.timeout_s + _STARTUP_S + 1.0
    )


_EXCEPTION_REASONS = {
    "CodeGameImportBlocked": "import_blocked",
    "CodeGameBannedName": "banned_name",
    "CodeGameStepBudget": "step_budget",
    "CodeGameOutputLimit": "output_limit",
    "CodeGameProgramError": "runtime_error",
    "CodeGameCrashed": "runtime_error",
    "CodeGameSyntaxError": "syntax_error",
    "CodeGameTimeout": "timeout",
}
_VERDICT_REASONS = {
    Verdict.TIMEOUT: "timeout",
    Verdict.MEMORY_LIMIT: "memory_limit",
    Verdict.OUTPUT_LIMIT: "output_limit",
}


def _run_reason(res: ExecutionResult) -> str:
    """One run's reason, from the sandbox's verdict and the harness's exception type only."""
    if res.verdict is Verdict.PASSED:
        return "ok"
    if res.verdict in _VERDICT_REASONS:
        return _VERDICT_REASONS[res.verdict]
    if res.verdict is Verdict.RUNTIME_ERROR:
        # anything else (the harness failing, a signal on the harness) is not the program's doing
        return _EXCEPTION_REASONS.get(res.exception_type or "", "sandbox_error")
    return "sandbox_error"  # SANDBOX_ERROR, or a verdict the trusted harness never produces


def _judge_runs(
    runs: list[ExecutionResult], seeds: Sequence[int], settings: GateSettings, unstatable: Sequence[str] = ()
) -> GateResult:
    """The verdict on a program's runs (one per seed, the target's first); ``unstatable``: texts
    no prediction can hold (see :func:`gate_programs`)."""
    reasons = [_run_reason(r) for r in runs]
    detail: dict = {
        "stage": "runtime",
        "seeds": list(seeds),
        "runs": [
            {
                "reason": reason,
                "allocator": _allocator(k, settings),
                "verdict": r.verdict.value,
                "exception_type": r.exception_type,
                "exception_message": (r.exception_message or "")[:300] or None,
                "steps": int(m.group(1)) if (m := _STEPS.search(r.stderr or "")) else None,
                "wall_time_s": round(r.wall_time_s, 4),
            }
            for k, (r, reason) in enumerate(zip(runs, reasons, strict=True))
        ],
    }
    # a fault of the program's in any run decides; infrastructure only when there is none
    faults = [reason for reason in reasons if reason not in ("ok", "sandbox_error")]
    if faults or "sandbox_error" in reasons:
        return GateResult(False, faults[0] if faults else "sandbox_error", "", detail)
    outputs = [r.stdout for r in runs]
    if any(_ADDRESS.search(out) for out in outputs):
        return GateResult(False, "address_in_output", outputs[0], detail)
    if any(out != outputs[0] for out in outputs):
        detail["outputs"] = outputs
        return GateResult(False, "nondeterministic", outputs[0], detail)
    if len(outputs[0]) > settings.max_output_chars:  # the harness stops it first; kept as a backstop
        return GateResult(False, "output_limit", outputs[0], detail)
    if len(outputs[0].strip()) < settings.min_output_chars:
        return GateResult(False, "no_output", outputs[0], detail)
    if normalise_output(outputs[0]) and format_prediction(outputs[0]) is None:
        return GateResult(False, "unanswerable_output", outputs[0], detail)
    # the predictor's tokenizer turns such a text into the special token (an end of turn): no
    # answer spells it, and the writer's learnability reward paid for a question nobody can answer
    if any(text and text in outputs[0] for text in unstatable):
        return GateResult(False, "unanswerable_output", outputs[0], detail)
    return GateResult(True, "ok", outputs[0], detail)


__all__ = [
    "ALLOCATORS",
    "BANNED_ATTRIBUTES",
    "BANNED_NAMES",
    "PROGRAM_FILENAME",
    "REASONS",
    "TARGET_HASH_SEED",
    "VETTED_IMPORTS",
    "GateReason",
    "GateResult",
    "GateSettings",
    "extract_program",
    "gate_programs",
    "static_violation",
]
