"""Counting what agent episodes did: both agent envs measure an episode against its task's
reference fix as a record of yes/no properties (``envs/debug/behaviour.py``: the first edit;
``envs/swe/behaviour.py``: the final diff), and an evaluation reports how many episodes had each."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import asdict, fields
from typing import Any


def flag_counts(records: Iterable[Any], kind: type) -> dict[str, int]:
    """``{"episodes": n, <field>: how many of the n had it, ...}`` over ``records``, instances of
    the dataclass ``kind`` whose fields are yes/no properties (every field listed, zeros too)."""
    counts = {"episodes": 0, **{f.name: 0 for f in fields(kind)}}
    for record in records:
        counts["episodes"] += 1
        for name, value in asdict(record).items():
            counts[name] += bool(value)
    return counts
