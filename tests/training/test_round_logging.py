"""The round logging shared by the game modules: each module adds only its own metrics."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest
import torch

from lit_codeRL.modules import code_game, spiral
from lit_codeRL.modules.code_game import CodeGameModule
from lit_codeRL.modules.spiral import SpiralModule
from lit_codeRL.rollout.code_game import PREDICTOR, WRITER
from lit_codeRL.training import round_logging

SHARED = {"train/lr", "train/tokens_per_s", "time/generate_s", "time/update_s", "train/loss"}
"""What every round logs, whichever game: round_logging's keys plus the given stats and times."""


class Writer:
    def __init__(self) -> None:
        self.calls: list[tuple[list[dict[str, Any]], dict[str, Any]]] = []

    def write(self, records: list[dict[str, Any]], **common: Any) -> None:
        self.calls.append((records, common))


class Logged:
    """Stands in for a LightningModule: records what it was asked to log."""

    def __init__(self, dataset: object = None) -> None:
        self.metrics: dict[str, float] = {}
        self.bar: dict[str, float] = {}
        self.writer = Writer()
        self.global_step, self.global_rank = 3, 1
        self.last_records: list[dict[str, Any]] = []
        self.dataset = dataset

    def optimizers(self) -> SimpleNamespace:
        return SimpleNamespace(param_groups=[{"lr": 1e-6}])

    def log_dict(self, metrics: dict[str, float], **kwargs: Any) -> None:
        assert kwargs["on_step"] is True
        self.metrics.update(metrics)

    def log(self, name: str, value: float, **kwargs: Any) -> None:
        assert kwargs["prog_bar"] is True and kwargs["logger"] is False
        self.bar[name] = value


def _batch(stats: dict[str, float], records: list[dict[str, Any]]) -> SimpleNamespace:
    return SimpleNamespace(
        stats={"generate_s": 2.0, "completion_tokens": 10.0, **stats},
        records=records,
        batch_size=len(records),
        role_ids=torch.tensor([WRITER, PREDICTOR]),
        advantages=torch.tensor([[1.0, 1.0], [-2.0, 0.0]]),
        trainable_mask=torch.tensor([[1, 1], [1, 0]]),
    )


STATS, TIMES = {"loss": [1.0, 3.0]}, {"time/update_s": 0.5}


@pytest.fixture
def shared_calls(monkeypatch) -> list[str]:
    """The modules whose round went through ``round_logging.log_round`` (which still logs)."""
    calls: list[str] = []
    for where in (code_game, spiral):

        def spy(module, *args, _where=where.__name__, **kwargs) -> None:  # noqa: ANN001
            calls.append(_where.rsplit(".", 1)[-1])
            round_logging.log_round(module, *args, **kwargs)

        monkeypatch.setattr(where, "log_round", spy)
    return calls


def _check_shared(module: Logged) -> None:
    assert SHARED <= set(module.metrics)
    assert module.metrics["train/loss"] == pytest.approx(2.0)
    assert module.metrics["train/tokens_per_s"] == pytest.approx(5.0)
    assert module.metrics["train/lr"] == 1e-6


def test_the_code_game_logs_its_metrics_through_the_shared_round_logging(shared_calls) -> None:
    records = [{"role": "writer"}, {"role": "predictor"}]
    batch = _batch({"game/validity_rate": 0.25, "gate_s": 1.5}, records)
    module = Logged()
    CodeGameModule.log_round(module, batch, STATS, TIMES)
    assert shared_calls == ["code_game"]
    _check_shared(module)
    assert module.metrics["train/game/validity_rate"] == 0.25
    assert module.metrics["train/writer_rows"] == module.metrics["train/predictor_rows"] == 1.0
    assert module.metrics["time/gate_s"] == 1.5
    assert module.bar == {"valid": 0.25}
    assert module.last_records is records
    assert module.writer.calls == [(records, {"step": 3, "rank": 1})]


def test_spiral_logs_its_metrics_through_the_shared_round_logging(shared_calls) -> None:
    records = [{"completion_tokens": 4, "advantage": 1.0}, {"completion_tokens": 6, "advantage": -3.0}]
    batch = _batch({"game/invalid_move_rate": 0.5, "baseline/tictactoe/0": 0.1}, records)
    games = [SimpleNamespace(record=lambda: {"game": "tictactoe"})]
    module = Logged(dataset=SimpleNamespace(last_games=games))
    SpiralModule.log_games(module, batch, STATS, TIMES)
    assert shared_calls == ["spiral"]
    _check_shared(module)
    assert module.metrics["train/baseline/tictactoe/0"] == 0.1
    assert module.metrics["train/advantage_mean"] == pytest.approx(-1.0)
    assert module.metrics["train/completion_length"] == pytest.approx(5.0)
    assert module.bar == {"invalid": 0.5}
    assert module.last_records is records
    # the games, not the rows, go to games.jsonl
    assert module.writer.calls == [([{"game": "tictactoe"}], {"step": 3, "rank": 1})]
