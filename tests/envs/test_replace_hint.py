"""A replacement whose quote the file does not have changes nothing; its refusal shows the file's
lines most like the quote (``closest_lines``), numbered, so an agent that quoted from memory (other
indentation or spacing, a name misspelt) sees what is there. The debugging gym's ``<replace>`` and
the SWE edit bundle's ``replace`` (a copy: it runs where the package is not installed) give the
same lines for the same file and quote."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import random
import subprocess
import sys
from pathlib import Path

import pytest

from lit_codeRL.envs.debug.tools import apply_replace
from lit_codeRL.envs.replacement import CLOSEST_MAX_LINES, closest_lines
from lit_codeRL.envs.text import line_number, python_lines
from lit_codeRL.problems.debug import load_debug_tasks

BIN = Path(__file__).resolve().parents[2] / "env" / "tools" / "edit" / "bin"
SCRIPT = BIN / "replace"
CODE = (
    "def total(values, start=0):\n"
    "    result = start\n"
    "    for value in values:\n"
    "        result += value\n"
    "    return result\n"
    "\n"
    "\n"
    "def mean(values):\n"
    "    if not values:\n"
    "        return 0.0\n"
    "    return total(values) / len(values)\n"
)


def bundle_script(name: str):
    """The bundle's script ``name`` (``view``, ``edit``, ``replace``) as a module."""
    loader = importlib.machinery.SourceFileLoader(f"bundle_{name}", str(BIN / name))
    spec = importlib.util.spec_from_loader(f"bundle_{name}", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


def bundle_closest_lines():
    return bundle_script("replace").closest_lines


@pytest.mark.parametrize(
    ("quote", "expected"),
    [
        # spacing and indentation differ: the place the quote means
        (
            "for value in values:\n    result+=value",
            (3, ["    for value in values:", "        result += value"]),
        ),
        ("return total(values)/len(values)", (11, ["    return total(values) / len(values)"])),
        ("  resutl = start", (2, ["    result = start"])),  # a name misspelt
        # a line that reads like two places: the lines around it decide
        ("if not values:\n    return 0", (9, ["    if not values:", "        return 0.0"])),
        ("\n\ndef mean(vals):\n", (8, ["def mean(values):"])),  # blank lines around a quote do not count
        # nothing alike: no hint
        ("import numpy as np", None),
        ("   \n\n", None),
    ],
)
def test_closest_lines_are_the_place_the_quote_means(quote: str, expected) -> None:
    assert closest_lines(CODE, quote) == expected
    assert bundle_closest_lines()(CODE, quote) == expected


def test_closest_lines_bounds() -> None:
    assert closest_lines("", "x = 1") is None
    # a place at the end of the file; a quote longer than the whole file is not alike
    first, lines = closest_lines(CODE, "if not values:\n  return 0.0\nreturn total(values)/len(values)")
    assert first == 9 and len(lines) == 3
    assert closest_lines("x = 1\n", "x=1\ny=2\nz=3") is None
    # at most CLOSEST_MAX_LINES lines shown, however long the quote
    long = "\n".join(f"x_{i} = {i}" for i in range(40))
    first, lines = closest_lines(long, long.replace(" = ", "="))
    assert first == 1 and len(lines) == CLOSEST_MAX_LINES


def test_the_gym_and_the_bundle_agree_on_quotes_of_every_shipped_program() -> None:
    """Quotes of 1-4 lines of every shipped debugging program, mangled the ways a model misquotes
    (spaces dropped, indentation changed, a letter lost): both copies give the same answer, and it
    is the quoted place (or, for a line the program repeats, one that reads the same)."""
    bundle = bundle_closest_lines()
    rng = random.Random(0)
    checked = 0
    for task in load_debug_tasks("embedded", "all"):
        for text in task.files.values():
            lines = text.splitlines()
            for _ in range(4):
                at, n = rng.randrange(len(lines)), rng.randint(1, 4)
                quoted = lines[at : at + n]
                if not any(line.strip() for line in quoted) or not quoted[0].strip():
                    continue
                mangled = "\n".join(
                    rng.choice(
                        [line.replace(" ", ""), "  " + line.strip(), line[:-1] if len(line) > 8 else line]
                    )
                    for line in quoted
                )
                if mangled in text:
                    continue
                mine = closest_lines(text, mangled)
                assert mine == bundle(text, mangled), (task.task_id, mangled)
                assert mine is not None, (task.task_id, mangled)
                quoted_lines = len(mangled.strip("\n").splitlines())
                expected = [line.strip() for line in lines[at : at + quoted_lines]]
                assert [line.strip() for line in mine[1]] == expected, (task.task_id, mangled, mine)
                checked += 1
    assert checked > 50


def test_both_refusals_show_the_closest_lines(tmp_path: Path) -> None:
    _, said = apply_replace(CODE, "for value in values:\n    result+=value", "x")
    assert "not found" in said and "closest text is at lines 3-4" in said
    assert "3|     for value in values:\n4|         result += value" in said
    (tmp_path / "m.py").write_text(CODE)
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "m.py"],
        input=b"<old>for value in values:\n    result+=value</old>\n<new>x</new>\n",
        cwd=tmp_path,
        capture_output=True,
        timeout=30,
    )
    err = done.stderr.decode()
    assert done.returncode == 1 and "is not in m.py" in err and "closest text is at lines 3-4" in err
    assert "3|     for value in values:\n4|         result += value" in err
    assert (tmp_path / "m.py").read_text() == CODE  # nothing changed


def test_a_file_made_to_defeat_the_cheap_bounds_costs_a_bounded_number_of_comparisons(monkeypatch) -> None:
    """A failed quote is answered in the trainer's process: lines that are anagrams of the quote
    pass difflib's cheap bounds, and comparing each in full would cost seconds per call (43 s for
    5,000 such lines before the bound); the full comparisons are counted and capped."""
    import difflib

    from lit_codeRL.envs import replacement

    rng = random.Random(0)
    line = "".join(rng.choice("abcdefghij ()+-=") for _ in range(200))
    lines = []
    for _ in range(3000):
        shuffled = list(line)
        rng.shuffle(shuffled)
        lines.append("".join(shuffled))
    calls = []
    ratio = difflib.SequenceMatcher.ratio
    monkeypatch.setattr(difflib.SequenceMatcher, "ratio", lambda self: calls.append(1) or ratio(self))
    closest_lines("\n".join(lines), "\n".join([line] * 8))
    anchors, window_lines = 2, CLOSEST_MAX_LINES
    assert 0 < len(calls) <= anchors * (replacement.CLOSEST_MAX_RATIOS + window_lines)


def test_the_bundles_copies_number_lines_as_the_package_does() -> None:
    """``view``, ``edit`` and ``replace`` each carry a copy of ``python_lines`` (``replace`` also of
    ``line_number``): on text made of every line break Python counts and every one it does not,
    each copy gives the package's lines, with and without their ends, and the package's line of
    every character."""
    hand = [
        "",
        "a",
        "\n",
        "\r",
        "\r\n",
        "\n\r",
        "a\r\r\nb\n\rc",
        "x\x0cy\u2028z\x85w\x0b\x1c\x1d\x1e\u2029v\n",  # one line to Python, ten to str.splitlines
        "\u2028\u2029\x85\r\x0c\n\x0b",
        CODE.replace("\n", "\r\n"),
        CODE.replace("\n", "\r"),
    ]
    rng = random.Random(0)
    alphabet = "ab \r\n\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029"
    texts = hand + ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 16))) for _ in range(400)]
    scripts = {name: bundle_script(name) for name in ("view", "edit", "replace")}
    for name, script in scripts.items():
        for text in texts:
            for keepends in (False, True):
                assert script.python_lines(text, keepends) == python_lines(text, keepends), (name, text)
            assert "".join(script.python_lines(text, True)) == text
    for text in texts:
        expected = [line_number(text, at) for at in range(len(text) + 1)]
        assert [scripts["replace"].line_number(text, at) for at in range(len(text) + 1)] == expected, text
