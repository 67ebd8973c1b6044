"""MBPP loader: entry points, split names, file layouts, canonical solutions, hub path, errors."""

from __future__ import annotations

import json
import subprocess
import sys
import types

import pytest

from lit_codeRL.errors import ConfigError
from lit_codeRL.problems import load_mbpp, load_problems
from lit_codeRL.problems.mbpp import _defined_names, find_entry_point


@pytest.mark.parametrize("variant", ["full", "sanitized"])
def test_every_entry_point_is_defined_by_the_reference_and_called_by_the_tests(mbpp_dir, variant):
    problems = load_mbpp(str(mbpp_dir), "all", variant=variant)
    wrong = [
        (p.task_id, p.entry_point)
        for p in problems
        if p.entry_point not in _defined_names(p.reference_solution)
        or f"{p.entry_point}(" not in "".join(p.tests)
    ]
    assert wrong == []


def test_entry_point_seen_through_wrapping_calls():
    # mbpp/912's first test wraps the call in int(...); a plain "assert name(" parse returns int.
    assert (
        find_entry_point(
            ["assert int(lobb_num(5, 3)) == 35"], "def binomial_coeff(n, k): ...\ndef lobb_num(n, m): ..."
        )
        == "lobb_num"
    )
    assert find_entry_point(["assert math.isclose(area(2), 4.0)"], "import math\ndef area(r): ...") == "area"
    # Without reference code: the first non-builtin assert call, then nothing.
    assert find_entry_point(["assert set(f(1)) == {1}", "assert g(2) == 2"], None) == "g"
    assert find_entry_point(["assert 1 == 1"], "def only():\n    pass") == "only"


def test_records_are_clean_and_ordered(mbpp_dir):
    problems = load_mbpp(str(mbpp_dir), "train")
    ids = [p.metadata["mbpp_task_id"] for p in problems]
    assert ids == sorted(ids) and ids[0] == 601 and ids[-1] == 974
    assert all("\r" not in (p.reference_solution or "") for p in problems)
    assert {p.metadata["split"] for p in problems} == {"train"}
    # test_setup_code and the sanitized variant's test_imports both land in setup_code.
    sanitized = {p.task_id: p for p in load_mbpp(str(mbpp_dir), "all", variant="sanitized")}
    with_imports = [p for p in sanitized.values() if p.setup_code]
    assert with_imports and all(p.setup_code.startswith(("import", "from")) for p in with_imports)


def test_split_aliases_and_unknown_split(mbpp_dir):
    test_ids = [p.task_id for p in load_mbpp(str(mbpp_dir), "test")]
    assert [p.task_id for p in load_mbpp(str(mbpp_dir), "eval")] == test_ids
    assert len(load_mbpp(str(mbpp_dir), "val")) == 90
    with pytest.raises(ConfigError, match="unknown MBPP split 'bogus'.*validation"):
        load_mbpp(str(mbpp_dir), "bogus")
    with pytest.raises(ConfigError, match="variant"):
        load_mbpp(str(mbpp_dir), "test", variant="tiny")


@pytest.mark.parametrize("variant", ["full", "sanitized"])
def test_prompt_split_reference_solutions_pass(mbpp_dir, failing_references, variant):
    problems = load_mbpp(str(mbpp_dir), "prompt", variant=variant)
    assert len(problems) == {"full": 10, "sanitized": 7}[variant]
    assert failing_references(problems) == []
    # The grader can fail: the reference of one task does not solve another.
    swapped = [
        p.__class__(**{**p.__dict__, "reference_solution": "def nothing():\n    pass"}) for p in problems[:2]
    ]
    assert failing_references(swapped) == [p.task_id for p in swapped]


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["full", "sanitized"])
def test_every_reference_solution_passes(mbpp_dir, failing_references, variant):
    # 30 s, not 10: mbpp/123's reference takes 5.4 s alone on a 2-core EPYC, and this checks the
    # data, not its speed beside the other xdist process's tests
    assert failing_references(load_mbpp(str(mbpp_dir), "all", variant=variant), timeout_s=30.0) == []


def test_parquet_file_and_hub_snapshot_directory(mbpp_dir, tmp_path):
    pq = pytest.importorskip("pyarrow.parquet")
    pa = pytest.importorskip("pyarrow")
    rows = [json.loads(line) for line in (mbpp_dir / "mbpp.jsonl").read_text().splitlines()]
    test_rows = [r for r in rows if 11 <= r["task_id"] <= 510]
    snapshot = tmp_path / "snapshot"
    (snapshot / "full").mkdir(parents=True)
    pq.write_table(pa.Table.from_pylist(test_rows[:250]), snapshot / "full" / "test-00000-of-00002.parquet")
    pq.write_table(pa.Table.from_pylist(test_rows[250:]), snapshot / "full" / "test-00001-of-00002.parquet")
    from_dir = load_mbpp(str(snapshot), "test")
    assert [p.task_id for p in from_dir] == [p.task_id for p in load_mbpp(str(mbpp_dir), "test")]
    one_file = snapshot / "full" / "test-00000-of-00002.parquet"
    assert len(load_problems(str(one_file), "test")) == 250
    assert load_problems(str(one_file), "train") == []


def test_malformed_rows_and_missing_files_name_the_place(tmp_path, monkeypatch):
    bad = tmp_path / "bad.jsonl"
    good = {"task_id": 11, "text": "t", "code": "def f():\n    return 1", "test_list": ["assert f() == 1"]}
    bad.write_text(json.dumps(good) + "\n" + json.dumps({"task_id": 12, "text": "no tests"}) + "\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl: entry 1 .*test_list"):
        load_mbpp(str(bad), "test")
    bad.write_text(json.dumps(good) + "\n{not json\n")
    with pytest.raises(ValueError, match=r"bad\.jsonl: line 2 is not valid JSON"):
        load_mbpp(str(bad), "test")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=rf"{tmp_path}/data/mbpp\.jsonl .*relative paths"):
        load_mbpp("data/mbpp.jsonl")
    with pytest.raises(FileNotFoundError, match="expected sanitized-mbpp.json"):
        load_mbpp(str(tmp_path), variant="sanitized")


def test_hub_rows_are_split_by_task_id(monkeypatch, mbpp_dir):
    # The hub's sanitized config as `datasets` returns it (a DatasetDict of row iterables).
    rows = json.loads((mbpp_dir / "sanitized-mbpp.json").read_text())
    by_split = {"train": [], "test": [], "validation": [], "prompt": []}
    for row in rows:
        t = row["task_id"]
        by_split[
            "prompt" if t <= 10 else "test" if t <= 510 else "validation" if t <= 600 else "train"
        ].append(row)
    calls = []

    def load_dataset(path, name):
        calls.append((path, name))
        return by_split

    monkeypatch.setitem(sys.modules, "datasets", types.SimpleNamespace(load_dataset=load_dataset))
    problems = load_problems("mbpp-sanitized", "validation")
    assert calls == [("google-research-datasets/mbpp", "sanitized")]
    assert len(problems) == 43 and problems[0].source == "mbpp:google-research-datasets/mbpp"
    assert len(load_problems("someone/mbpp-copy", "prompt")) == 7 and calls[-1] == (
        "someone/mbpp-copy",
        "full",
    )


def test_offline_hub_is_one_clear_error(tmp_path):
    code = (
        "from lit_codeRL.problems import load_problems\n"
        "try:\n    load_problems('mbpp', 'test')\n"
        "except Exception as err:\n    print(type(err).__name__, err)\n"
    )
    env = {
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
        "HF_HOME": str(tmp_path),
        "PATH": "/usr/bin:/bin",
    }
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert out.stdout.startswith("ConfigError cannot load MBPP from hub id google-research-datasets/mbpp"), (
        out
    )
    assert "../shared/data/mbpp/mbpp.jsonl" in out.stdout
