"""Seed programs of the code-output game: short deterministic programs drawn from templates, one
or two per writer topic (``rollout/code_game.py: THEMES``), with random names and constants.

What they are for: the predictor's warm start (``rollout/code_game_warmstart.py``) clones
answers to (program, output) pairs, and a base writer too weak to write programs the gate admits
(SmolLM2-135M: 4% of its programs in its first steps) leaves it almost none. Seeds fill the gap.
Their outputs are never computed here: a seed is a program like any writer's, and the gate runs it
in the sandbox and says what it prints (or refuses it), so a template with a bug costs a pair, not
a wrong label. The templates keep to the game's rules (no imports, f-strings rather than
``str.format``, no sets of strings whose order follows the hash seed).
"""

from __future__ import annotations

import random
from collections.abc import Callable

_WORDS = (
    "apple", "river", "stone", "cloud", "tiger", "lemon", "piano", "orbit", "maple", "candle",
    "pixel", "ocean", "violet", "rocket", "garden", "silver", "copper", "window", "basket", "forest",
)  # fmt: skip
_NAMES = ("xs", "nums", "vals", "items", "data", "seq")


def _ints(rng: random.Random, n: int, lo: int = -9, hi: int = 20) -> list[int]:
    return [rng.randint(lo, hi) for _ in range(n)]


def _string_methods(rng: random.Random) -> str:
    word = rng.choice(_WORDS)
    method = rng.choice(("upper()", "capitalize()", f"count('{word[1]}')", f"replace('{word[0]}', '*')"))
    return f"s = '{word}'\nprint(s.{method})\nprint(s[::-1])"


def _list_slicing(rng: random.Random) -> str:
    name, xs = rng.choice(_NAMES), _ints(rng, rng.randint(5, 8))
    a, b = sorted(rng.sample(range(len(xs)), 2))
    step = rng.choice((2, 3, -1, -2))
    return f"{name} = {xs}\nprint({name}[{a}:{b}])\nprint({name}[::{step}])"


def _arithmetic(rng: random.Random) -> str:
    a, b, c = rng.randint(2, 30), rng.randint(2, 12), rng.randint(-10, 10)
    op = rng.choice(("+", "-", "*"))
    return f"a = {a}\nb = {b}\nc = a {op} b * {c}\nprint(a, b, c)"


def _counter_loop(rng: random.Random) -> str:
    n, k = rng.randint(5, 20), rng.randint(2, 5)
    return f"count = 0\nfor i in range({n}):\n    if i % {k} == 0:\n        count += 1\nprint(count)"


def _accumulate(rng: random.Random) -> str:
    n, start = rng.randint(3, 9), rng.randint(0, 5)
    op = rng.choice(("+=", "*="))
    start = max(start, 1) if op == "*=" else start
    return f"total = {start}\nfor i in range(1, {n}):\n    total {op} i\nprint(total)"


def _dictionary(rng: random.Random) -> str:
    keys = rng.sample(_WORDS, 3)
    d = {k: rng.randint(0, 9) for k in keys}
    add, bump = rng.choice(_WORDS), keys[rng.randrange(3)]
    return f"d = {d}\nd['{bump}'] += {rng.randint(1, 5)}\nd['{add}'] = len(d)\nprint(d)"


def _word_counts(rng: random.Random) -> str:
    words = [rng.choice(_WORDS[:4]) for _ in range(rng.randint(4, 7))]
    return (
        f"words = {words}\ncounts = {{}}\nfor w in words:\n    counts[w] = counts.get(w, 0) + 1\n"
        "print(counts)"
    )


def _sorting(rng: random.Random) -> str:
    words = rng.sample(_WORDS, rng.randint(3, 5))
    key = rng.choice(("len", "lambda w: w[-1]", "lambda w: (len(w), w)"))
    reverse = rng.choice(("", ", reverse=True"))
    return f"words = {words}\nprint(sorted(words, key={key}{reverse}))"


def _nested_loops(rng: random.Random) -> str:
    n, m = rng.randint(2, 4), rng.randint(2, 4)
    return f"pairs = []\nfor i in range({n}):\n    for j in range({m}):\n        if i < j:\n            pairs.append((i, j))\nprint(pairs)"


def _recursion(rng: random.Random) -> str:
    n = rng.randint(3, 9)
    if rng.random() < 0.5:
        return f"def fact(n):\n    return 1 if n <= 1 else n * fact(n - 1)\n\nprint(fact({n}))"
    return f"def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n\nprint([fib(i) for i in range({n})])"


def _formatting(rng: random.Random) -> str:
    word, n, x = rng.choice(_WORDS), rng.randint(1, 99), rng.randint(1, 999) / 8
    return (
        f"name = '{word}'\nn = {n}\nx = {x}\nprint(f'{{name}}:{{n:03d}}')\nprint(f'{{x:.2f}}|{{name:>8}}|')"
    )


def _comprehension(rng: random.Random) -> str:
    n, k, m = rng.randint(4, 9), rng.randint(2, 5), rng.randint(2, 3)
    return f"print([x * {k} for x in range({n}) if x % {m} == 0])"


def _boolean(rng: random.Random) -> str:
    a, b, c = _ints(rng, 3, 0, 9)
    return (
        f"a, b, c = {a}, {b}, {c}\nprint(a > b and b >= c)\nprint(a == c or not b)\nprint((a < b) + (b < c))"
    )


def _division(rng: random.Random) -> str:
    a, b = rng.randint(-50, 99), rng.randint(2, 9)
    return f"a = {a}\nb = {b}\nprint(a // b, a % b)\nprint(divmod(a + 7, b))"


TEMPLATES: dict[str, tuple[Callable[[random.Random], str], ...]] = {
    "string methods": (_string_methods,),
    "list slicing": (_list_slicing,),
    "integer arithmetic": (_arithmetic,),
    "a loop with a counter": (_counter_loop, _accumulate),
    "updating a dictionary": (_dictionary, _word_counts),
    "sorting with a key": (_sorting,),
    "nested loops": (_nested_loops,),
    "a recursive function": (_recursion,),
    "string formatting": (_formatting,),
    "list comprehensions": (_comprehension,),
    "boolean logic": (_boolean,),
    "integer division and remainders": (_division,),
}
"""Templates per writer topic: each draws one program from a ``random.Random``."""


def seed_programs(count: int, seed: int = 0) -> list[tuple[str, str]]:
    """``count`` distinct programs as ``(topic, program)``, topics taken in turn (so a small count
    still covers them), each from one of its templates, drawn from ``random.Random(seed)``."""
    rng = random.Random(seed)
    topics = list(TEMPLATES)
    out: list[tuple[str, str]] = []
    seen: set[str] = set()
    attempts = 0
    while len(out) < count and attempts < 50 * max(count, 1):
        attempts += 1
        topic = topics[len(out) % len(topics)]
        program = rng.choice(TEMPLATES[topic])(rng)
        if program not in seen:
            seen.add(program)
            out.append((topic, program))
    return out


__all__ = ["TEMPLATES", "seed_programs"]
