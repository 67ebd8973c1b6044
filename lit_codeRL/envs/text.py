"""Text from the workspace made safe for a tokenizer, a terminal and a JSON reader.

Files, file names and program output in an agent's workspace are bytes, not text. Where they
must be text (an observation the policy reads, a transcript printed by ``lit-coderl episode``),
bytes that are not UTF-8 arrive as surrogate escapes (``Workspace.diff``, file names from a
listing) or, through JSON, as other lone surrogates: a tokenizer and a UTF-8 terminal both fail
on those. :func:`clean_text` is the one defined replacement: every such character becomes U+FFFD.
Diffs keep their exact bytes for grading (``grading/repo.py: patch_bytes``); only what is shown
is cleaned.
"""

from __future__ import annotations

import re

_SURROGATE = re.compile("[\ud800-\udfff]")


def clean_text(text: str) -> str:
    """``text`` with every lone surrogate (an undecodable byte, a broken escape) as U+FFFD."""
    return _SURROGATE.sub("\ufffd", text) if _SURROGATE.search(text) else text
