"""``SWEGrader.validate``: which task rows can be trained on, through the real sandbox."""

from __future__ import annotations

from tests.grading.repo_tasks import BUGGY, FIXED, TESTS, bwrap_grader, make_task
from tests.sandbox.conftest import require_bwrap


def test_a_fail_to_pass_test_that_passes_on_the_base_fails_validation(tmp_path):
    """A row whose FAIL_TO_PASS holds a test the base already passes (``test_sub`` here) was
    validated, because the base as a whole is not resolved: a fix of the other tests alone then
    resolved it, and the row said the wrong thing about its bug. Every FAIL_TO_PASS test must fail
    on the base; the reason names the ones that do not."""
    require_bwrap()
    files = {"calc.py": BUGGY, "test_calc.py": TESTS}
    grader = bwrap_grader(tmp_path)
    wrong = make_task(
        tmp_path, "wrong", files, {"calc.py": FIXED}, ["test_calc.py::test_add", "test_calc.py::test_sub"], []
    )
    why = grader.validate(wrong)
    assert why == "1 FAIL_TO_PASS test(s) pass on the unchanged base commit: test_calc.py::test_sub", why
    assert not grader.is_validated(wrong)
    right = make_task(
        tmp_path, "right", files, {"calc.py": FIXED}, ["test_calc.py::test_add"], ["test_calc.py::test_sub"]
    )
    assert grader.validate(right) is None and grader.is_validated(right)
