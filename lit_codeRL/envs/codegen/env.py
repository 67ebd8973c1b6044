"""``CodeGenerationEnv``: write a Python function one token at a time (the DQN environment).

The env pre-fills the signature line from the problem's starter code (``def add(a, b):``) and the
agent writes the body. Actions are edit operations (newline, indent, dedent, delete, end) followed by
a vocabulary of code tokens: keywords, operators, builtins, literals and *argument slots*
(``<arg0>``, ``<arg1>`` ...) that render as the current problem's parameter names, so one action
set serves every signature. ``vocab_size`` pads the vocabulary with further integer literals (the
design's default is 5,000 code tokens); learning runs use the small vocabulary built from the
problems (``vocab_size=None``).

Three choices keep DQN's many thousand env steps cheap and the problems learnable:

* **Code runs only when it can mean something**: at the final step and, for the progress reward,
  after steps that leave a program that compiles once open brackets are closed. Compilation is an
  in-process ``compile()`` (no execution); execution goes through an injectable executor (by default
  the project sandbox) behind an LRU cache keyed by the program text and its tests (``execution.py``).
* **Syntax-aware action mask** (``info["action_mask"]``, :meth:`action_masks`): a small line
  grammar allows only tokens that can still lead to valid Python (Huang & Ontañón 2020 on invalid
  action masking). The final ``compile()`` remains the judge; the mask only prunes exploration
  (``grammar.py``).
* **Learnable, fixed-size observation**: hashed bag-of-words of the spec (name, docstring, arity,
  tests), the ids of the last ``history`` code tokens (the Q-network embeds them, so a 5,000-token
  vocabulary costs an embedding table, not a 5,000-wide one-hot per position) and metadata
  (``observation.py``). The vocabulary and signatures are ``vocabulary.py``, the rewards ``rewards.py``.
"""

from __future__ import annotations

import keyword
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import gymnasium as gym
import numpy as np

from lit_codeRL.envs.codegen.execution import CachedExecutor, CodeExecutor, SandboxExecutor, compiles
from lit_codeRL.envs.codegen.grammar import ASSIGN_OPS, LINE_START, LineState, token_class, transition
from lit_codeRL.envs.codegen.observation import ObservationLayout, spec_features
from lit_codeRL.envs.codegen.rewards import (
    REWARD_TYPES,
    RewardWeights,
    code_quality_final,
    curriculum_mix,
    progress_reward,
    sparse_reward,
    structure_score,
)
from lit_codeRL.envs.codegen.vocabulary import (
    ARG_SLOT,
    DEDENT,
    DELETE,
    EDIT_OPS,
    END,
    INDENT,
    NEWLINE,
    build_vocabulary,
    signature_of,
)
from lit_codeRL.problems.record import Problem
from lit_codeRL.sandbox.config import SandboxConfig
from lit_codeRL.sandbox.types import ExecutionResult, Program, Verdict

_DIFFICULTY_RANK = {"easy": 0, "medium": 1, "hard": 2}


@dataclass
class _Line:
    indent: int
    tokens: list[int] = field(default_factory=list)


class CodeGenerationEnv(gym.Env):
    """Token-by-token function writing with test-based rewards (see the module docstring).

    ``reset(options={"problem_index": i})`` picks a problem; otherwise problems come round-robin in a
    reshuffled order. ``step`` returns ``info`` with ``action_mask``, ``code`` (bracket-closed
    program), ``compiles``, ``pass_fraction``, ``all_passed``, ``verdict`` and ``reward_terms``.
    The episode terminates on ``<end>`` and is truncated after ``max_steps`` actions; either way the
    program is graded at that step, so no reward follows a truncation.

    ``expression_statements=False`` (default) masks lines that are bare expressions (``a + 1`` on
    its own line computes a value and drops it; the restricted vocabulary has no side effects), and
    ``action_masking=False`` turns the whole mask off (only parameters the problem lacks stay out).
    Programs are graded by ``executor``, or else by the project sandbox configured by ``sandbox``
    (``SandboxConfig()`` defaults: the isolating ``auto`` backend).
    """

    metadata = {"render_modes": ["ansi"]}

    def __init__(
        self,
        problems: Sequence[Problem],
        *,
        code_tokens: Sequence[str] | None = None,
        vocab_size: int | None = None,
        max_steps: int = 16,
        reward_type: str = "code_quality",
        weights: RewardWeights | None = None,
        executor: CodeExecutor | CachedExecutor | None = None,
        sandbox: SandboxConfig | None = None,
        cache_size: int = 100_000,
        spec_dim: int = 64,
        history: int = 12,
        action_masking: bool = True,
        expression_statements: bool = False,
        vocabulary: Sequence[str] | None = None,
    ):
        if not problems:
            raise ValueError("CodeGenerationEnv needs at least one problem")
        if reward_type not in REWARD_TYPES:
            raise ValueError(f"unknown reward_type {reward_type!r}; choose one of {REWARD_TYPES}")
        self.problems = list(problems)
        self.vocabulary = (
            tuple(vocabulary)
            if vocabulary is not None
            else build_vocabulary(problems, code_tokens, vocab_size)
        )
        self.actions: tuple[str, ...] = EDIT_OPS + self.vocabulary
        self.max_steps = max_steps
        self.reward_type = reward_type
        self.weights = weights or RewardWeights()
        self.action_masking = action_masking
        self.expression_statements = expression_statements
        self.layout = ObservationLayout(spec_dim=spec_dim, history=history)
        if executor is None:
            executor = SandboxExecutor(sandbox)
        self.executor = (
            executor if isinstance(executor, CachedExecutor) else CachedExecutor(executor, cache_size)
        )

        self.action_space = gym.spaces.Discrete(len(self.actions))
        self.observation_space = gym.spaces.Box(-np.inf, np.inf, shape=(self.layout.dim,), dtype=np.float32)

        classes = [token_class(t) for t in self.vocabulary]
        self._class_keys = sorted(set(classes))
        self._action_class = np.array([self._class_keys.index(c) for c in classes], dtype=np.int64)
        self._is_assign = np.array([c in ASSIGN_OPS for c in self._class_keys], dtype=bool)
        self._signatures = [signature_of(p) for p in self.problems]
        self._specs = [spec_features(p, spec_dim) for p in self.problems]
        self._tests = [tuple(p.test_statements()) for p in self.problems]
        self._slot_ok = []  # per problem: argument slots beyond its arity are not actions of that problem
        for _, args in self._signatures:
            ok = np.ones(len(self.vocabulary), dtype=bool)
            for i, t in enumerate(self.vocabulary):
                m = ARG_SLOT.match(t)
                if m and int(m.group(1)) >= len(args):
                    ok[i] = False
            self._slot_ok.append(ok)
        self.progress = 0.0
        self.problem_weights: np.ndarray | None = None
        self._order: list[int] = []
        self._problem = 0
        self._lines: list[_Line] = [_Line(1)]
        self._steps = 0
        self._potential = 0.0
        self._done = True
        self.episodes = 0

    # -- public helpers --------------------------------------------------------------------------

    @property
    def problem(self) -> Problem:
        return self.problems[self._problem]

    @property
    def problem_index(self) -> int:
        return self._problem

    def set_progress(self, progress: float) -> None:
        """Training progress in [0, 1]: drives the ``curriculum`` reward mix and problem unlocking."""
        self.progress = min(max(float(progress), 0.0), 1.0)

    def set_problem_weights(self, weights: Sequence[float] | None) -> None:
        """Relative sampling weights of the problems for the following resets (e.g. more episodes on
        the problems the policy still fails); None restores the reshuffled round-robin order."""
        if weights is None:
            self.problem_weights = None
            return
        w = np.asarray(weights, dtype=np.float64)
        if w.shape != (len(self.problems),) or (w < 0).any() or not w.sum() > 0:
            raise ValueError(
                f"need {len(self.problems)} non-negative weights with a positive sum, got {weights}"
            )
        self.problem_weights = w

    def code(self, close_brackets: bool = True) -> str:
        """The program so far: the signature line and the body (open brackets closed if asked)."""
        header, args = self._signatures[self._problem]
        out = [header]
        for n, line in enumerate(self._lines):
            if not line.tokens:
                continue
            text = self._render(line.tokens, args)
            if close_brackets and n == len(self._lines) - 1:
                text += "".join(")" if b == "(" else "]" for b in reversed(self._line_state(line).stack))
            out.append("    " * line.indent + text)
        return "\n".join(out) + "\n"

    def action_masks(self) -> np.ndarray:
        """Bool ``[n_actions]``: True where the action can still lead to valid Python."""
        if not self.action_masking:
            mask = np.ones(len(self.actions), dtype=bool)
            mask[len(EDIT_OPS) :] = self._slot_ok[self._problem]
            return mask
        return self._mask

    def observation(self) -> np.ndarray:
        obs = np.empty(self.layout.dim, dtype=np.float32)
        spec_dim, hist = self.layout.spec_dim, self.layout.history
        obs[:spec_dim] = self._specs[self._problem]
        ids = self._flat_tokens()[-hist:] if hist else []
        obs[spec_dim : spec_dim + hist] = -1.0
        if ids:
            obs[spec_dim + hist - len(ids) : spec_dim + hist] = ids
        state = self._line_state(self._lines[-1])
        obs[spec_dim + hist :] = (
            self._steps / self.max_steps,
            self._lines[-1].indent / 4.0,
            len(state.stack) / 4.0,
            len(self._lines) / self.max_steps,
            float(compiles(self.code())),
            self._potential,
            float(state.expect_operand),
        )
        return obs

    # -- gymnasium API ---------------------------------------------------------------------------

    def reset(self, *, seed: int | None = None, options: dict | None = None) -> tuple[np.ndarray, dict]:
        super().reset(seed=seed)
        options = options or {}
        if "problem_index" in options:
            self._problem = int(options["problem_index"])
        else:
            self._problem = self._next_problem()
        self._lines = [_Line(1)]
        self._steps = 0
        self._potential = 0.0
        self._done = False
        self._refresh_mask()
        return self.observation(), self._info({})

    def step(self, action: int) -> tuple[np.ndarray, float, bool, bool, dict]:
        if self._done:
            raise RuntimeError("step() called on a finished episode; call reset()")
        action = int(action)
        if not 0 <= action < len(self.actions):
            raise ValueError(f"action {action} outside [0, {len(self.actions)})")
        invalid = not self.action_masks()[action]
        op = self.actions[action]
        self._steps += 1
        terminated = op == END
        current = self._lines[-1]
        if op == NEWLINE:
            self._lines.append(_Line(current.indent))
        elif op == INDENT:
            current.indent += 1
        elif op == DEDENT:
            current.indent = max(1, current.indent - 1)
        elif op == DELETE:
            if current.tokens:
                current.tokens.pop()
            elif len(self._lines) > 1:
                self._lines.pop()
        elif op != END:
            current.tokens.append(action)
        truncated = not terminated and self._steps >= self.max_steps
        self._done = terminated or truncated
        self._refresh_mask()
        reward, terms, graded = self._reward(final=self._done)
        info = self._info(terms, graded)
        info["invalid_action"] = invalid
        if self._done:
            self.episodes += 1
        return self.observation(), reward, terminated, truncated, info

    def render(self) -> str:
        return self.code()

    def close(self) -> None:
        self.executor.close()

    # -- checkpointable state --------------------------------------------------------------------

    def get_state(self) -> dict:
        """Plain-Python snapshot: current episode, sampling order, RNG and curriculum progress."""
        return {
            "problem": self._problem,
            "lines": [[ln.indent, list(ln.tokens)] for ln in self._lines],
            "steps": self._steps,
            "potential": self._potential,
            "done": self._done,
            "order": list(self._order),
            "progress": self.progress,
            "problem_weights": None if self.problem_weights is None else self.problem_weights.tolist(),
            "episodes": self.episodes,
            "rng": self.np_random.bit_generator.state,
        }

    def set_state(self, state: dict) -> None:
        self._problem = int(state["problem"])
        self._lines = [_Line(int(i), [int(t) for t in toks]) for i, toks in state["lines"]]
        self._steps = int(state["steps"])
        self._potential = float(state["potential"])
        self._done = bool(state["done"])
        self._order = [int(i) for i in state["order"]]
        self.progress = float(state["progress"])
        self.set_problem_weights(state.get("problem_weights"))
        self.episodes = int(state["episodes"])
        self.np_random.bit_generator.state = state["rng"]
        self._refresh_mask()

    # -- internals -------------------------------------------------------------------------------

    def _next_problem(self) -> int:
        candidates = list(range(len(self.problems)))
        if self.reward_type == "curriculum":
            ranks = [_DIFFICULTY_RANK.get(str(p.difficulty).lower(), 1) for p in self.problems]
            unlocked = min(ranks) + int(self.progress * (max(ranks) - min(ranks) + 1))
            candidates = [i for i in candidates if ranks[i] <= unlocked]
        if self.problem_weights is not None:
            w = self.problem_weights[candidates]
            if w.sum() > 0:
                return int(self.np_random.choice(candidates, p=w / w.sum()))
        self._order = [i for i in self._order if i in candidates]
        if not self._order:
            self._order = [int(i) for i in self.np_random.permutation(candidates)]
        return self._order.pop()

    def _render(self, tokens: list[int], args: list[str]) -> str:
        parts: list[str] = []
        glue = True  # no space before the first token
        for tid in tokens:
            tok = self.actions[tid]
            m = ARG_SLOT.match(tok)
            if m:
                i = int(m.group(1))
                tok = args[i] if i < len(args) else f"_missing_arg{i}"  # NameError when run: honest failure
            callee = parts[-1] if parts else ""
            call = tok in ("(", "[") and (
                (callee.isidentifier() and not keyword.iskeyword(callee)) or callee in (")", "]")
            )
            if not glue and not call and tok not in (")", "]", ",", ":"):
                parts.append(" ")
            parts.append(tok)
            glue = tok in ("(", "[") or tok.endswith("(")
        return "".join(parts)

    def _line_state(self, line: _Line) -> LineState:
        state = LineState()
        for tid in line.tokens:
            nxt = transition(state, token_class(self.actions[tid]))
            state = nxt if nxt is not None else LineState(kind="broken")
        return state

    def _flat_tokens(self) -> list[int]:
        ids: list[int] = []
        prev_indent = 1
        newline, indent, dedent = (EDIT_OPS.index(o) for o in (NEWLINE, INDENT, DEDENT))
        for n, line in enumerate(self._lines):
            if n:
                ids.append(newline)
            delta = line.indent - prev_indent
            ids += [indent] * max(delta, 0) + [dedent] * max(-delta, 0)
            prev_indent = line.indent
            ids += line.tokens
        return ids

    def _refresh_mask(self) -> None:
        if not self.action_masking:
            return
        n_edit = len(EDIT_OPS)
        mask = np.zeros(len(self.actions), dtype=bool)
        cur = self._lines[-1]
        prev = self._lines[-2] if len(self._lines) > 1 else None
        state = self._line_state(cur)
        prev_opens_block = prev is not None and self._line_state(prev).kind in ("header", "for", "else")
        needs_indent = prev_opens_block and cur.indent <= prev.indent
        mask[EDIT_OPS.index(END)] = True
        # A line after a top-level return is dead code: no newline there.
        ends_function = (
            cur.indent == 1
            and bool(cur.tokens)
            and self.actions[cur.tokens[0]] in ("return", "break", "continue")
        )
        bare_expression = state.kind == "expr" and not self.expression_statements
        mask[EDIT_OPS.index(NEWLINE)] = state.complete() and not (
            needs_indent or ends_function or bare_expression
        )
        mask[EDIT_OPS.index(DELETE)] = bool(cur.tokens) or len(self._lines) > 1
        if not cur.tokens:
            mask[EDIT_OPS.index(INDENT)] = needs_indent and cur.indent == prev.indent
            mask[EDIT_OPS.index(DEDENT)] = cur.indent > 1 and not (
                prev_opens_block and cur.indent > prev.indent
            )
        if not needs_indent:
            allowed = np.array([transition(state, c) is not None for c in self._class_keys], dtype=bool)
            if not cur.tokens:
                allowed &= self._line_start_allowed()
            elif not self.expression_statements and state.kind == "expr":
                allowed &= self._is_assign  # a line-start operand must become an assignment target
            mask[n_edit:] = allowed[self._action_class] & self._slot_ok[self._problem]
        self._mask = mask

    def _line_start_allowed(self) -> np.ndarray:
        # elif/else only right after the if-block at this indentation has closed.
        cur = self._lines[-1]
        can_else = False
        for line in reversed(self._lines[:-1]):
            if line.indent > cur.indent:
                continue
            if line.indent == cur.indent and line.tokens:
                can_else = self.actions[line.tokens[0]] in ("if", "elif")
            break
        allowed = np.array([can_else or c not in ("elif", "else") for c in self._class_keys], dtype=bool)
        if not self.expression_statements:
            # Statements only: a bare expression computes a value and throws it away; an identifier may
            # start a line when the vocabulary can assign to it.
            can_assign = bool(self._is_assign.any())
            allowed &= np.array([c in LINE_START or (c == "ident" and can_assign) for c in self._class_keys])
        return allowed

    def _grade(self, code: str) -> ExecutionResult:
        return self.executor.run(Program(code=code, tests=self._tests[self._problem]))

    def _reward(self, final: bool) -> tuple[float, dict[str, float], dict[str, Any]]:
        code = self.code()
        ok = compiles(code)
        graded: dict[str, Any] = {"code": code, "compiles": ok, "pass_fraction": 0.0, "all_passed": False}
        terms: dict[str, float] = {}
        needs_progress = self.reward_type != "sparse" and self.weights.progress != 0.0
        result = None
        if ok and (final or needs_progress):
            result = self._grade(code)
            graded["pass_fraction"] = result.pass_fraction
            graded["all_passed"] = result.passed
            graded["verdict"] = result.verdict.value
        elif not ok:
            graded["verdict"] = Verdict.SYNTAX_ERROR.value
        if result is not None and needs_progress:
            terms["progress"] = progress_reward(self._potential, result.pass_fraction, self.weights)
            self._potential = result.pass_fraction
        if final:
            terms.update(
                code_quality_final(
                    ok,
                    graded["pass_fraction"],
                    graded["all_passed"],
                    structure_score(code) if ok else 0.0,
                    self._steps,
                    self.max_steps,
                    self.weights,
                )
            )
        dense = float(sum(terms.values()))
        if self.reward_type == "code_quality":
            return dense, terms, graded
        sparse = sparse_reward(graded["all_passed"]) if final else 0.0
        if self.reward_type == "sparse":
            return sparse, {"sparse": sparse}, graded
        return curriculum_mix(dense, sparse, self.progress), {**terms, "sparse": sparse}, graded

    def _info(self, terms: dict[str, float], graded: dict[str, Any] | None = None) -> dict[str, Any]:
        info: dict[str, Any] = {
            "action_mask": self.action_masks().copy(),
            "task_id": self.problem.task_id,
            "problem_index": self._problem,
            "steps": self._steps,
            "reward_terms": terms,
        }
        if graded is not None:
            info.update(graded)
        return info
