"""Seed-format JSON: argument conventions, leniency, split fields and one clear error per mistake."""

from __future__ import annotations

import json

import pytest

from lit_codeRL.errors import ConfigError
from lit_codeRL.problems import load_problems, load_seed_json
from lit_codeRL.problems.registry import embedded_data_dir


def _write(path, data):
    path.write_text(json.dumps(data))
    return path


def test_argument_conventions_become_python_calls(tmp_path, failing_references):
    path = _write(
        tmp_path / "seed.json",
        {
            "problems": [
                {
                    "function_name": "total",
                    "docstring": "Sum a list.",
                    # a list input is the argument list: a one-list function takes [[...]]
                    "test_cases": [[[[1, 2, 3]], 6], [[[]], 0]],
                    "solution": "def total(xs):\n    return sum(xs)",
                },
                {
                    "function_name": "negate",
                    "docstring": "Negate a boolean.",
                    # a non-list input is the single argument; JSON true/null become True/None
                    "test_cases": [[True, False], {"input": False, "output": True}],
                    "reference_solution": "def negate(b):\n    return not b",
                },
                {
                    "id": "kw",
                    "function_name": "power",
                    "test_cases": [[{"base": 2, "exp": 10}, 1024]],
                    "tests": ["assert power(3, exp=2) == 9"],
                    "reference_solution": "def power(base, exp):\n    return base ** exp",
                    "difficulty": "easy",
                },
            ]
        },
    )
    total, negate, power = load_seed_json(path)
    assert total.io_pairs == (("[1, 2, 3]", "6"), ("[]", "0"))
    assert negate.test_statements() == ["assert negate(True) == False", "assert negate(False) == True"]
    assert power.task_id == "kw" and power.difficulty == "easy"
    assert power.test_statements() == ["assert power(3, exp=2) == 9", "assert power(base=2, exp=10) == 1024"]
    # no starter code: the signature's arity comes from the calls in the tests
    assert total.starter_code == "def total(x0):" and total.prompt.startswith("Sum a list.")
    assert negate.starter_code == "def negate(x0):" and power.starter_code == "def power(base, exp):"
    assert failing_references([total, negate, power]) == []


def test_duplicate_names_get_distinct_ids_and_jsonl_works(tmp_path):
    entry = {"function_name": "f", "test_cases": [[1, 1]]}
    path = tmp_path / "seed.jsonl"
    path.write_text("\n".join(json.dumps(e) for e in [entry, entry, {**entry, "id": "x"}]) + "\n")
    assert [p.task_id for p in load_problems(str(path))] == ["seed/f", "seed/f-1", "x"]


def test_split_field_is_honored_and_a_file_without_one_is_whole(tmp_path):
    rows = [
        {"function_name": "a", "test_cases": [[1, 1]], "split": "train"},
        {"function_name": "b", "test_cases": [[1, 1]], "split": "eval"},
    ]
    path = _write(tmp_path / "s.json", rows)
    assert [p.entry_point for p in load_problems(str(path), "train")] == ["a"]
    assert [p.entry_point for p in load_problems(str(path), "test")] == ["b"]
    assert len(load_problems(str(path), "all")) == 2
    with pytest.raises(ConfigError, match="unknown split 'validation'"):
        load_problems(str(path), "validation")
    plain = _write(tmp_path / "p.json", [{k: v for k, v in r.items() if k != "split"} for r in rows])
    assert len(load_problems(str(plain), "eval")) == 2


@pytest.mark.parametrize(
    ("entries", "message"),
    [
        (
            [{"function_name": "f", "test_cases": []}, {"docstring": "x", "test_cases": []}],
            r"entry 1: missing key\(s\) \['function_name'\]",
        ),
        ([{"function_name": "f"}], r"entry 0: missing key\(s\) \['test_cases'\]"),
        ([{"function_name": "f", "test_cases": [[1, 2, 3]]}], r"entry 0 \(f\): test_cases must be"),
        ([{"function_name": "not valid", "test_cases": []}], "not a Python identifier"),
        (["just a string"], "entry 0: expected an object, got str"),
        ({"tasks": []}, "expected a list of problems"),
    ],
)
def test_malformed_entries_name_file_index_and_key(tmp_path, entries, message):
    path = _write(tmp_path / "bad.json", entries)
    with pytest.raises(ConfigError, match=message) as info:
        load_seed_json(path)
    assert str(path) in str(info.value)


def test_missing_file_and_invalid_json(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match=rf"{tmp_path}/missing\.json"):
        load_seed_json("missing.json")
    (tmp_path / "broken.json").write_text("[{")
    with pytest.raises(ConfigError, match="broken.json: invalid JSON"):
        load_seed_json("broken.json")


def test_the_repository_seed_examples_load():
    for name, count in [("training_problems.json", 5), ("eval_problems.json", 6)]:
        path = embedded_data_dir() / "examples" / name
        if not path.is_file():
            pytest.skip(f"{path} not present")
        problems = load_problems(str(path))
        assert len(problems) >= count and all(p.io_pairs and p.entry_point for p in problems)
        assert len({p.task_id for p in problems}) == len(problems)
