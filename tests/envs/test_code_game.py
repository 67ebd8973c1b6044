"""The code-output game's pure parts: the validity gate (through the real bwrap sandbox), the grading
of predictions and the reward table."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch

from lit_codeRL.algorithms.grpo import group_advantages
from lit_codeRL.envs.code_game import (
    FORMAT_REASONS,
    INVALID_PROGRAM_REWARD,
    NO_PROGRAM_REWARD,
    REASONS,
    UNPARSED_PREDICTION_REWARD,
    GateSettings,
    extract_program,
    format_prediction,
    gate,
    gate_programs,
    normalise_output,
    parse_prediction,
    prediction_correct,
    predictor_reward,
    program_rewards,
    refusal_reward,
    writer_reward,
    writer_rewards,
)
from lit_codeRL.envs.code_game.gate import TARGET_HASH_SEED, GateReason, _gate, _judge_runs, static_violation
from lit_codeRL.envs.code_game.seeds import TEMPLATES, seed_programs
from lit_codeRL.sandbox import ExecutionResult, Verdict, make_sandbox
from tests.sandbox.conftest import require_bwrap


@pytest.fixture(scope="module")
def sandbox():
    require_bwrap()
    # two workers, so the two runs of a program land on different workers (the hash seed differs
    # anyway: the harness sets it per run)
    sb = make_sandbox(backend="bwrap", workers=2, timeout_s=5.0, memory_mb=512)
    yield sb
    sb.close()


RUNS = GateSettings().hash_seed_runs + GateSettings().malloc_runs
"""The runs of a program that passes every one: hash-seed runs, then runs under malloc."""


def gate_one(sandbox, source: str, settings: GateSettings | None = None, **hooks):
    return _gate(sandbox, [source], settings or GateSettings(), **hooks)[0]


def local_run(seed: int, source: str) -> str:
    """What ``source`` prints in a fresh interpreter with ``PYTHONHASHSEED=seed``, outside any sandbox."""
    env = {**os.environ, "PYTHONHASHSEED": str(seed)}
    return subprocess.run(
        [sys.executable, "-S", "-c", source], env=env, capture_output=True, text=True, check=True
    ).stdout


def test_reasons_are_a_closed_documented_set() -> None:
    assert set(REASONS) == set(GateReason.__args__)


# ------------------------------------------------------------------------------------ valid programs

VALID = [
    ("print(2 + 3 * 4)", "14\n"),
    ("name = 'ada'\nprint(f'{name.upper():>6}|{3.14159:.2f}')", "   ADA|3.14\n"),
    ("total = 0\nfor i in range(10):\n    if i % 3 == 0:\n        total += i\nprint(total)", "18\n"),
    (
        "d = {}\nfor w in 'the cat saw the dog'.split():\n    d[w] = d.get(w, 0) + 1\nprint(d)",
        "{'the': 2, 'cat': 1, 'saw': 1, 'dog': 1}\n",
    ),
    (
        "class P:\n    def __init__(self, x):\n        self.x = x\n    def __repr__(self):\n        return f'P({self.x})'\n"
        "for _ in range(2):\n    print([P(1), sorted({'b', 'a'})])",
        "[P(1), ['a', 'b']]\n[P(1), ['a', 'b']]\n",
    ),
    (
        "def f(s):\n    match s:\n        case [a, *rest]:\n            return a, len(rest)\nprint(f([5, 6, 7]))",
        "(5, 2)\n",
    ),
]


def test_valid_programs_are_ok_with_their_exact_output(sandbox) -> None:
    results = gate_programs(sandbox, [src for src, _ in VALID])
    for (src, want), res in zip(VALID, results, strict=True):
        assert (res.reason, res.valid, res.output) == ("ok", True, want), (src, res.detail)
        assert res.detail["runs"][0]["steps"] > 0
        seeds = res.detail["seeds"]
        assert len(res.detail["runs"]) == len(set(seeds)) == RUNS
        assert seeds[0] == TARGET_HASH_SEED
        allocators = [run["allocator"] for run in res.detail["runs"]]
        assert allocators == ["pymalloc"] * (RUNS - 2) + ["malloc"] * 2


# ----------------------------------------------------------------------------------- nondeterminism


def test_hash_seeds_differ_between_the_runs_for_real(sandbox) -> None:
    # the order of a set of strings follows the hash seed (hash() itself is banned: addresses)
    src = "print(''.join({c for c in 'abcdefghijklmnopqrstuvwxyz'}))"
    res = gate_one(sandbox, src)
    assert res.reason == "nondeterministic"
    outputs, seeds = res.detail["outputs"], res.detail["seeds"]
    assert len(set(outputs)) == len(set(seeds)) == RUNS
    # each run printed exactly what a fresh interpreter with its seed prints: the seed is what
    # decides; the target is the run with the fixed seed
    assert outputs == [local_run(s, src) for s in seeds]
    assert res.output == local_run(TARGET_HASH_SEED, src)
    fixed = gate_one(sandbox, src, seeds=(7, 7))
    assert (fixed.reason, fixed.output) == ("ok", local_run(7, src))


COIN = 'print(list({"x", "y"}))'
"""A fair coin over hash seeds, with no import: the order of a two-string set."""


def test_a_coin_over_hash_seeds_passes_all_runs_with_probability_below_one_percent() -> None:
    k = GateSettings().hash_seed_runs
    assert 2 * 0.5**k < 0.01  # all k runs agree: all heads or all tails
    with pytest.raises(ValueError, match="hash_seed_runs"):
        GateSettings(hash_seed_runs=1)


def test_a_coin_is_refused_even_when_the_second_seed_agrees(sandbox, monkeypatch) -> None:
    target = local_run(TARGET_HASH_SEED, COIN)
    candidates = range(1, 60)
    agree = next(s for s in candidates if local_run(s, COIN) == target)
    differ = next(s for s in candidates if local_run(s, COIN) != target)
    # the random seeds the gate draws: first one that agrees with the target (two runs: admitted),
    # then one that does not, then any
    draws = iter([agree - 1, differ - 1, *range(100, 200)])
    monkeypatch.setattr(gate, "secrets", SimpleNamespace(randbelow=lambda _n: next(draws)))
    res = gate_one(sandbox, COIN)
    assert res.detail["seeds"][:3] == [TARGET_HASH_SEED, agree, differ]
    assert (res.reason, res.output) == ("nondeterministic", target), res.detail


def test_a_program_refused_in_its_first_run_runs_once(sandbox) -> None:
    res = gate_one(sandbox, "print(1)\nraise ValueError('no')")
    assert res.reason == "runtime_error"
    assert res.detail["seeds"] == [TARGET_HASH_SEED] and len(res.detail["runs"]) == 1


@pytest.mark.parametrize(
    "source, reason",
    [
        (
            "print({'apple', 'banana', 'cherry', 'date', 'elder', 'fig', 'grape', 'kiwi', 'lemon', 'mango'})",
            "nondeterministic",
        ),
        ("print(''.join({c for c in 'abcdefghijklmnopqrstuvwxyz'}))", "nondeterministic"),
        ("print(id(1))", "banned_name"),
        ("print(object())", "address_in_output"),
        ("print(lambda: 0)", "address_in_output"),
        ("class A:\n    pass\nprint([A()])", "address_in_output"),
    ],
)
def test_unpredictable_outputs_are_refused(sandbox, source: str, reason: str) -> None:
    res = gate_one(sandbox, source)
    assert (res.reason, res.valid) == (reason, False), res.detail


# ---------------------------------------------------------------------------------- banned imports

FORMAT_LOOKUPS = [
    # a format field is getattr/getitem with a string: builtins' os.environ without "_" in the AST
    'print("{0.__self__.__loader__}".format(print))',
    "print('{0.__class__}'.format(1))",
    "print('{x.real}'.format_map({'x': 1}))",
    "print(str.format('{0.__class__}', 1))",
    "print('{0:{1.__class__}}'.format(1, 2))",
    "fmt = '{0.' + '__class__}'\nprint(fmt.format(1))",
    "print(list(map(str.format, ['{0.__doc__}'], [1])))",
    "match 'x':\n    case str(format=f):\n        print(f('{0.__class__}', 1))",
]
"""Every way a program reaches ``str.format``/``format_map``: refused like ``getattr``."""

FORMATTING_WITHOUT_LOOKUPS = [
    ("x = 3.14159\nprint(f'{x:.2f}|{x!r:>10}|{[1, 2][0]}')", "3.14|   3.14159|1\n"),
    ("print(format(255, '08b'), format('ab', '>4'))", "11111111   ab\n"),
    ("print('%05.1f|%s' % (2.5, 'ok'), '%(a)s' % {'a': 7})", "002.5|ok 7\n"),
]
"""Formatting that looks nothing up by a name in a string: still allowed."""


def test_formatting_without_field_lookups_is_allowed(sandbox) -> None:
    results = gate_programs(
        sandbox, [src for src, _ in FORMATTING_WITHOUT_LOOKUPS], GateSettings(hash_seed_runs=2)
    )
    for (src, want), res in zip(FORMATTING_WITHOUT_LOOKUPS, results, strict=True):
        assert (res.reason, res.output) == ("ok", want), (src, res.detail)


STATIC_REFUSALS = [
    ("import os\nprint(1)", "banned_import"),
    ("import os.path\nprint(1)", "banned_import"),
    ("from os import path\nprint(1)", "banned_import"),
    ("from . import x\nprint(1)", "banned_import"),
    ("from .. import x\nprint(1)", "banned_import"),
    ("__import__('os')", "banned_name"),
    ("import importlib\nimportlib.import_module('os')", "banned_import"),
    ("import builtins\nprint(builtins)", "banned_import"),
    ("getattr(__builtins__, '__import__')('os')", "banned_name"),
    ("print(getattr(1, 'real'))", "banned_name"),
    ("eval(\"__import__('os')\")", "banned_name"),
    ("exec('print(1)')", "banned_name"),
    ("f = eval\nprint(f('1'))", "banned_name"),
    ("print(().__class__.__base__.__subclasses__())", "banned_name"),
    ("print([c for c in ().__class__.__mro__])", "banned_name"),
    ("print((lambda f=__import__: f('os'))())", "banned_name"),
    ("print((lambda e=compile: e('1', 'x', 'eval'))())", "banned_name"),
    ("print(globals()['__builtins__'])", "banned_name"),
    ("print(vars())", "banned_name"),
    ("print(open('/etc/passwd').read())", "banned_name"),
    ("class A:\n    _x = 1\nprint(A._x)", "banned_name"),
    ("def g():\n    yield 1\nprint(g().gi_frame.f_back)", "banned_name"),
    ("match 1:\n    case object(__class__=c):\n        print(c)", "banned_name"),
    ("print(memoryview(b'ab')[0])", "banned_name"),
    ("import sys\nsys.settrace(None)\nprint(1)", "banned_import"),
    ("from sys import settrace\nsettrace(None)", "banned_import"),
    *((src, "banned_name") for src in FORMAT_LOOKUPS),
]


@pytest.mark.parametrize("source, reason", STATIC_REFUSALS)
def test_static_check_refuses_every_route(sandbox, source: str, reason: str) -> None:
    res = gate_one(sandbox, source)
    assert (res.reason, res.valid, res.detail["stage"]) == (reason, False, "static"), res.detail


def test_allowed_imports(sandbox) -> None:
    math_only = GateSettings(allowed_imports=["math"])
    ok, os_still, sqrt_from = gate_programs(
        sandbox,
        ["import math; print(math.sqrt(16))", "import os\nprint(1)", "from math import sqrt\nprint(sqrt(9))"],
        math_only,
    )
    assert (ok.reason, ok.output) == ("ok", "4.0\n")
    assert os_still.reason == "banned_import"
    assert (sqrt_from.reason, sqrt_from.output) == ("ok", "3.0\n")
    # a vetted module's own lazy imports work (Counter.most_common imports heapq inside the call)
    lazy = gate_one(
        sandbox,
        "from collections import Counter\nprint(Counter('abracadabra').most_common(2))",
        GateSettings(allowed_imports=["collections"]),
    )
    assert (lazy.reason, lazy.output) == ("ok", "[('a', 5), ('b', 2)]\n")


def test_relative_imports_are_refused_even_of_an_allowed_name(sandbox) -> None:
    math_only = GateSettings(allowed_imports=["math"])
    src = "from .math import sqrt\nprint(sqrt(4))"
    assert gate_one(sandbox, src, math_only).reason == "banned_import"
    assert gate_one(sandbox, src, math_only, static_check=False).reason == "import_blocked"


def test_allowed_imports_must_be_vetted() -> None:
    for bad in ("os", "sys", "typing", "importlib", "time", "collections.abc.x"):
        with pytest.raises(ValueError, match="vetted"):
            GateSettings(allowed_imports=[bad])
    with pytest.raises(ValueError):
        GateSettings(timeout_s=0)
    with pytest.raises(ValueError):
        GateSettings(min_output_chars=5, max_output_chars=4)


# ------------------------------------------------------------------ runtime guards, static check off

RUNTIME_REFUSALS = [
    ("__import__('os')", "import_blocked"),
    ("import os\nprint(os.getcwd())", "import_blocked"),
    ("import sys\nsys.settrace(None)\nprint(1)", "import_blocked"),
    ("import builtins\nprint(1)", "import_blocked"),
    ("from . import x", "import_blocked"),
    ("try:\n    import os\nexcept ImportError:\n    pass\nprint('caught')", "import_blocked"),
    ("print(__builtins__['__import__']('os'))", "import_blocked"),
    ("print(().__class__.__base__.__subclasses__())", "banned_name"),
    ("print([c for c in ().__class__.__mro__])", "banned_name"),
    ("print(getattr(1, 'real'))", "banned_name"),
    ("print(eval('1'))", "banned_name"),
    ("try:\n    open('/etc/passwd')\nexcept BaseException:\n    pass\nprint('caught')", "banned_name"),
    ("def g():\n    yield 1\nprint(g().gi_frame.f_back)", "banned_name"),
    ("match 1:\n    case object(__class__=c):\n        print(c)", "banned_name"),
    ("try:\n    while True:\n        pass\nexcept BaseException:\n    pass\nprint('escaped')", "step_budget"),
    (
        "def f():\n    f()\ntry:\n    f()\nexcept RecursionError:\n    pass\nprint('untraced now')",
        "step_budget",
    ),
    ("print(1 +)", "syntax_error"),
    *((src, "banned_name") for src in FORMAT_LOOKUPS),
]


@pytest.mark.parametrize("source, reason", RUNTIME_REFUSALS)
def test_runtime_guards_hold_without_the_static_check(sandbox, source: str, reason: str) -> None:
    res = gate_one(sandbox, source, static_check=False)
    assert (res.reason, res.valid, res.detail["stage"]) == (reason, False, "runtime"), res.detail


def test_runtime_guards_on_allowed_modules(sandbox) -> None:
    settings = GateSettings(allowed_imports=["re", "string"])
    # the program gets a copy of the module without its module-valued attributes (re.enum.sys)
    # and without hidden members (string.Formatter reads attributes by name)
    enum, formatter, fine = _gate(
        sandbox,
        [
            "import re\nprint(re.enum.sys)",
            "import string\nprint(string.Formatter)",
            "import re, string\nprint(re.sub('[aeiou]', '', string.ascii_lowercase))",
        ],
        settings,
        static_check=False,
    )
    assert enum.reason == formatter.reason == "runtime_error"
    assert enum.detail["runs"][0]["exception_message"] == "'AttributeError'"
    assert (fine.reason, fine.output) == ("ok", "bcdfghjklmnpqrstvwxyz\n")


# ------------------------------------------------------------------------------ limits and failures

LIMITS = [
    ("while True:\n    pass", "step_budget"),
    ("while True: pass", "step_budget"),  # a loop jumping to itself emits no line events: opcodes count
    ("for i in range(10**6):\n    pass\nprint(i)", "step_budget"),
    ("x = 1", "no_output"),
    ("print('   ')", "no_output"),
    ("print('x' * 1001)", "output_limit"),
    ("for i in range(200):\n    print('0123456789')", "output_limit"),
    ("raise ValueError('no')", "runtime_error"),
    ("print(1)\nraise SystemExit(0)", "runtime_error"),
    ("def f(n):\n    return f(n + 1)\nprint(f(0))", "runtime_error"),
    ("x = [0] * 10**10\nprint(len(x))", "memory_limit"),
    ("print(1 +)", "syntax_error"),
    ("print(1)\n" + "# pad\n" * 400, "too_long"),
    ("   \n\n", "empty"),
]


@pytest.mark.parametrize("source, reason", LIMITS)
def test_limits(sandbox, source: str, reason: str) -> None:
    res = gate_one(sandbox, source)
    assert (res.reason, res.valid) == (reason, False), res.detail


def test_the_harness_stops_output_at_the_cap(sandbox) -> None:
    res = gate_one(sandbox, "print('x' * 5)\nprint('y' * 10)", GateSettings(max_output_chars=8))
    assert res.reason == "output_limit"
    assert {r["exception_type"] for r in res.detail["runs"]} == {"CodeGameOutputLimit"}


def test_a_loop_in_c_runs_into_the_wall_clock(sandbox) -> None:
    # one traced step, then C code that never returns: only the timeout stops it
    res = gate_one(sandbox, "print(sum(iter(int, 1)))", GateSettings(timeout_s=0.5))
    assert res.reason == "timeout", res.detail
    # the harness's own clock (timeout_s) stopped it, not the sandbox's later backstop
    assert {r["exception_type"] for r in res.detail["runs"]} == {"CodeGameTimeout"}, res.detail


def test_step_budget_is_a_setting(sandbox) -> None:
    src = "t = 0\nfor i in range(2000):\n    t += i\nprint(t)"
    small, large = gate_one(sandbox, src, GateSettings(max_steps=1000)), gate_one(sandbox, src)
    assert small.reason == "step_budget"
    assert (large.reason, large.output) == ("ok", "1999000\n")


def run_result(verdict: Verdict, stdout: str = "", exception_type: str | None = None) -> ExecutionResult:
    return ExecutionResult(verdict=verdict, stdout=stdout, exception_type=exception_type)


def test_judge_runs_combines_the_two_runs() -> None:
    ok, settings = run_result(Verdict.PASSED, "1\n"), GateSettings(max_output_chars=4)
    infra = run_result(Verdict.SANDBOX_ERROR)
    timeout = run_result(Verdict.RUNTIME_ERROR, exception_type="CodeGameTimeout")
    assert _judge_runs([ok, ok], (1, 2), settings).reason == "ok"
    # infrastructure masks only when the program is not at fault in the other run
    assert _judge_runs([ok, infra], (1, 2), settings).reason == "sandbox_error"
    assert _judge_runs([infra, timeout], (1, 2), settings).reason == "timeout"
    # an exception the harness does not raise for a program (its own failure) is no verdict on it
    odd = run_result(Verdict.RUNTIME_ERROR, exception_type="CodeGameHarnessFailure")
    assert _judge_runs([odd, ok], (1, 2), settings).reason == "sandbox_error"
    spoof = run_result(Verdict.RUNTIME_ERROR, exception_type="ValueError")
    assert _judge_runs([spoof, ok], (1, 2), settings).reason == "sandbox_error"
    # the gate's own output cap, behind the harness's
    big = run_result(Verdict.PASSED, "12345\n")
    assert _judge_runs([big, big], (1, 2), settings).reason == "output_limit"
    assert _judge_runs([run_result(Verdict.MEMORY_LIMIT), ok], (1, 2), settings).reason == "memory_limit"


def test_static_violation_allows_own_private_names_and_dunder_methods() -> None:
    src = "_cache = {}\nfor _ in range(2):\n    pass\nclass A:\n    def __init__(self):\n        self.v = 1\nprint(A().v)"
    assert static_violation(ast.parse(src)) is None
    assert static_violation(ast.parse("x = 1\ny = x.__dict__")) == ("banned_name", "__dict__", 2)


# ------------------------------------------------------------------------------- program extraction


@pytest.mark.parametrize(
    "text, program",
    [
        ("Here:\n```python\nprint(1)\n```\nIt prints 1.", "print(1)\n"),
        ("```\nx = 2\nprint(x)\n```", "x = 2\nprint(x)\n"),
        ("```py\nprint(3)\n```\n```python\nprint(4)\n```", "print(3)\n"),
        ("```bash\nls\n```", None),
        ("```python\nprint(1)\n", None),  # cut off: no closing fence
        ("print('bare')", "print('bare')\n"),
        ("The program prints a number.", None),
        ("", None),
    ],
)
def test_extract_program(text: str, program: str | None) -> None:
    assert extract_program(text) == program


# ---------------------------------------------------------------------------------------- grading


def test_parse_prediction() -> None:
    assert parse_prediction("I think [OUTPUT] 42 [/OUTPUT].") == "42"
    assert parse_prediction("[OUTPUT]\n  a\nb\n[/OUTPUT] [OUTPUT]x[/OUTPUT]") == "\n  a\nb\n"
    assert parse_prediction("<think>[OUTPUT]1[/OUTPUT]</think>[OUTPUT]2[/OUTPUT]") == "2"
    assert parse_prediction("[OUTPUT] 1 [OUTPUT] 2 [/OUTPUT]") == "2"
    assert parse_prediction("[OUTPUT] 42") is None
    assert parse_prediction("no block at all") is None


def test_normalise_output() -> None:
    assert normalise_output("\r\n\n  a  \r\nb\t\n\n c\n\n\n") == "  a\nb\n\n c"
    assert normalise_output("") == ""


@pytest.mark.parametrize(
    "predicted, actual, correct",
    [
        ("3\n", "3\n", True),
        ("\n\n3   \n\n", "3\n", True),
        ("a\r\nb", "a\nb\n", True),
        # leading whitespace is output: literal_eval skips it, so "   5" and "5" were one value
        (" 3", "3", False),
        ("5", "   5\n", False),  # print('   5')
        ("[1, 2]", "\t[1, 2]\n", False),
        ("\t[1,2]", "\t[1, 2]\n", True),  # the same indent, then literals of one value
        ("  'a'", '  "a"', True),
        ("A", "a", False),
        ("[1,2]", "[1, 2]", True),
        ('"a"', "'a'", True),
        ("(1)", "1", True),
        ("{'b': 2, 'a': 1}", "{'a': 1, 'b': 2}", True),
        ("True", "1", False),
        ("1.0", "1", False),
        ("(1,)", "[1]", False),
        ("[True]", "[1]", False),
        ("{1, 2}", "{2, 1}", True),
        ("f(1)", "2", False),  # a call is text, never run
        ("__import__('os').getcwd()", "/", False),
        ("1 + 1", "2", False),
        ("[1, 2]\n[3]", "[1,2]\n[3]", False),  # literal equality is for one-line outputs only
        (None, "1", False),
        ("", "", True),
    ],
)
def test_prediction_correct(predicted: str | None, actual: str, correct: bool) -> None:
    assert prediction_correct(predicted, actual) is correct


@pytest.mark.parametrize(
    "output, answer",
    [
        ("10\n", "[OUTPUT]10[/OUTPUT]"),
        ("[1, 'a']\n", "[OUTPUT][1, 'a'][/OUTPUT]"),
        ("a\nb\n", "[OUTPUT]\na\nb\n[/OUTPUT]"),
        ("  indented\n", "[OUTPUT]\n  indented\n[/OUTPUT]"),  # the one-line form would strip it
        ("x   \r\n\n\n y\n\n", "[OUTPUT]\nx\n\n\n y\n[/OUTPUT]"),
        ("\n\n3\n", "[OUTPUT]3[/OUTPUT]"),
        ("", None),
        ("   \n", None),
        ("[/OUTPUT]\n", None),  # a marker in the output: no answer can state it
        ("a [OUTPUT] b\n", None),
        ("<think>x</think>\n", None),  # parse_prediction drops a closed think section
    ],
)
def test_format_prediction_is_an_answer_the_grader_takes(output: str, answer: str | None) -> None:
    assert format_prediction(output) == answer
    if answer is not None:
        assert prediction_correct(parse_prediction(answer), output)
        assert prediction_correct(parse_prediction(f"Let me see.\n{answer}\n"), output)


def test_seed_programs_pass_the_gate_and_their_answers_grade_as_right(sandbox) -> None:
    seeds = seed_programs(2 * len(TEMPLATES), seed=5)
    assert seed_programs(2 * len(TEMPLATES), seed=5) == seeds  # seeded
    topics, programs = zip(*seeds, strict=True)
    assert len(set(programs)) == len(programs) == 2 * len(TEMPLATES)
    assert sorted(set(topics)) == sorted(TEMPLATES) and all(topics.count(t) == 2 for t in TEMPLATES)
    programs = list(programs)
    results = gate_programs(sandbox, programs, GateSettings())
    assert [r.reason for r in results] == ["ok"] * len(programs)
    for r in results:
        assert prediction_correct(parse_prediction(format_prediction(r.output)), r.output)


def test_prediction_of_a_call_is_never_evaluated(monkeypatch) -> None:
    called = []
    monkeypatch.setattr("builtins.eval", lambda *a, **k: called.append(a))
    assert prediction_correct(parse_prediction("[OUTPUT]f(1)[/OUTPUT]"), "f(1)") is True  # as text
    assert prediction_correct(parse_prediction("[OUTPUT]print(2)[/OUTPUT]"), "2") is False
    assert called == []


# ------------------------------------------------------------------------------------ reward table


def test_predictor_reward() -> None:
    assert (predictor_reward(True), predictor_reward(False)) == (1.0, 0.0)
    assert (predictor_reward(True, "zero_sum"), predictor_reward(False, "zero_sum")) == (1.0, -1.0)
    # no [OUTPUT] block: below a wrong answer, except in zero_sum where a wrong one is already -1
    assert predictor_reward(False, parsed=False) == UNPARSED_PREDICTION_REWARD == -0.5
    assert predictor_reward(False, "zero_sum", parsed=False) == -1.0
    assert predictor_reward(False, parsed=False, unparsed=-2.0) == -2.0
    with pytest.raises(ValueError):
        predictor_reward(True, "nope")


def test_writer_rewards_by_hand() -> None:
    counts = [0, 1, 2, 3, 4]  # of k = 4
    assert writer_rewards(counts, 4, "zero_sum") == [1.0, 0.5, 0.0, -0.5, -1.0]
    assert writer_rewards(counts, 4, "learnability") == [0.0, 0.75, 1.0, 0.75, 0.0]
    assert writer_rewards(counts, 4, "azr") == [0.0, 0.75, 0.5, 0.25, 0.0]
    assert writer_rewards(torch.tensor(counts), 4) == writer_rewards(counts, 4, "learnability")
    assert writer_reward(0.5) == 1.0
    with pytest.raises(ValueError):
        writer_rewards([5], 4)
    with pytest.raises(ValueError):
        writer_rewards([1], 0)


def test_program_rewards_penalise_invalid_and_mask_sandbox_errors() -> None:
    reasons = ["ok", "nondeterministic", "sandbox_error", "ok", "no_program", "syntax_error"]
    assert program_rewards(reasons, [2, 0, 0, 4, 0, 0], 4) == [1.0, -0.5, None, 0.0, -1.0, -1.0]
    assert (INVALID_PROGRAM_REWARD, NO_PROGRAM_REWARD) == (-0.5, -1.0)
    # every valid program beats every refused one, in every mode
    for mode in ("learnability", "azr", "zero_sum"):
        worst_valid = min(writer_reward(p / 8, mode) for p in range(9))
        refused = [refusal_reward(r, mode) for r in REASONS if r not in ("ok", "sandbox_error")]
        assert max(refused) <= worst_valid, mode
    # the ladder: no program < a program that parses but was refused (learnability, azr) ...
    for reason in FORMAT_REASONS:
        assert refusal_reward(reason) == -1.0
    for reason in ("banned_name", "runtime_error", "no_output", "nondeterministic", "timeout"):
        assert refusal_reward(reason) == -0.5
        assert refusal_reward(reason, "azr") == -0.5
        # ... but not in zero_sum, where -0.5 would beat a program the predictor always gets right
        assert refusal_reward(reason, "zero_sum") == -1.0
    assert refusal_reward("runtime_error", invalid=-0.25, no_program=-2.0) == -0.25
    assert refusal_reward("no_program", invalid=-0.25, no_program=-2.0) == -2.0
    for bad in ("ok", "sandbox_error"):
        with pytest.raises(ValueError):
            refusal_reward(bad)


def test_the_ladder_gives_a_group_of_refused_programs_signal() -> None:
    # SmolLM2-135M's first rounds: a group of prose and broken programs, nothing valid. One
    # penalty for all of them would make the group flat (no advantage); the ladder does not.
    reasons = ["no_program", "runtime_error", "no_program", "banned_name"]
    rewards = torch.tensor(program_rewards(reasons, [0] * 4, 4))
    adv = group_advantages(rewards, 4, "group")
    assert adv[1] > 0 and adv[3] > 0 and adv[0] < 0 and adv[2] < 0
    flat = torch.tensor(program_rewards(reasons, [0] * 4, 4, invalid=-1.0))
    assert torch.all(group_advantages(flat, 4, "group") == 0)


def test_a_predictor_of_known_strength_gives_nonconstant_group_rewards() -> None:
    # four programs of known difficulty: the predictor gets program i right with probability q_i
    q = torch.tensor([0.05, 0.3, 0.6, 0.95])
    k = 8
    gen = torch.Generator().manual_seed(0)
    counts = (torch.rand(len(q), k, generator=gen) < q[:, None]).sum(dim=1)
    # the draw this seed gives, pinned so that the cases below stay what they are
    assert counts.tolist() == [0, 3, 3, 7]
    learn = writer_rewards(counts, k, "learnability")
    azr = writer_rewards(counts, k, "azr")
    assert len(set(learn)) > 1 and len(set(azr)) > 1
    assert learn == [0.0, 0.9375, 0.9375, 0.4375]  # 4 p (1 - p) at p = 0, 3/8, 3/8, 7/8
    assert azr == [0.0, 0.625, 0.625, 0.125]  # 1 - p, 0 at p = 0
    # the degenerate case the default avoids: a predictor that is always wrong makes every program
    # worth the same under zero_sum (zero advantage, no signal) while learnability pays nothing for it
    always_wrong = torch.zeros(len(q), dtype=torch.long)
    assert writer_rewards(always_wrong, k, "zero_sum") == [1.0] * 4
    assert writer_rewards(always_wrong, k, "learnability") == [0.0] * 4


# ---------------------------------- red-team cases: outputs no predictor can know or state, and
# predictions graded right although they state another output


@pytest.mark.parametrize(
    "source",
    [
        # the low bits of an object's address (inside its page) are the same in every run, and
        # hash() of an object is its address: deterministic, yet no predictor can know it
        "print(hash(object()) % 256)",
        "a = object()\nb = object()\nprint(hash(b) - hash(a))",
    ],
)
def test_an_address_through_hash_is_refused(sandbox, source: str) -> None:
    res = gate_one(sandbox, source)
    assert not res.valid, (res.reason, res.output)


@pytest.mark.parametrize(
    "source",
    [
        # without hash or id: the low bits of the address in a default repr, sliced past its 0x,
        # were the same in every run (each run allocated the same blocks in the same order) and
        # passed the gate; so did the order of a set of objects (their hash is their address)
        "print(repr(object())[-4:-1])",
        "a = object()\nprint(int(repr(a)[-5:-1], 16) % 256)",
        "print(str(lambda: 0)[-4:-1])",
        "class A:\n    pass\nprint(repr(A()).split('x')[1][-3:])",
        "def g():\n    "
        + "; ".join(f"v{i} = {i}" for i in range(80))
        + "\n    yield v0\nprint(repr(g())[-4:-1])",
        "a = object()\nb = object()\nprint([x is a for x in {a, b}])",
        "xs = [object() for _ in range(6)]\nprint([xs.index(x) for x in set(xs)])",
    ],
)
def test_an_address_through_a_repr_or_a_set_order_is_refused(sandbox, source: str) -> None:
    res = gate_one(sandbox, source)
    assert (res.valid, res.reason) == (False, "nondeterministic"), (res.reason, res.output)


LATE_DIFFERENCE = [
    # past the heap shift's blocks (thousands of objects) pymalloc carves fresh pools at the same
    # offsets in every run: the distance between two late objects is the same under every hash
    # seed (16 for two objects), yet no predictor can know it; under malloc it is another number
    "xs = [object() for _ in range(20000)]\na = int(repr(xs[-1])[-13:-1], 16)\n"
    "b = int(repr(xs[-2])[-13:-1], 16)\nprint((a - b) % 4096)",
    "xs = [object() for _ in range(60000)]\nprint(int(repr(xs[-1])[-5:-1], 16) - int(repr(xs[-2])[-5:-1], 16))",
    "class A:\n    pass\nxs = [A() for _ in range(20000)]\n"
    "print(int(str(xs[-1]).split('x')[1][:-1], 16) - int(str(xs[-3]).split('x')[1][:-1], 16))",
]


@pytest.mark.parametrize("source", LATE_DIFFERENCE)
def test_an_address_difference_between_late_objects_is_refused(sandbox, source: str) -> None:
    res = gate_one(sandbox, source, GateSettings(max_steps=10_000_000))
    assert (res.valid, res.reason) == (False, "nondeterministic"), (res.reason, res.output)


def test_the_malloc_runs_are_what_refuses_an_address_difference(sandbox) -> None:
    # the same program, every run under pymalloc: the difference is the same in all of them
    settings = GateSettings(max_steps=10_000_000, malloc_runs=0)
    results = _gate(sandbox, LATE_DIFFERENCE[:2], settings)
    assert [(r.reason, r.output) for r in results] == [("ok", "16\n")] * 2, [r.detail for r in results]
    with pytest.raises(ValueError, match="malloc_runs"):
        GateSettings(malloc_runs=-1)


@pytest.mark.parametrize(
    "source", ["print('[/OUTPUT]')", "print('x [OUTPUT] y')", "print('a<think>b</think>c')"]
)
def test_an_output_no_answer_can_state_is_refused(sandbox, source: str) -> None:
    # no [OUTPUT]...[/OUTPUT] answer parses to it: every prediction is wrong by construction, and
    # the writer's reward (zero_sum: +1) is paid for an unanswerable question
    res = gate_one(sandbox, source, GateSettings(hash_seed_runs=2))
    assert format_prediction(res.output or "[/OUTPUT]\n") is None
    assert (res.valid, res.reason) == (False, "unanswerable_output"), res.detail


SPECIALS = ("<|endoftext|>", "<|im_end|>", "<|im_start|>")


@pytest.mark.parametrize(
    "source",
    [
        "print('<|im_' + 'end|>')",  # built from pieces: no special text in the program itself
        "print('answer: <|endoftext|> more')",
        "print(''.join(['<|', 'im_start', '|>']), 'system')",
    ],
)
def test_an_output_holding_a_special_tokens_text_is_refused(sandbox, source: str) -> None:
    # the predictor's tokenizer makes that text its special token, an end of turn: no answer can
    # spell it, yet the writer's learnability reward paid for the question (p = 0 gives 0, but a
    # predictor that gets near it gives more)
    settings = GateSettings(hash_seed_runs=2)
    res = _gate(sandbox, [source], settings, unstatable=SPECIALS)[0]
    assert (res.valid, res.reason) == (False, "unanswerable_output"), res.detail
    assert gate_one(sandbox, source, settings).valid  # without the policy's specials it counts


@pytest.mark.parametrize(
    "predicted, actual",
    [
        ("255", "0xff"),  # print(hex(255))
        ("5", "0b101"),  # print(bin(5))
        ("8", "0o10"),
        ("1", "+1"),  # print(f'{1:+d}')
        ("3.14", "3.140"),  # print(f'{3.14:.3f}')
        ("1000.0", "1e3"),
        ("1000000", "1_000_000"),  # print(f'{10**6:_}')
        ("0.0", "-0.0"),  # print(-1 * 0.0)
        ("-0.0", "0.0"),
        ("[0.0, 1]", "[-0.0, 1]"),
        ("0xff", "255"),
    ],
)
def test_a_number_written_otherwise_is_another_output(predicted: str, actual: str) -> None:
    assert prediction_correct(predicted, actual) is False


@pytest.mark.parametrize(
    "predicted, actual",
    [("[1,2]", "[1, 2]"), ("(1)", "1"), ("1e+16", "1e+16"), ("-1.5", "-1.5"), ("(1+2j)", "(1+2j)")],
)
def test_literal_equality_still_forgives_spacing_and_quoting(predicted: str, actual: str) -> None:
    assert prediction_correct(predicted, actual) is True
    assert prediction_correct("['a', 1.5, -2]", '["a",1.5,-2]') is True


@pytest.mark.parametrize("source", ["print('\\ud800')", "print('a' + chr(0xdfff) + 'b')"])
def test_a_lone_surrogate_fails_as_it_does_on_a_real_stdout(sandbox, source: str) -> None:
    # python -c "print('\ud800')" raises UnicodeEncodeError; the harness printed '\ud800' escaped
    res = gate_one(sandbox, source, GateSettings(hash_seed_runs=2))
    assert (res.valid, res.reason) == (False, "runtime_error"), (res.output, res.detail)
    assert res.detail["runs"][0]["exception_message"] == "'UnicodeEncodeError'"


def test_a_caught_encoding_error_goes_on_as_in_python(sandbox) -> None:
    src = "try:\n    print('\\ud800')\nexcept UnicodeEncodeError:\n    print('no')"
    res = gate_one(sandbox, src, GateSettings(hash_seed_runs=2))
    assert (res.reason, res.output) == ("ok", "no\n"), res.detail
