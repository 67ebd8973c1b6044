"""CodeGenerationEnv: reset/step semantics, the action mask, and reward values on hand-built code."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest
from conftest import SANDBOX, TRAIN_JSON, require_isolating_sandbox

from lit_codeRL.envs.codegen import EDIT_OPS, CodeGenerationEnv, RewardWeights, build_vocabulary, signature_of
from lit_codeRL.envs.codegen.rewards import structure_score
from lit_codeRL.envs.codegen.vocabulary import statement_of

SMALL = [
    "return",
    "if",
    "else",
    "not",
    "+",
    "-",
    "*",
    "%",
    "==",
    ">",
    "<",
    "(",
    ")",
    ",",
    ":",
    "abs",
    "max",
    "0",
    "1",
    "2",
    "True",
    "False",
]
ADD, IS_EVEN, MAX3, IS_POSITIVE = 0, 2, 3, 7


def make_env(problems, executor, **kwargs):
    kwargs.setdefault("code_tokens", SMALL)
    kwargs.setdefault("max_steps", 10)
    return CodeGenerationEnv(problems, executor=executor, **kwargs)


def play(env, tokens):
    """Step through ``tokens`` (action strings); returns the list of (reward, terminated, truncated, info)."""
    out = []
    for tok in tokens:
        assert env.action_masks()[env.actions.index(tok)], f"{tok!r} masked after {env.code()!r}"
        _, reward, terminated, truncated, info = env.step(env.actions.index(tok))
        out.append((reward, terminated, truncated, info))
    return out


def test_seed_problems_load(train_problems, eval_problems):
    assert len(train_problems) >= 8 and len(eval_problems) >= 3
    assert signature_of(train_problems[ADD]) == ("def add(a, b):", ["a", "b"])
    assert train_problems[ADD].test_statements()[0] == "assert add(1, 2) == 3"
    # the spec features read the docstring alone: the starter code seed JSON appends to the prompt is
    # the env's pre-filled signature line, not part of the statement
    docstrings = [entry["docstring"] for entry in json.loads(TRAIN_JSON.read_text())]
    assert [statement_of(p) for p in train_problems] == [d.strip() for d in docstrings]
    no_starter = dataclasses.replace(train_problems[ADD], starter_code=None)
    assert signature_of(no_starter) == ("def add(x0, x1):", ["x0", "x1"])  # arity of the tests' calls
    names = {p.entry_point for p in train_problems} & {p.entry_point for p in eval_problems}
    assert not names, f"held-out problems leak into training: {names}"


def test_reset_and_observation(train_problems, executor):
    env = make_env(train_problems, executor)
    obs, info = env.reset(seed=0, options={"problem_index": ADD})
    assert obs.shape == env.observation_space.shape == (env.layout.dim,)
    assert obs.dtype == np.float32
    assert env.code() == "def add(a, b):\n"
    assert info["task_id"] == "seed/add"
    mask = info["action_mask"]
    allowed = {env.actions[i] for i in np.flatnonzero(mask)}
    assert {"return", "if", "<end>"} <= allowed
    # statements only: no bare expressions, and SMALL has no "=" to make a parameter a target
    assert not allowed & {"<newline>", "<delete>", ")", "*", ",", "else", ":", "<arg0>", "0", "not"}
    history = obs[env.layout.spec_dim : env.layout.spec_dim + env.layout.history]
    assert (history == -1).all()


def test_statement_lines(train_problems, executor):
    env = make_env(train_problems, executor, code_tokens=[*SMALL, "="])
    env.reset(options={"problem_index": ADD})
    allowed = {env.actions[i] for i in np.flatnonzero(env.action_masks())}
    assert {"<arg0>", "<arg1>"} <= allowed and "<arg2>" not in allowed  # add has two parameters
    play(env, ["<arg0>"])
    allowed = {env.actions[i] for i in np.flatnonzero(env.action_masks())}
    assert allowed == {"=", "<delete>", "<end>"}
    play(env, ["=", "<arg0>", "+", "<arg1>", "<newline>", "return", "<arg0>"])
    assert not env.action_masks()[env.actions.index("<newline>")]  # nothing after a top-level return
    assert play(env, ["<end>"])[-1][3]["all_passed"]
    loose = make_env(train_problems, executor, expression_statements=True)
    loose.reset(options={"problem_index": ADD})
    assert loose.action_masks()[loose.actions.index("<arg0>")]


def test_round_robin_covers_every_problem(train_problems, executor):
    env = make_env(train_problems, executor)
    env.reset(seed=3)
    seen = {env.problem_index}
    for _ in range(len(train_problems) - 1):
        env.reset()
        seen.add(env.problem_index)
    assert seen == set(range(len(train_problems)))


def test_code_quality_reward_by_hand(train_problems, executor):
    env = make_env(train_problems, executor)
    env.reset(options={"problem_index": ADD})
    steps = play(env, ["return", "<arg0>", "+", "<arg1>", "<end>"])
    rewards = [r for r, *_ in steps]
    # 'return' -> None passes 0/5; 'return a' passes (0,0) and (3,0): 2/5 -> 0.5 * 0.4 progress;
    # 'return a +' does not compile: no run, no reward; 'return a + b' passes 5/5 -> 0.5 * 0.6;
    # end: correctness 1 + bonus 1 + syntax 0.2 + structure 0.1 + efficiency 0.2 * (1 - 5/10).
    assert rewards == pytest.approx([0.0, 0.2, 0.0, 0.3, 2.4])
    _, terminated, truncated, info = steps[-1]
    assert terminated and not truncated
    assert info["all_passed"] and info["pass_fraction"] == 1.0 and info["compiles"]
    assert info["code"] == "def add(a, b):\n    return a + b\n"
    assert info["reward_terms"]["efficiency"] == pytest.approx(0.1)
    with pytest.raises(RuntimeError, match="finished episode"):
        env.step(env.actions.index("<end>"))


def test_syntax_error_is_penalized_and_not_run(train_problems, executor):
    env = make_env(train_problems, executor)
    env.reset(options={"problem_index": ADD})
    calls_before = executor.calls
    steps = play(env, ["return", "<arg0>", "+", "<end>"])
    assert steps[-1][0] == pytest.approx(-0.2)
    assert not steps[-1][3]["compiles"] and steps[-1][3]["verdict"] == "syntax_error"
    assert executor.calls == calls_before + 2  # 'return' and 'return a' ran; nothing that fails to compile


def test_cache_avoids_rerunning_programs(train_problems, executor):
    env = make_env(train_problems, executor)
    env.reset(options={"problem_index": ADD})
    play(env, ["return", "<arg0>", "+", "<arg1>", "<end>"])
    calls = executor.calls
    env.reset(options={"problem_index": ADD})
    play(env, ["return", "<arg0>", "+", "<arg1>", "<end>"])
    assert executor.calls == calls
    assert env.executor.hits >= 3


def test_sparse_and_curriculum_rewards(train_problems, executor):
    tokens = ["return", "<arg0>", "+", "<arg1>", "<end>"]
    env = make_env(train_problems, executor, reward_type="sparse")
    env.reset(options={"problem_index": ADD})
    assert [r for r, *_ in play(env, tokens)] == [0.0, 0.0, 0.0, 0.0, 1.0]

    cur = make_env(train_problems, executor, reward_type="curriculum")
    cur.set_progress(0.0)
    cur.reset(options={"problem_index": ADD})
    assert [r for r, *_ in play(cur, tokens)] == pytest.approx([0.0, 0.2, 0.0, 0.3, 2.4])
    cur.set_progress(0.5)
    cur.reset(options={"problem_index": ADD})
    assert [r for r, *_ in play(cur, tokens)] == pytest.approx([0.0, 0.1, 0.0, 0.15, 1.7])
    cur.set_progress(1.0)
    cur.reset(options={"problem_index": ADD})
    assert [r for r, *_ in play(cur, tokens)] == pytest.approx([0.0, 0.0, 0.0, 0.0, 1.0])


def test_curriculum_unlocks_harder_problems(train_problems, executor):
    env = make_env(train_problems, executor, reward_type="curriculum")
    env.set_progress(0.0)
    env.reset(seed=0)
    early = {env.problem_index}
    for _ in range(20):
        env.reset()
        early.add(env.problem_index)
    assert MAX3 not in early  # the one "medium" problem waits
    env.set_progress(0.9)
    late = set()
    for _ in range(20):
        env.reset()
        late.add(env.problem_index)
    assert MAX3 in late


def test_reward_weights_are_used(train_problems, executor):
    weights = RewardWeights(
        correctness=2.0, all_pass_bonus=0.0, syntax=0.0, structure=0.0, efficiency=0.0, progress=0.0
    )
    env = make_env(train_problems, executor, weights=weights)
    env.reset(options={"problem_index": ADD})
    assert [r for r, *_ in play(env, ["return", "<arg0>", "<end>"])] == pytest.approx([0.0, 0.0, 0.8])


def test_truncation_grades_the_program(train_problems, executor):
    env = make_env(train_problems, executor, max_steps=3)
    env.reset(options={"problem_index": ADD})
    steps = play(env, ["return", "<arg0>", "<delete>"])
    reward, terminated, truncated, info = steps[-1]
    assert truncated and not terminated
    assert info["code"] == "def add(a, b):\n    return\n"
    # 'return a' earned 0.2 progress; deleting back to 'return' (0/5) loses it; final: syntax 0.2 + structure:
    # a bare 'return' fails "ends in a return with a value" -> 2/3 * 0.1
    assert reward == pytest.approx(-0.2 + 0.2 + 0.1 * 2 / 3)


def test_multiline_program_with_edit_ops(train_problems, executor):
    env = make_env(train_problems, executor, max_steps=20)
    env.reset(options={"problem_index": IS_POSITIVE})
    tokens = ["if", "<arg0>", ">", "0", ":", "<newline>"]
    play(env, tokens)
    allowed = {env.actions[i] for i in np.flatnonzero(env.action_masks())}
    assert allowed == {"<indent>", "<delete>", "<end>"}  # a block needs its body indented
    play(env, ["<indent>", "return", "True", "<newline>"])
    assert env.action_masks()[env.actions.index("<dedent>")]
    play(env, ["<dedent>", "else", ":", "<newline>", "<indent>", "return", "False"])
    steps = play(env, ["<end>"])
    info = steps[-1][3]
    assert (
        info["code"]
        == "def is_positive(n):\n    if n > 0:\n        return True\n    else:\n        return False\n"
    )
    assert info["all_passed"]


def test_delete_removes_tokens_and_lines(train_problems, executor):
    env = make_env(train_problems, executor)
    env.reset(options={"problem_index": IS_POSITIVE})
    play(env, ["if", "<arg0>", ":", "<newline>", "<delete>", "<delete>"])
    assert env.code() == "def is_positive(n):\n    if n\n"
    obs = env.observation()
    history = obs[env.layout.spec_dim : env.layout.spec_dim + env.layout.history]
    assert history[-2:].tolist() == [env.actions.index("if"), env.actions.index("<arg0>")]


def test_mask_follows_expression_grammar(train_problems, executor):
    env = make_env(train_problems, executor)
    env.reset(options={"problem_index": MAX3})
    play(env, ["return", "max", "(", "<arg0>", ","])
    allowed = {env.actions[i] for i in np.flatnonzero(env.action_masks())}
    assert {"<arg1>", "<arg2>", "0", "(", ")", "not"} <= allowed
    assert not allowed & {"*", ",", ":", "<newline>", "return", "else"}
    play(env, ["<arg1>", ",", "<arg2>"])
    assert env.code() == "def max_of_three(a, b, c):\n    return max(a, b, c)\n"  # brackets closed
    assert not env.action_masks()[env.actions.index("<newline>")]  # open bracket: no newline yet
    steps = play(env, [")", "<end>"])
    assert steps[-1][3]["all_passed"]


def test_unmasked_env_accepts_any_action(train_problems, executor):
    env = make_env(train_problems, executor, action_masking=False)
    env.reset(options={"problem_index": ADD})
    assert env.action_masks()[len(EDIT_OPS) :].sum() == len(env.vocabulary) - 1  # only <arg2> is not add's
    steps = play(env, ["+", "+", "<end>"])
    assert not steps[-1][3]["compiles"]


def test_vocab_size_extends_with_literals(train_problems, executor):
    small = build_vocabulary(train_problems, SMALL)
    env = make_env(train_problems, executor, vocab_size=5000)
    assert len(env.vocabulary) == 5000 and env.action_space.n == 5000 + len(EDIT_OPS)
    assert env.vocabulary[: len(small)] == small
    assert env.observation_space.shape == make_env(train_problems, executor).observation_space.shape
    assert "4999" not in small and "42" in env.vocabulary
    with pytest.raises(ValueError, match="smaller than"):
        build_vocabulary(train_problems, SMALL, vocab_size=5)
    env.reset(options={"problem_index": ADD})
    steps = play(env, ["return", "<arg0>", "+", "42", "<end>"])
    assert steps[-1][3]["code"] == "def add(a, b):\n    return a + 42\n"


def test_state_round_trip(train_problems, executor):
    env = make_env(train_problems, executor)
    env.reset(seed=5)
    play(env, ["return", "<arg0>"])
    state = env.get_state()
    obs = env.observation()
    other = make_env(train_problems, executor)
    other.reset(seed=99)
    other.set_state(state)
    np.testing.assert_array_equal(other.observation(), obs)
    assert other.code() == env.code()
    assert [other.reset()[1]["task_id"] for _ in range(5)] == [env.reset()[1]["task_id"] for _ in range(5)]


def test_structure_score():
    assert structure_score("def f(a):\n    return a\n") == 1.0
    assert structure_score("def f(a):\n    return a\n    a\n") == 0.0
    assert structure_score("def f(a):\n    return a\n    return a\n") == pytest.approx(2 / 3)
    assert structure_score("def f(a):\n    a\n") == pytest.approx(1 / 3)
    assert structure_score("def f(a):\n    return\n") == pytest.approx(2 / 3)
    assert structure_score("def f(a):\n    return (\n") == 0.0


def test_env_without_executor_grades_in_its_own_sandbox(train_problems):
    require_isolating_sandbox()
    env = CodeGenerationEnv(train_problems, code_tokens=SMALL, max_steps=10, sandbox=SANDBOX)
    try:
        env.reset(options={"problem_index": IS_EVEN})
        steps = play(env, ["return", "not", "<arg0>", "%", "2", "<end>"])
        assert steps[-1][3]["all_passed"]
        assert steps[-1][3]["code"] == "def is_even(n):\n    return not n % 2\n"
        assert env.executor.executor.config == SANDBOX
    finally:
        env.close()


def test_problem_weights_focus_sampling_and_checkpoint(train_problems, executor):
    env = make_env(train_problems, executor)
    env.reset(seed=0)
    weights = [0.0] * len(train_problems)
    weights[MAX3], weights[ADD] = 3.0, 1.0
    env.set_problem_weights(weights)
    picks = []
    for _ in range(400):
        env.reset()
        picks.append(env.problem_index)
    assert set(picks) == {MAX3, ADD}
    assert 0.65 < picks.count(MAX3) / len(picks) < 0.85  # 3:1

    restored = make_env(train_problems, executor)
    restored.reset(seed=1)
    restored.set_state(env.get_state())
    nxt = []
    for e in (env, restored):
        e.reset()
        nxt.append(e.problem_index)
    assert nxt[0] == nxt[1] and restored.problem_weights.tolist() == weights

    env.set_problem_weights(None)  # back to the round-robin: every problem within one pass
    seen = set()
    for _ in range(len(train_problems)):
        env.reset()
        seen.add(env.problem_index)
    assert len(seen) >= len(train_problems) - 1  # the pass may have started before the switch
    with pytest.raises(ValueError):
        env.set_problem_weights([1.0])
    with pytest.raises(ValueError):
        env.set_problem_weights([0.0] * len(train_problems))
