"""MBPP test split (task ids 11-510): the sandbox agrees with plain CPython on canonical solutions
and on mutated (wrong) ones."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from lit_codeRL.sandbox import Program, Verdict, make_sandbox
from lit_codeRL.sandbox.pool import bwrap_works

MBPP = Path(__file__).resolve().parents[3] / "shared/data/mbpp/mbpp.jsonl"
pytestmark = pytest.mark.skipif(not MBPP.is_file(), reason=f"{MBPP} not found")

PLAIN_RUNNER = textwrap.dedent(
    """
    import json, signal, sys
    def alarm(*a):
        raise TimeoutError
    signal.signal(signal.SIGALRM, alarm)
    out = {}
    for task in json.load(sys.stdin):
        ns = {"__name__": "__main__"}
        signal.alarm(5)
        try:
            exec(task["code"] + "\\n" + task["setup"] + "\\n" + "\\n".join(task["tests"]), ns)
            out[task["id"]] = True
        except BaseException:
            out[task["id"]] = False
        finally:
            signal.alarm(0)
    print(json.dumps(out))
    """
)


class _Mutate(ast.NodeTransformer):
    def __init__(self, kind: str) -> None:
        self.kind = kind

    def visit_Return(self, node: ast.Return) -> ast.Return:
        if node.value is None:
            return node
        if self.kind == "none":
            return ast.Return(value=ast.Constant(None))
        return ast.Return(value=ast.BinOp(left=node.value, op=ast.Add(), right=ast.Constant(1)))


def mutate(code: str, kind: str) -> str | None:
    try:
        tree = ast.parse(code)
    except SyntaxError:
        return None
    new = ast.unparse(ast.fix_missing_locations(_Mutate(kind).visit(tree)))
    return new if new != ast.unparse(ast.parse(code)) else None


def plain_pass(tasks: list[dict]) -> dict[int, bool]:
    out = subprocess.run(
        [sys.executable, "-c", PLAIN_RUNNER],
        input=json.dumps(tasks),
        capture_output=True,
        text=True,
        timeout=600,
        cwd="/tmp",
    )
    assert out.returncode == 0, out.stderr[-2000:]
    return {int(k): v for k, v in json.loads(out.stdout.strip().splitlines()[-1]).items()}


@pytest.fixture(scope="module")
def rows() -> list[dict]:
    rows = [json.loads(line) for line in MBPP.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if 11 <= r["task_id"] <= 510]
    assert len(rows) == 500
    return rows


@pytest.mark.parametrize("backend", ["bwrap" if bwrap_works() else "local"])
def test_mbpp_canonical_and_mutants(rows, backend, capsys):
    variants = {"canonical": {r["task_id"]: r["code"] for r in rows}}
    for kind in ("none", "plus_one"):
        variants[kind] = {r["task_id"]: m for r in rows if (m := mutate(r["code"], kind)) is not None}
    by_id = {r["task_id"]: r for r in rows}
    # the test is the sandbox agreeing with plain CPython, not speed: MBPP 123 (amicable numbers
    # below 9,999) ran past a 5 s limit on a loaded 2-core CI machine
    with make_sandbox(backend=backend, workers=2, timeout_s=30.0) as sb:
        for name, codes in variants.items():
            ids = sorted(codes)
            plain = plain_pass(
                [
                    {
                        "id": i,
                        "code": codes[i],
                        "setup": by_id[i]["test_setup_code"],
                        "tests": by_id[i]["test_list"],
                    }
                    for i in ids
                ]
            )
            results = sb.run_batch(
                [
                    Program(
                        code=codes[i],
                        tests=tuple(by_id[i]["test_list"]),
                        setup_code=by_id[i]["test_setup_code"],
                    )
                    for i in ids
                ]
            )
            got = {i: r.passed for i, r in zip(ids, results, strict=True)}
            disagree = {i: (plain[i], results[ids.index(i)].verdict.value) for i in ids if plain[i] != got[i]}
            assert not any(r.verdict is Verdict.SANDBOX_ERROR for r in results)
            with capsys.disabled():
                print(
                    f"\n[{backend}] MBPP {name}: {len(ids)} programs, plain CPython pass {sum(plain.values())}, "
                    f"sandbox pass {sum(got.values())}, disagreements {len(disagree)}"
                )
            if name == "canonical":
                # every solution that passes under plain CPython passes in the sandbox
                assert all(got[i] for i in ids if plain[i]), disagree
                assert sum(plain.values()) >= 490
            else:
                # a wrong program never passes in the sandbox when it fails under plain CPython
                assert not any(got[i] for i in ids if not plain[i]), disagree
                assert sum(got.values()) < 0.2 * len(ids)
