"""Single-site bug injection (lit_codeRL.problems.synth.mutations): each kind's exact output, and the invariants
every mutant needs to become a task: it compiles, differs, and differs in one hunk only."""

from __future__ import annotations

import difflib

import pytest

from lit_codeRL.problems.synth.mutations import (
    MUTATION_KINDS,
    MutationSite,
    apply_mutation,
    mutant_splices,
    mutants,
    mutate,
    mutation_sites,
    splice_into,
)


def _sites(source: str, kind: str) -> list[MutationSite]:
    return mutation_sites(source, [kind])


def _one_hunk(before: str, after: str) -> tuple[int, int, int, int]:
    """The (i1, i2, j1, j2) line range of the only changed hunk; fails when there is not exactly one."""
    matcher = difflib.SequenceMatcher(a=before.splitlines(), b=after.splitlines(), autojunk=False)
    changed = [op[1:] for op in matcher.get_opcodes() if op[0] != "equal"]
    assert len(changed) == 1, changed
    return changed[0]


# -- each kind, hand-checked ---------------------------------------------------------------------------


def test_compare_op_flips_the_boundary():
    src = (
        "def count_below(xs, limit):\n"
        "    n = 0\n"
        "    for x in xs:\n"
        "        if x < limit:\n"
        "            n += 1\n"
        "    return n\n"
    )
    (site,) = _sites(src, "compare_op")
    assert (site.path_hint, site.line, site.index, site.before, site.after) == (
        "count_below",
        4,
        0,
        "x < limit",
        "x <= limit",
    )
    assert apply_mutation(src, site) == (
        "def count_below(xs, limit):\n"
        "    n = 0\n"
        "    for x in xs:\n"
        "        if x <= limit:\n"
        "            n += 1\n"
        "    return n\n"
    )


@pytest.mark.parametrize(
    ("expr", "mutated"),
    [
        ("a <= b", "a < b"),
        ("a > b", "a >= b"),
        ("a >= b", "a > b"),
        ("a == b", "a != b"),
        ("a != b", "a == b"),
        ("a in b", "a not in b"),
        ("a not in b", "a in b"),
        ("a is b", "a is not b"),
        ("a is not b", "a is b"),
    ],
)
def test_compare_op_pairs(expr, mutated):
    assert (
        mutate(f"def f(a, b):\n    return {expr}\n", "compare_op", 0)
        == f"def f(a, b):\n    return {mutated}\n"
    )


def test_compare_op_chained_comparison_has_one_site_per_operator():
    src = "def between(lo, x, hi):\n    return lo <= x < hi\n"
    assert [s.after for s in _sites(src, "compare_op")] == ["lo < x < hi", "lo <= x <= hi"]


def test_arith_op_binary_and_augmented():
    src = "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total / len(xs)\n"
    assert [(s.before, s.after) for s in _sites(src, "arith_op")] == [
        ("total += x", "total -= x"),
        ("total / len(xs)", "total * len(xs)"),
    ]
    assert mutate(src, "arith_op", 0) == (
        "def mean(xs):\n    total = 0\n    for x in xs:\n        total -= x\n    return total / len(xs)\n"
    )
    assert mutate(src, "arith_op", 1) == (
        "def mean(xs):\n    total = 0\n    for x in xs:\n        total += x\n    return total * len(xs)\n"
    )


def test_arith_op_skips_string_operands():
    src = 'def greet(name):\n    s = "hi " + name\n    s += "!"\n    return "%s" % s + "-" * 3\n'
    assert _sites(src, "arith_op") == []


def test_bool_op():
    src = "def valid(x):\n    return x is not None and x > 0\n"
    assert mutate(src, "bool_op", 0) == "def valid(x):\n    return x is not None or x > 0\n"
    assert mutate("def f(a, b):\n    return a or b\n", "bool_op", 0) == "def f(a, b):\n    return a and b\n"


def test_off_by_one_range_index_slice_and_plus_one():
    src = (
        "def pairs(xs):\n"
        "    out = []\n"
        "    for i in range(1, len(xs)):\n"
        "        out.append((xs[i - 1], xs[i]))\n"
        "    return out[:-1], xs[0]\n"
    )
    assert [(s.line, s.before, s.after) for s in _sites(src, "off_by_one")] == [
        (3, "1", "0"),  # range bound: down
        (4, "1", "2"),  # operand of -: up
        (5, "1", "2"),  # negative index: away from zero
        (5, "0", "1"),  # index 0: up
    ]
    assert mutate(src, "off_by_one", 0) == (
        "def pairs(xs):\n"
        "    out = []\n"
        "    for i in range(0, len(xs)):\n"
        "        out.append((xs[i - 1], xs[i]))\n"
        "    return out[:-1], xs[0]\n"
    )
    assert mutate(src, "off_by_one", 2).endswith("    return out[:-2], xs[0]\n")
    # the literals of an off-by-one context are not also wrong_constant sites
    assert _sites(src, "wrong_constant") == []


def test_off_by_one_augmented_step():
    src = "def countdown(k):\n    while k > 0:\n        k -= 1\n    return k\n"
    assert (
        mutate(src, "off_by_one", 0) == "def countdown(k):\n    while k > 0:\n        k -= 2\n    return k\n"
    )


def test_swap_args():
    src = "def scaled(base, exp):\n    return pow(base, exp) % 7\n"
    (site,) = _sites(src, "swap_args")
    assert (site.before, site.after) == ("pow(base, exp)", "pow(exp, base)")
    assert apply_mutation(src, site) == "def scaled(base, exp):\n    return pow(exp, base) % 7\n"


def test_swap_args_needs_two_different_plain_positionals():
    src = "def f(a, *r):\n    g(a, a)\n    g(a, *r)\n    g(*r, a)\n    g(a, key=r)\n    return h(a)\n"
    assert _sites(src, "swap_args") == []


def test_swap_args_keeps_multiline_formatting():
    src = "def f(a, b):\n    return g(\n        a,  # first\n        b,\n    )\n"
    assert (
        mutate(src, "swap_args", 0) == "def f(a, b):\n    return g(\n        b,  # first\n        a,\n    )\n"
    )


def test_invert_condition_if_elif_while_ternary():
    src = (
        "def sign(x, busy):\n"
        "    while busy():\n"
        "        pass\n"
        "    if x > 0:\n"
        "        return 1\n"
        "    elif not x:\n"
        "        return 0\n"
        "    return -1 if x else 0\n"
    )
    assert [(s.line, s.before, s.after) for s in _sites(src, "invert_condition")] == [
        (2, "busy()", "not busy()"),
        (4, "x > 0", "not (x > 0)"),
        (6, "not x", "x"),
        (8, "x", "not x"),
    ]
    assert mutate(src, "invert_condition", 2) == src.replace("    elif not x:\n", "    elif x:\n")
    assert mutate(src, "invert_condition", 3).endswith("    return -1 if not x else 0\n")


def test_invert_condition_parenthesises_and_spaces():
    src = "def f(a, b):\n    if(a):\n        return 1\n    if a or b:\n        return 2\n    return 3\n"
    assert mutate(src, "invert_condition", 0) == src.replace("if(a):", "if not (a):")
    assert mutate(src, "invert_condition", 1) == src.replace("if a or b:", "if not (a or b):")


def test_invert_condition_leaves_constant_loops_alone():
    src = "def spin(q):\n    while True:\n        if q.get():\n            break\n"
    assert [s.before for s in _sites(src, "invert_condition")] == ["q.get()"]
    assert _sites(src, "wrong_constant") == []  # `while False:` would be as obviously planted


def test_drop_branch_else_elif_and_whole_if():
    src = (
        "def classify(n):\n"
        "    label = ''\n"
        "    if n < 0:\n"
        "        label = 'neg'\n"
        "    elif n == 0:\n"
        "        label = 'zero'\n"
        "    else:\n"
        "        label = 'pos'\n"
        "    if n > 100:\n"
        "        label += '!'\n"
        "    return label\n"
    )
    sites = _sites(src, "drop_branch")
    # the if/elif/else as a whole is not a site: only an if without else is dropped entirely
    assert [(s.line, s.after) for s in sites] == [(5, ""), (7, ""), (9, "")]
    assert sites[0].before == "elif n == 0:\n    label = 'zero'"
    assert mutate(src, "drop_branch", 0) == (
        "def classify(n):\n"
        "    label = ''\n"
        "    if n < 0:\n"
        "        label = 'neg'\n"
        "    else:\n"
        "        label = 'pos'\n"
        "    if n > 100:\n"
        "        label += '!'\n"
        "    return label\n"
    )
    assert mutate(src, "drop_branch", 1) == src.replace("    else:\n        label = 'pos'\n", "")
    assert mutate(src, "drop_branch", 2) == src.replace("    if n > 100:\n        label += '!'\n", "")


def test_drop_branch_never_empties_a_block():
    src = "def f(x):\n    if x:\n        g()\n"
    assert _sites(src, "drop_branch") == []


def test_drop_statement_keeps_comments_and_skips_returns():
    src = (
        "def total(xs):\n"
        '    """Sum of xs."""\n'
        "    acc = 0\n"
        "    for x in xs:\n"
        "        # count it\n"
        "        acc += x\n"
        "        log(x)\n"
        "    return acc\n"
    )
    assert [(s.line, s.before) for s in _sites(src, "drop_statement")] == [
        (3, "acc = 0"),
        (6, "acc += x"),
        (7, "log(x)"),
    ]
    assert mutate(src, "drop_statement", 1) == (
        "def total(xs):\n"
        '    """Sum of xs."""\n'
        "    acc = 0\n"
        "    for x in xs:\n"
        "        # count it\n"
        "        log(x)\n"
        "    return acc\n"
    )


def test_drop_statement_last_statement_keeps_its_comment():
    src = "def f(xs):\n    for x in xs:\n        g(x)\n        # then h\n        h(x)\n    return xs\n"
    assert (
        mutate(src, "drop_statement", 1)
        == "def f(xs):\n    for x in xs:\n        g(x)\n        # then h\n    return xs\n"
    )


def test_wrong_constant():
    src = (
        "def settings():\n"
        "    retries = 3\n"
        "    verbose = True\n"
        "    ratio = 0.5\n"
        "    name = 'x'\n"
        "    return retries, verbose, ratio, name, None\n"
    )
    assert [(s.before, s.after) for s in _sites(src, "wrong_constant")] == [
        ("3", "4"),
        ("True", "False"),
        ("0.5", "1.0"),
    ]
    assert mutate(src, "wrong_constant", 1) == src.replace("verbose = True", "verbose = False")
    assert mutate("def f():\n    return 0\n", "wrong_constant", 0) == "def f():\n    return 1\n"
    assert mutate("def f():\n    return 1\n", "wrong_constant", 0) == "def f():\n    return 0\n"
    assert (
        mutate("def f():\n    return -1\n", "wrong_constant", 0) == "def f():\n    return -2\n"
    )  # sign kept


def test_wrong_return():
    src = "def first(xs):\n    for x in xs:\n        if x:\n            return(x)\n    return None\n"
    (site,) = _sites(src, "wrong_return")
    assert (site.line, site.before, site.after) == (4, "return(x)", "return None")
    assert (
        apply_mutation(src, site)
        == "def first(xs):\n    for x in xs:\n        if x:\n            return None\n    return None\n"
    )
    assert _sites("def f():\n    return\n", "wrong_return") == []


# -- what is never mutated ----------------------------------------------------------------------------

NOTHING_TO_MUTATE = '''"""Module docstring: if a < b: return a + 1."""
import functools

LIMIT = 10 + 1
if LIMIT > 3 and LIMIT < 20:
    LIMIT -= 1
print(max(LIMIT, 2))


class Config:
    """Class docstring."""

    size = 2 * 3
    enabled = True

    @functools.lru_cache(maxsize=1 + 1)
    def method(self, n: int = 1 + 2, *, flag: bool = True) -> tuple[int, int]:
        """Docstring with x < y."""
        return None


def test_limit():
    assert LIMIT + 1 > 2
    if LIMIT:
        x = 1
        y = 2
    return x + y


class TestConfig:
    def helper(self):
        return 1 + 2 == 3
'''


def test_module_level_class_bodies_signatures_docstrings_and_tests_are_never_mutated():
    assert mutation_sites(NOTHING_TO_MUTATE) == []


def test_unparsable_or_uncompilable_source_gives_no_sites():
    assert mutation_sites("def f(:\n    return 1 + 2\n") == []
    assert mutation_sites("return 1 + 2\n") == []  # libcst parses it; CPython does not compile it
    assert mutation_sites("") == []


def test_nonlocal_binding_is_never_removed():
    src = (
        "def outer():\n"
        "    n = 0\n"
        "    g()\n"
        "\n"
        "    def inc():\n"
        "        nonlocal n\n"
        "        n += 1\n"
        "\n"
        "    return inc\n"
    )
    assert _sites(src, "drop_statement") == []
    assert [s.path_hint for s in _sites(src, "arith_op")] == ["outer.inc"]


def test_stale_site_and_bad_requests_raise():
    src = "def f(a, b):\n    return a < b\n"
    site = mutation_sites(src, ["compare_op"])[0]
    with pytest.raises(ValueError, match="changed"):
        apply_mutation("def f(a, b):\n    return a > b\n", site)
    with pytest.raises(ValueError):
        apply_mutation("def f(a, b):\n    return a\n", site)
    with pytest.raises(ValueError):
        mutate(src, "compare_op", 1)
    with pytest.raises(ValueError):
        mutate("def f(:\n", "compare_op", 0)
    with pytest.raises(ValueError, match="unknown"):
        mutation_sites(src, ["typo"])


# -- every site of a realistic module -----------------------------------------------------------------

REALISTIC = '''"""An inventory of items with prices (a module a task could be made from)."""

from __future__ import annotations

from dataclasses import dataclass, field

DEFAULT_LIMIT = 10


@dataclass
class Item:
    name: str
    price: float
    quantity: int = 0


@dataclass
class Inventory:
    """Items by name."""

    items: dict[str, Item] = field(default_factory=dict)

    def add(self, name: str, price: float, quantity: int = 1) -> Item:
        if quantity <= 0 or price < 0:
            raise ValueError("bad item")
        item = self.items.get(name)
        if item is None:
            item = Item(name, price)
            self.items[name] = item
        # restocking keeps the latest price
        item.quantity += quantity
        item.price = price
        return item

    def total(self) -> float:
        return sum(i.price * i.quantity for i in self.items.values())

    def cheapest(self, k: int = DEFAULT_LIMIT) -> list[str]:
        ranked = sorted(self.items.values(), key=lambda i: (i.price, i.name))
        return [i.name for i in ranked[:k] if i.quantity > 0]

    def remove(self, name: str, quantity: int) -> bool:
        item = self.items.get(name)
        if item is None or item.quantity < quantity:
            return False
        item.quantity -= quantity
        if item.quantity == 0:
            del self.items[name]
        return True


def chunked(values: list[int], size: int) -> list[list[int]]:
    out = []
    start = 0
    while start < len(values):
        out.append(values[start : start + size])
        start += size
    return out


def median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    if len(ordered) % 2 == 1:
        return ordered[mid]
    else:
        return (ordered[mid - 1] + ordered[mid]) / 2.0


def first_index(values: list[int], target: int) -> int:
    for i in range(0, len(values)):
        if values[i] == target:
            return i
    return -1
'''


def test_every_site_of_a_realistic_module_is_one_compilable_hunk():
    sites = mutation_sites(REALISTIC)
    assert {s.kind for s in sites} == set(MUTATION_KINDS)
    assert {s.path_hint for s in sites} == {
        "Inventory.add",
        "Inventory.total",
        "Inventory.cheapest",
        "Inventory.remove",
        "chunked",
        "median",
        "first_index",
    }
    for kind in MUTATION_KINDS:
        assert [s.index for s in sites if s.kind == kind] == list(range(sum(s.kind == kind for s in sites)))
    assert [s.line for s in sites] == sorted(s.line for s in sites)
    for site in sites:
        mutant = apply_mutation(REALISTIC, site)
        assert mutant != REALISTIC, site
        compile(mutant, "<mutant>", "exec")
        i1, i2, _, _ = _one_hunk(REALISTIC, mutant)
        assert i1 + 1 == site.line, site  # the hunk starts at the site's line...
        assert site.before.splitlines()[0] in "\n".join(REALISTIC.splitlines()[i1:i2])  # ...and has the node
        if site.index == 0:  # mutate() is the same lookup by (kind, index)
            assert mutant == mutate(REALISTIC, site.kind, site.index)


def test_listing_is_deterministic_and_kind_filter_keeps_indices():
    sites = mutation_sites(REALISTIC)
    assert mutation_sites(REALISTIC) == sites
    bool_sites = mutation_sites(REALISTIC, ["bool_op"])
    assert bool_sites == [s for s in sites if s.kind == "bool_op"]
    assert mutation_sites(REALISTIC, []) == []


ODD_SYNTAX = """import asyncio


def reader(stream, n=1):
    while chunk := stream.read(n):
        if not(chunk):
            break
        yield chunk[::-1] if(chunk)else b""


async def fetch(client, urls):
    out = {}
    async with client:
        for u in urls:
            out[u] = await client.get(u, 3)
            await asyncio.sleep(0.1)
    return out if (n := len(out)) > 0 else None


def shape(p):
    match p:
        case [x, 1]:
            return x + 1
        case {"k": 2} if p["k"] > 1:
            return -1
    f = lambda a, b=2: a ** b if a else b ^ a
    return f(p, 2), f"{p!r:>{10}} {p < 3}"


def outer(xs):
    class Local:
        limit = 3

        def ok(self, x):
            return x < self.limit and not x % 2 or x is None

    total = 0
    for i, x in enumerate(xs):
        total += x << 2 if Local().ok(x) else x >> 1; total -= i
    global COUNTER
    COUNTER = total
    if COUNTER: return COUNTER
    elif COUNTER is not None: return -COUNTER
    else: return 0.0
"""


def test_every_site_of_odd_syntax_compiles_in_one_hunk():
    sites = mutation_sites(ODD_SYNTAX)
    assert "outer.Local.ok" in {s.path_hint for s in sites}
    assert "limit = 3" not in {s.before for s in sites}  # a class body, even inside a function
    for site in sites:
        mutant = apply_mutation(ODD_SYNTAX, site)
        compile(mutant, "<mutant>", "exec")
        _one_hunk(ODD_SYNTAX, mutant)


# -- every mutant from one parse (mutants) ----------------------------------------------------------

SPLICE_CASES = {
    "realistic": REALISTIC,
    "odd syntax": ODD_SYNTAX,
    "no final newline": "class A:\n    def f(self, x):\n        return x + 1\n\n\ndef g(y):\n    return y < 2",
    "no final newline, a class last": (
        "def g(y):\n    return y < 2\n\n\nclass A:\n    def f(self, x):\n        total = x + 1\n"
        "        self.n += 1\n        return total"
    ),
    "no final newline, a comment last": "def g(y):\n    y += 1\n    return y < 2\n# end",
    "no final newline, a dropped last statement": "def g(y):\n    y = y * 2\n    print(y)",
    "crlf, no final newline": "def f(x):\r\n    if x > 1:\r\n        return x - 1\r\n    return 0",
    "crlf": "def f(x):\r\n    if x > 1:\r\n        return x - 1\r\n    return 0\r\n",
    "tabs": "class A:\n\tdef f(self, x):\n\t\tif x:\n\t\t\treturn x * 2\n\t\treturn -1\n",
    "header and footer comments": (
        "#!/usr/bin/env python\n# header\n\n\nclass A:  # trailing\n    '''doc'''\n\n    # lead\n"
        "    @staticmethod\n    def f(x):\n        return x + 1\n    # class footer\n\n\n"
        "def g(x):\n    return x and 2\n# module footer\n"
    ),
    "same method twice": (
        "class A:\n    def f(self, x):\n        return x + 1\n\n"
        "class B:\n    def f(self, x):\n        return x + 1\n"
    ),
    "nested classes and odd indents": (
        "class Outer:\n  class Inner:\n      def f(self, x):\n          return x - 1\n"
        "  def g(self, xs):\n    for i in range(len(xs)):\n        xs[i] += 1\n    return xs\n"
        "if True:\n    def h(a, b):\n        return max(a, b)\n"
    ),
    "one-line bodies": "class A: pass\ndef f(x): return x + 1\nclass B:\n    def g(self): return 3 if self else 4\n",
}


@pytest.mark.parametrize("name", sorted(SPLICE_CASES))
def test_mutants_are_apply_mutation_of_every_site(name):
    source = SPLICE_CASES[name]
    pairs = mutants(source)
    assert [site for site, _ in pairs] == mutation_sites(source)
    assert pairs, "every case has sites"
    for site, mutant in pairs:
        assert mutant == apply_mutation(source, site), site


def test_a_file_without_a_final_newline_is_spliced_per_function():
    """Hole (fixed): without a final newline no statement's span was kept, and every site
    rendered the whole module again: a module of 250 functions took 211 s of one core."""
    functions = [
        f"def f{i}(x):\n    if x > {i}:\n        return x - {i}\n    return x * 2\n" for i in range(60)
    ]
    source = "\n\n".join(functions).rstrip("\n")
    splices = mutant_splices(source)
    assert len(splices) > 5 * 60
    assert max(end - start for _, (start, end, _) in splices) < 2 * len(functions[-1])
    for site, splice in splices[::25] + splices[-3:]:
        assert splice_into(source, splice) == apply_mutation(source, site), site
        assert not splice_into(source, splice).endswith("\n")


def test_mutants_of_the_shipped_sources_are_apply_mutation_of_every_site():
    from pathlib import Path

    root = Path(__file__).resolve().parents[2] / "data"
    paths = [
        p
        for p in sorted(root.rglob("*.py"))
        if "/tasks/" not in p.as_posix() and not p.name.startswith(("test_", "conftest"))
    ]
    checked = 0
    for path in paths:
        source = path.read_text()
        for site, mutant in mutants(source)[::6]:  # a sixth of them: apply_mutation is the slow way
            assert mutant == apply_mutation(source, site), (path, site)
            checked += 1
    assert checked > 40


def test_mutants_parse_a_module_once(monkeypatch):
    """All of a file's candidates come from one parse (a parse per site made synthesis quadratic)."""
    import libcst

    from lit_codeRL.problems.synth import candidates as candidates_module

    calls = []
    real = libcst.parse_module
    monkeypatch.setattr(libcst, "parse_module", lambda src, *a, **k: calls.append(1) or real(src, *a, **k))
    groups = candidates_module.candidates_by_function({"pkg/mod.py": REALISTIC, "pkg/odd.py": ODD_SYNTAX})
    assert sum(len(g) for g in groups.values()) > 40
    assert len(calls) == 2


def test_mutants_without_libcsts_codegen_state_render_the_whole_module(monkeypatch):
    """libcst's ``CodegenState`` is private: where it is missing, every mutant renders the module."""
    from lit_codeRL.problems.synth import mutations

    monkeypatch.setattr(mutations, "CodegenState", None)
    source = SPLICE_CASES["header and footer comments"]
    pairs = mutants(source)
    assert pairs and all(mutant == apply_mutation(source, site) for site, mutant in pairs)


def test_candidates_hold_a_splice_not_the_mutated_file():
    """A file's candidates keep the clean file once and a function-sized splice each: held whole,
    they were the file's size times their number (more-itertools' 2,683: 440 MB)."""
    import tracemalloc

    from lit_codeRL.problems.synth.candidates import candidates_by_function

    body = "".join(
        f"def f{i}(xs, n={i}):\n    total = 0\n    for x in xs[1:]:\n        if x > n:\n"
        f"            total += x * {i + 2}\n    return total - {i}\n\n\n"
        for i in range(60)
    )
    files = {"pkg/big.py": body}
    candidates_by_function({"pkg/warm.py": body[:400]})  # imports and caches, before tracing
    tracemalloc.start()
    try:
        groups = candidates_by_function(files)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    found = [c for group in groups.values() for c in group]
    assert len(found) > 300
    # a candidate holding its mutated file takes the whole file (7.4 KB) each; a splice with its
    # diff and site about 1.5 KB
    assert held < len(found) * len(body) // 2
    for c in found[::37]:
        assert c.base is body and len(c.splice[2]) < 300
        assert c.content == apply_mutation(body, c.site)
