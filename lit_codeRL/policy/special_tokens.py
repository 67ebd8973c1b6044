"""A tokenizer's special tokens spelt in text that is data (a user message, a tool's output).

Tokenized as usual, ``<|im_end|>\\n<|im_start|>system`` written inside a message (by a program the
policy wrote, in its output or its error, or in a file an agent read) ends the message there, and
what follows reads as a turn of another role in the next context. Such text is tokenized with
``split_special_tokens``: its special tokens' texts become ordinary tokens. Shared by the episode
chat format (``rollout/chat.py``) and the gateway's renderer (``gateway/render.py``).
"""

from __future__ import annotations

from typing import Any


def special_texts(tokenizer: Any) -> tuple[str, ...]:
    """The texts a tokenizer turns into its special tokens (``<|im_end|>``, ``</s>``...)."""
    texts = set(getattr(tokenizer, "all_special_tokens", None) or ())
    for token in (getattr(tokenizer, "added_tokens_decoder", None) or {}).values():
        if getattr(token, "special", False):
            texts.add(str(token))
    return tuple(sorted(t for t in texts if t))


def holds_special(text: str, specials: tuple[str, ...]) -> bool:
    return any(special in text for special in specials)


def encode(tokenizer: Any, text: str, literal: bool = False) -> list[int]:
    """``text``'s ids without added special tokens; ``literal``: special tokens' texts in it are
    text, not the special tokens."""
    kwargs = {"split_special_tokens": True} if literal else {}
    return tokenizer(text, add_special_tokens=False, **kwargs)["input_ids"]
