"""Errors a user can fix: the CLI prints them as one line instead of a traceback."""

from collections.abc import Sequence


class ConfigError(ValueError):
    """A configuration value, file or model source that cannot be used; the message names the fix."""


class DivergedError(ConfigError):
    """Training stopped: its gradients stayed non-finite (NaN/inf) for several optimizer steps in a
    row; the message names what to change (learning rate, precision, data)."""


def listed(items: Sequence[str], shown: int = 3, sep: str = ", ") -> str:
    """The first ``shown`` of ``items`` joined by ``sep``, with ``sep...`` after them when there are
    more: the list of names in a one-line message."""
    return sep.join(items[:shown]) + (f"{sep}..." if len(items) > shown else "")
