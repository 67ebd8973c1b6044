"""How ``CodeGenerationEnv`` grades programs: the project sandbox behind an LRU cache, and an
in-process ``compile()`` check (nothing runs) for the steps where only syntax matters."""

from __future__ import annotations

import warnings
from collections import OrderedDict
from functools import lru_cache
from typing import Any, Protocol

from lit_codeRL.sandbox import make_sandbox
from lit_codeRL.sandbox.config import SandboxConfig
from lit_codeRL.sandbox.types import ExecutionResult, Program, Verdict


class CodeExecutor(Protocol):
    """Anything that grades programs like the sandbox does (``Sandbox.run_batch``)."""

    def run_batch(self, programs: list[Program]) -> list[ExecutionResult]: ...


class SandboxExecutor:
    """The project sandbox (``lit_codeRL.sandbox.make_sandbox``), started on first use."""

    def __init__(self, config: SandboxConfig | None = None):
        self.config = config or SandboxConfig()
        self._sandbox: Any = None

    def run_batch(self, programs: list[Program]) -> list[ExecutionResult]:
        if self._sandbox is None:
            self._sandbox = make_sandbox(self.config)
        return self._sandbox.run_batch(programs)

    def close(self) -> None:
        if self._sandbox is not None:
            self._sandbox.close()
            self._sandbox = None

    def __getstate__(self) -> dict:  # a running sandbox (processes, pipes) never travels
        state = dict(self.__dict__)
        state["_sandbox"] = None
        return state


class CachedExecutor:
    """LRU cache in front of an executor, keyed by (code, tests): DQN rewrites the same programs
    thousands of times, and a result is a pure function of the program text."""

    def __init__(self, executor: CodeExecutor, maxsize: int = 100_000):
        self.executor = executor
        self.maxsize = maxsize
        self._cache: OrderedDict[tuple[str, tuple[str, ...]], ExecutionResult] = OrderedDict()
        self.hits = 0
        self.misses = 0
        self.exec_time_s = 0.0

    def run(self, program: Program) -> ExecutionResult:
        key = (program.code, program.tests)
        hit = self._cache.get(key)
        if hit is not None:
            self.hits += 1
            self._cache.move_to_end(key)
            return hit
        self.misses += 1
        result = self.executor.run_batch([program])[0]
        self.exec_time_s += result.wall_time_s
        if result.verdict is not Verdict.SANDBOX_ERROR:  # not the program's fault: retry next time
            self._cache[key] = result
            if len(self._cache) > self.maxsize:
                self._cache.popitem(last=False)
        return result

    def stats(self) -> dict[str, float]:
        return {
            "hits": self.hits,
            "misses": self.misses,
            "size": len(self._cache),
            "exec_time_s": self.exec_time_s,
        }

    def close(self) -> None:
        close = getattr(self.executor, "close", None)
        if close:
            close()


@lru_cache(maxsize=200_000)
def compiles(code: str) -> bool:
    """Whether ``code`` compiles (byte-compilation only: nothing runs)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # e.g. SyntaxWarning "'int' object is not callable"
        try:
            compile(code, "<generated>", "exec", dont_inherit=True)
        except (SyntaxError, ValueError):
            return False
    return True
