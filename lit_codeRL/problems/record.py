"""The one record every problem source is turned into."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Problem:
    """A programming task with machine-checkable tests.

    Every loader (seed JSON, MBPP, HumanEval, later SWE-bench/KodCode) produces this record, so
    environments, rewards and evaluation never care where a task came from.
    """

    task_id: str
    """Unique id within its source, e.g. ``"mbpp/11"`` or ``"coderl/add"``."""
    prompt: str
    """Natural-language statement of the task (no tests, no chat template)."""
    entry_point: str | None = None
    """Name of the function the tests call, when there is one."""
    tests: tuple[str, ...] = ()
    """Independent test statements, usually ``assert`` lines; each is graded on its own."""
    io_pairs: tuple[tuple[str, str], ...] = ()
    """``(call arguments, expected value)`` as Python expressions, e.g. ``("2, 3", "5")``."""
    setup_code: str = ""
    """Trusted code run before the tests (imports they need); not written by the policy."""
    reference_solution: str | None = None
    """A known-correct solution, when the source has one."""
    starter_code: str | None = None
    """Signature/stub shown to the policy, e.g. ``"def add(a, b):"``."""
    difficulty: str | None = None
    """Free-form difficulty tag (``easy``/``medium``/``hard``) when the source has one."""
    source: str = ""
    """Where the problem came from (``"mbpp"``, ``"humaneval"``, a file path)."""
    metadata: dict = field(default_factory=dict, compare=False, hash=False)
    """Anything source-specific that rewards or logs may want."""

    def test_statements(self) -> list[str]:
        """All tests as executable statements: ``tests`` then one assert per io pair."""
        statements = list(self.tests)
        if self.io_pairs:
            if not self.entry_point:
                raise ValueError(f"problem {self.task_id} has io_pairs but no entry_point")
            statements += [
                f"assert {self.entry_point}({args}) == {expected}" for args, expected in self.io_pairs
            ]
        return statements

    @property
    def num_tests(self) -> int:
        return len(self.tests) + len(self.io_pairs)
