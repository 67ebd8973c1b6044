"""``load_problems`` dispatch, the embedded set's invariants, HumanEval and prompt rendering."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from lit_codeRL.errors import ConfigError
from lit_codeRL.problems import embedded_data_dir, load_embedded, load_humaneval, load_problems
from lit_codeRL.problems.prompts import chat_messages, format_prompt


def test_embedded_set_shape():
    train, evaluation = load_problems("embedded", "train"), load_problems("coderl_basic", "eval")
    everything = load_problems("embedded", "all")
    assert len(everything) >= 48 and len(train) + len(evaluation) == len(everything)
    assert 30 <= len(train) <= 40 and 10 <= len(evaluation) <= 16
    assert [p.task_id for p in load_problems("embedded", "test")] == [p.task_id for p in evaluation]
    ids = [p.task_id for p in everything]
    assert len(set(ids)) == len(ids) and all(i.startswith("coderl/") for i in ids)
    difficulty = Counter(p.difficulty for p in everything)
    assert difficulty["easy"] >= 18 and difficulty["medium"] >= 14 and difficulty["hard"] >= 8
    for p in everything:
        assert len(p.tests) == 3 and all(t.startswith(f"assert {p.entry_point}(") for t in p.tests)
        # the statement names the function, which a 135M model needs to match the tests
        assert f"`{p.entry_point}(" in p.prompt, p.task_id
    # the first eval problems (what a short eval with `limit` sees) include easy ones
    assert {p.difficulty for p in evaluation[:6]} >= {"easy"}
    with pytest.raises(ConfigError, match="unknown split 'validation'"):
        load_embedded("validation")


def test_embedded_reference_solutions_pass_and_a_wrong_one_fails(failing_references):
    problems = load_embedded("all")
    assert failing_references(problems) == []
    wrong = [
        p.__class__(**{**p.__dict__, "reference_solution": "def unrelated():\n    pass"})
        for p in problems[:3]
    ]
    assert failing_references(wrong) == [p.task_id for p in wrong]


def test_embedded_data_dir_is_the_repository_data_folder():
    assert (embedded_data_dir() / "coderl_basic" / "problems.jsonl").is_file()
    assert (embedded_data_dir() / "coderl_basic" / "README.md").is_file()


def test_embedded_format_file_by_path(tmp_path, monkeypatch):
    rows = [
        {"task_id": "mine/a", "text": "Write `a()`.", "test_list": ["assert a() == 1"], "split": "train"},
        {"task_id": "mine/b", "text": "Write `b()`.", "test_list": ["assert b() == 2"], "split": "eval"},
    ]
    (tmp_path / "mine.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    monkeypatch.chdir(tmp_path)  # relative paths resolve against the working directory
    assert [p.task_id for p in load_problems("mine.jsonl", "eval")] == ["mine/b"]
    (tmp_path / "broken.jsonl").write_text(json.dumps({"task_id": "x", "text": "no tests"}) + "\n")
    with pytest.raises(ValueError, match=r"broken\.jsonl: line 1 .*test_list"):
        load_problems("broken.jsonl", "all")


def test_unknown_and_missing_sources_are_one_line_errors(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for source in ["data/nope.jsonl", "./nope", "/does/not/exist.parquet"]:
        with pytest.raises(FileNotFoundError) as info:
            load_problems(source)
        message = str(info.value)
        assert "\n" not in message and "not found" in message and "embedded, mbpp, humaneval" in message
    with pytest.raises(FileNotFoundError, match=rf"{tmp_path}/data/nope\.jsonl"):
        load_problems("data/nope.jsonl")
    with pytest.raises(ConfigError, match="unknown problem source 'mbppp'"):
        load_problems("mbppp")


def test_local_mbpp_through_the_registry(mbpp_dir):
    assert len(load_problems(str(mbpp_dir), "test")) == 500
    assert len(load_problems(str(mbpp_dir), "test", variant="sanitized")) == 257
    assert len(load_problems(str(mbpp_dir / "sanitized-mbpp.json"), "train")) == 120


def test_humaneval_records_and_canonical_solutions(failing_references):
    problems = load_humaneval()
    assert len(problems) == 164 and [p.task_id for p in problems[:2]] == ["HumanEval/0", "HumanEval/1"]
    assert len({p.task_id for p in problems}) == 164
    first = problems[0]
    assert first.entry_point == "has_close_elements" and first.starter_code == first.prompt
    assert len(first.tests) == 7 and all(t.startswith("assert has_close_elements(") for t in first.tests)
    assert load_problems("humaneval")[0] == first
    assert failing_references(problems) == []
    broken = first.__class__(**{**first.__dict__, "reference_solution": first.prompt + "    return False\n"})
    assert failing_references([broken]) == [first.task_id]


def test_prompts_show_the_first_tests_but_never_humaneval_checks():
    problem = load_embedded("train")[0]
    text = format_prompt(problem, num_shown_tests=2)
    assert problem.prompt in text and problem.tests[0] in text and problem.tests[1] in text
    assert problem.tests[2] not in text
    assert format_prompt(problem, num_shown_tests=0).count("assert") == 0
    system, user = chat_messages(problem, system_prompt="Be brief.")
    assert system == {"role": "system", "content": "Be brief."} and user["role"] == "user"
    humaneval = load_humaneval()[0]
    shown = format_prompt(humaneval, num_shown_tests=1)
    assert "def check" not in shown and "assert has_close_elements" not in shown
    assert humaneval.prompt.rstrip() in shown and "```python" in shown
