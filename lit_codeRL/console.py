"""What a run prints besides its own results: the ``[lit-coderl]`` log lines, and no wall of
third-party notices around them.

A new user's first run used to show, around a working run, Lightning's advertising tip, two
notices that the ``dataloader_iter`` training step is experimental (our rollout modules draw their
batches themselves, on purpose) and a deprecation inside Lightning's own pytree helper. None of
them is something the user can act on. :func:`setup_console` silences exactly those, each matched
by its message *and* the module that emits it, so the same words from anywhere else, and every
other warning (a user's ``warnings.warn``, a real deprecation in our code), still show. Warnings
whose cause is ours are fixed at the cause, not filtered here.

``lit-coderl`` and any script that runs ``CodeRLCLI`` in-process call it.
"""

from __future__ import annotations

import logging
import os
import re
import sys
import warnings
from typing import TextIO

from lightning.fabric.utilities.warnings import PossibleUserWarning

log = logging.getLogger("lit_codeRL")

QUIET_WARNINGS: tuple[tuple[str, type[Warning], str], ...] = (
    # (message regex, category, emitting module regex): each one notice, from one place
    (
        r"You are using the `dataloader_iter` step flavor",
        PossibleUserWarning,
        r"lightning\.pytorch\.trainer\.configuration_validator\Z",
    ),
    (
        r"Found `dataloader_iter` argument in the `\w+`\. Note that the support for this signature is "
        r"experimental",
        UserWarning,
        r"lightning\.pytorch\.loops\.utilities\Z",
    ),
    (
        # torch 2.13 (the pinned one) deprecates LeafSpec; Lightning 2.6's copy of tree_flatten builds one
        r"`isinstance\(treespec, LeafSpec\)` is deprecated",
        FutureWarning,
        r"lightning\.pytorch\.utilities\._pytree\Z",
    ),
)
"""Third-party warnings :func:`setup_console` ignores."""

QUIET_LOG_RECORDS: tuple[tuple[str, str], ...] = (
    # (message regex, logger-name regex): Lightning's rank_zero_info advertising, at every Trainer
    (r"💡 Tip: For seamless cloud", r"lightning(_utilities)?\."),
)
"""Third-party log records :func:`setup_console` drops."""


class _QuietRecords(logging.Filter):
    """Drops the log records listed in :data:`QUIET_LOG_RECORDS`."""

    def __init__(self) -> None:
        super().__init__()
        self.patterns = [(re.compile(m), re.compile(n)) for m, n in QUIET_LOG_RECORDS]

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        return not any(m.match(message) and n.match(record.name) for m, n in self.patterns)


_QUIET_RECORDS = _QuietRecords()
_RANK_ZERO_LOGGERS = ("lightning.fabric.utilities.rank_zero", "lightning.pytorch.utilities.rank_zero")


class CurrentStderrHandler(logging.StreamHandler):
    """A ``StreamHandler`` on whatever ``sys.stderr`` is when a record comes, not the one at its
    creation: while Lightning's Rich progress bar is live it swaps in a proxy that prints lines
    above the bar, instead of into it."""

    def __init__(self) -> None:
        super().__init__(sys.stderr)

    @property
    def stream(self) -> TextIO:
        return sys.stderr

    @stream.setter
    def stream(self, value: TextIO) -> None:  # StreamHandler sets it once; sys.stderr rules
        pass


def setup_console() -> None:
    """Install the filters (idempotent) and, where the process has configured no logging, the
    ``[lit-coderl]`` handler on the ``lit_codeRL`` logger (level ``$LIT_CODERL_LOG_LEVEL``, INFO)."""
    for message, category, module in QUIET_WARNINGS:
        # re-adding an identical filter replaces it: calling this twice changes nothing
        warnings.filterwarnings("ignore", message=message, category=category, module=module)
    from lightning_utilities.core import rank_zero

    # rank_zero_info writes to rank_zero.log, which lightning.fabric and lightning.pytorch each
    # point at their own logger on import (the last import wins); a logger's filter sees only its
    # own records, so all of them get one
    for logger in {rank_zero.log, *map(logging.getLogger, _RANK_ZERO_LOGGERS)}:
        logger.addFilter(_QUIET_RECORDS)
    if not log.handlers and not logging.getLogger().handlers:
        handler = CurrentStderrHandler()
        handler.setFormatter(logging.Formatter("[lit-coderl] %(message)s"))
        log.addHandler(handler)
        log.setLevel(os.environ.get("LIT_CODERL_LOG_LEVEL", "INFO"))
        log.propagate = False
