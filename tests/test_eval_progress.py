"""Evaluations say how far they are while they run: items done, running rate and ETA, as a log
line per batch or as a task on a live Rich progress bar (the MBPP callback inside `fit` is covered
by tests/test_console.py, `lit-coderl validate` by tests/modules/test_evaluate.py)."""

from __future__ import annotations

import io
import logging
from types import SimpleNamespace

from lit_codeRL.callbacks.progress import EvalProgress, format_duration


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_a_line_per_batch_with_running_rate_and_eta(caplog):
    clock = FakeClock()
    progress = EvalProgress("mbpp_eval step 12", 8, clock=clock)
    with caplog.at_level(logging.INFO, logger="lit_codeRL"):
        clock.now += 10
        progress.advance(2, 1.0)  # 2 problems, one passed
        clock.now += 20
        progress.advance(2, 0.0, scored=1)  # one problem the sandbox could not grade
    assert [r.getMessage() for r in caplog.records] == [
        "mbpp_eval step 12: 2/8 problems, pass@1 0.500 so far, 10s elapsed, ETA 30s",
        "mbpp_eval step 12: 4/8 problems, pass@1 0.333 so far, 30s elapsed, ETA 30s",
    ]
    assert format_duration(3725) == "1h02m" and format_duration(185) == "3m05s"
    assert format_duration(float("nan")) == "?"


def test_only_global_rank_zero_speaks_for_its_shard(caplog):
    ranks = [SimpleNamespace(is_global_zero=rank == 0, world_size=2) for rank in (1, 0)]
    with caplog.at_level(logging.INFO, logger="lit_codeRL"):
        for trainer in ranks:
            EvalProgress("game_eval step 0", 4, "games", "win rate", trainer).advance(4, 2.0)
    assert [r.getMessage().split(",")[:2] for r in caplog.records] == [
        ["game_eval step 0 (rank 0 of 2): 4/4 games", " win rate 0.500 so far"]
    ]


def _live_bar():
    from lightning.pytorch.callbacks import RichProgressBar
    from rich.console import Console
    from rich.progress import Progress

    bar = RichProgressBar()
    # Lightning's own Progress redraws only when its bar asks, not on a timer: nor does this one
    bar.progress = Progress(console=Console(file=io.StringIO(), force_terminal=True), auto_refresh=False)
    bar.progress.start()
    return bar


def test_a_task_on_a_live_rich_bar_instead_of_lines(caplog):
    bar = _live_bar()
    trainer = SimpleNamespace(is_global_zero=True, progress_bar_callback=bar)
    try:
        with caplog.at_level(logging.INFO, logger="lit_codeRL"):
            progress = EvalProgress("mbpp_eval step 4", 10, trainer=trainer)
            progress.advance(5, 4.0)
            (task,) = bar.progress.tasks
            assert (task.completed, task.total) == (5, 10)
            assert task.description == "mbpp_eval step 4 pass@1 0.800"
            assert "mbpp_eval step 4 pass@1 0.800" in bar.progress.console.file.getvalue()  # drawn
            progress.close()
            assert bar.progress.tasks == []
            # `validate`: the loop's own validation task (batches, time left) gets the rate
            bar.val_progress_bar_id = bar.progress.add_task("Validation", total=5)
            validation = EvalProgress("evaluation", 10, trainer=trainer, in_validation_bar=True)
            validation.advance(2, 1.0)
            validation.advance(2, 0.0)
            (task,) = bar.progress.tasks
            assert task.description == "Validation pass@1 0.250, 4/10 problems"
        assert caplog.records == []
    finally:
        bar.progress.stop()
    # the bar stopped (or never a terminal): lines again
    with caplog.at_level(logging.INFO, logger="lit_codeRL"):
        EvalProgress("evaluation", 10, trainer=trainer, in_validation_bar=True).advance(5, 4.0)
    assert [r.getMessage().split(",")[0] for r in caplog.records] == ["evaluation: 5/10 problems"]


def test_game_evaluation_reports_games_done_and_win_rate(tmp_path, caplog):
    from lit_codeRL.callbacks import GameEvalCallback
    from tests.modules.test_spiral import _module, _trainer

    callback = GameEvalCallback(
        games=["tictactoe"],
        opponents=["random"],
        games_per_seat=2,
        batch_size=2,
        max_new_tokens=6,
        eval_at_end=False,
        output_dir=str(tmp_path / "game_eval"),
    )
    with caplog.at_level(logging.INFO, logger="lit_codeRL"):
        _trainer(1, tmp_path, callbacks=[callback]).fit(_module())
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("game_eval step 0: ")]
    assert [line.split(",")[0] for line in lines[:2]] == [
        "game_eval step 0: 2/4 games",
        "game_eval step 0: 4/4 games",
    ]
    # the random model never makes a legal move: every game is lost
    assert "win rate 0.000 so far" in lines[1] and "ETA 0s" in lines[1]
