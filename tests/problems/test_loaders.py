"""Problem loaders on real data: MBPP (../shared), HumanEval (package), seed JSON, embedded set."""

from __future__ import annotations

import json

import pytest

from lit_codeRL.errors import ConfigError
from lit_codeRL.problems import load_embedded, load_humaneval, load_mbpp, load_problems, load_seed_json
from lit_codeRL.problems.prompts import chat_messages
from lit_codeRL.sandbox import Program, make_sandbox


@pytest.mark.parametrize(
    ("split", "full", "sanitized"),
    [("test", 500, 257), ("train", 374, 120), ("validation", 90, 43), ("prompt", 10, 7)],
)
def test_mbpp_split_sizes(mbpp_dir, split, full, sanitized):
    problems = load_mbpp(str(mbpp_dir / "mbpp.jsonl"), split)
    assert len(problems) == full
    assert len(load_mbpp(str(mbpp_dir), split, variant="sanitized")) == sanitized
    assert all(p.entry_point and len(p.tests) >= 1 for p in problems)


def test_mbpp_record_and_total(mbpp_dir):
    assert len(load_mbpp(str(mbpp_dir), "all")) == 974
    assert len(load_mbpp(str(mbpp_dir / "sanitized-mbpp.json"), "all")) == 427
    first = load_mbpp(str(mbpp_dir), "test")[0]
    assert first.task_id == "mbpp/11" and first.entry_point == "remove_Occ" and len(first.tests) == 3
    # The registry routes a local path to the same loader.
    assert load_problems(str(mbpp_dir / "mbpp.jsonl"), "train")[0].task_id == "mbpp/601"


def test_humaneval_has_164_problems():
    problems = load_humaneval()
    assert len(problems) == 164
    assert problems[0].task_id == "HumanEval/0"
    # check(candidate) split into asserts compared on the trusted side (tests/sandbox/test_humaneval_split.py)
    assert problems[0].tests[0] == "assert has_close_elements([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True"


def test_seed_json_round_trip(tmp_path):
    path = tmp_path / "seed.json"
    path.write_text(
        json.dumps(
            [
                {
                    "function_name": "add",
                    "docstring": "Add two numbers.",
                    "test_cases": [[[2, 3], 5], [[-1, 1], 0]],
                    "starter_code": "def add(a, b):",
                }
            ]
        )
    )
    (problem,) = load_seed_json(path)
    assert problem.entry_point == "add" and problem.io_pairs == (("2, 3", "5"), ("-1, 1", "0"))
    assert problem.test_statements() == ["assert add(2, 3) == 5", "assert add(-1, 1) == 0"]
    assert load_problems(str(path))[0] == problem


def test_bad_sources_are_clear_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nope.jsonl"):
        load_problems(str(tmp_path / "nope.jsonl"))
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps([{"function_name": "f"}]))
    with pytest.raises(ConfigError, match="test_cases"):
        load_seed_json(bad)
    with pytest.raises(ConfigError, match="split"):
        load_mbpp(str(tmp_path), "bogus")


def test_embedded_set_splits_and_reference_solutions_pass():
    train, evaluation = load_embedded("train"), load_embedded("eval")
    assert len(train) + len(evaluation) >= 40 and len(evaluation) >= 10
    ids = [p.task_id for p in train + evaluation]
    assert len(set(ids)) == len(ids)
    assert {p.difficulty for p in train} == {"easy", "medium", "hard"} == {p.difficulty for p in evaluation}
    with make_sandbox(workers=2) as sandbox:
        results = sandbox.run_batch(
            [
                Program(p.reference_solution, tuple(p.test_statements()), p.setup_code)
                for p in train + evaluation
            ]
        )
        assert [p.task_id for p, r in zip(train + evaluation, results, strict=True) if not r.passed] == []
        # A wrong solution fails, so the check above can fail too.
        wrong = sandbox.run(Program("def add_numbers(a, b):\n    return a - b", tuple(train[0].tests)))
        assert not wrong.passed


def test_prompt_shows_task_and_first_test_only():
    problem = load_embedded("train")[0]
    (message,) = chat_messages(problem)
    assert problem.prompt in message["content"] and problem.tests[0] in message["content"]
    assert problem.tests[1] not in message["content"]
