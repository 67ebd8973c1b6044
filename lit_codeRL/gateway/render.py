"""Chat messages -> the prompt ids the engine sees, without re-tokenising what the policy sampled.

A harness sends its whole history with every call. Rendering it again through the chat template
and tokenizing the text would give ids that differ from the sampled ones wherever the policy's
text tokenizes another way (NeMo-Gym's "re-tokenisation" mismatch), and the trained row would no
longer be what the policy produced. So when a call's messages are the previous call's messages,
then the assistant reply the gateway returned for it, then new non-assistant messages, the prompt
is the previous prompt's ids + the exact sampled ids + only the new messages rendered as the
template renders them after an assistant turn (rLLM's cumulative mode). Any other history (a
summary, a truncation, an edited reply) is rendered from scratch and starts a new row
(``records.py``).

A message's text is data: a special token's text in it (``<|im_end|>`` in a file the agent read)
is tokenized as text, not as the special token (``policy/special_tokens.py``), so it cannot end
the message and start a turn of another role. Such a message is rendered with a marker in its
place, and the template's text around it and the message are tokenized apart.
"""

from __future__ import annotations

import re
import secrets
from typing import Any

from lit_codeRL.policy.special_tokens import encode, holds_special, special_texts


class ChatRenderer:
    """Renders chat requests with a tokenizer's chat template.

    Args:
        tokenizer: A HF tokenizer with a chat template.
    """

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        template = tokenizer.chat_template or ""
        self.supports_tools = "tools" in template
        """The template renders a ``tools`` list (mentions it): else a request with tools is a 400."""
        eos = tokenizer.eos_token_id
        self._eos_ids = {eos} if eos is not None else set()
        self._eos_text = tokenizer.eos_token or ""
        self._sentinel = f"\x00LCRL-{secrets.token_hex(16)}\x00"
        """Marks where the probe's assistant turn ends: random per renderer, so an agent's message
        cannot carry a copy for :meth:`suffix_ids` to cut at."""
        self._specials = special_texts(tokenizer)

    def _encode(self, text: str, data: dict[str, str] | None = None) -> list[int]:
        """``text``'s ids, each marker of ``data`` (:meth:`_marked`) in it replaced by the ids of
        its message's text, tokenized as data."""
        if not data:
            return encode(self.tokenizer, text)
        ids: list[int] = []
        for piece in re.split("(" + "|".join(map(re.escape, data)) + ")", text):
            if piece in data:
                ids += encode(self.tokenizer, data[piece], literal=True)
            elif piece:
                ids += encode(self.tokenizer, piece)
        return ids

    def _marked(self, messages: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], dict[str, str]]:
        """``messages`` with each text that spells a special token replaced by a marker of its
        own, and the texts by marker (none: ``messages`` as they are)."""
        data: dict[str, str] = {}

        def mark(text: object) -> object:
            if not isinstance(text, str) or not holds_special(text, self._specials):
                return text
            marker = f"{self._sentinel[:-1]}-{len(data)}\x00"
            data[marker] = text
            return marker

        marked = []
        for message in messages:
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str):
                message = {**message, "content": mark(content)}
            elif isinstance(content, list):
                parts = [
                    {**p, "text": mark(p["text"])} if isinstance(p, dict) and "text" in p else p
                    for p in content
                ]
                message = {**message, "content": parts}
            marked.append(message)
        return (marked, data) if data else (messages, data)

    def render(self, messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None) -> list[int]:
        """The templated conversation with the assistant header after it, as ids."""
        kwargs = {"tools": tools} if tools else {}
        messages, data = self._marked(messages)
        text = self.tokenizer.apply_chat_template(
            messages, add_generation_prompt=True, tokenize=False, **kwargs
        )
        return self._encode(text, data)

    def suffix_ids(
        self,
        new_messages: list[dict[str, Any]],
        completion_ids: list[int],
        tools: list[dict[str, Any]] | None = None,
    ) -> list[int]:
        """What the template puts after an assistant turn's content: the end of that turn (unless
        the policy sampled it: ``completion_ids`` ends with EOS), ``new_messages`` and the next
        assistant header."""
        kwargs = {"tools": tools} if tools else {}
        new_messages, data = self._marked(new_messages)
        probe = [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": self._sentinel},
            *new_messages,
        ]
        text = self.tokenizer.apply_chat_template(probe, add_generation_prompt=True, tokenize=False, **kwargs)
        after = text[text.index(self._sentinel) + len(self._sentinel) :]
        if completion_ids and completion_ids[-1] in self._eos_ids and after.startswith(self._eos_text):
            after = after[len(self._eos_text) :]
        return self._encode(after, data)

    def continuation(
        self,
        previous: PreviousCall | None,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
    ) -> list[int] | None:
        """The prompt ids of ``messages`` built on ``previous`` (its prompt ids + sampled ids + the
        new messages), or ``None`` when ``messages`` do not extend it (render from scratch)."""
        if previous is None or previous.tools != tools:
            return None
        k = len(previous.messages)
        if len(messages) < k + 2 or messages[:k] != previous.messages:
            return None
        reply = messages[k]
        if reply.get("role") != "assistant" or (reply.get("content") or "") != previous.reply_text:
            return None
        if reply.get("tool_calls") or any(m.get("role") == "assistant" for m in messages[k + 1 :]):
            return None
        new = messages[k + 1 :]
        return (
            previous.prompt_ids
            + previous.completion_ids
            + self.suffix_ids(new, previous.completion_ids, tools)
        )


class PreviousCall:
    """What a chat call leaves for the next one of its episode to continue from."""

    def __init__(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None,
        prompt_ids: list[int],
        completion_ids: list[int],
        reply_text: str,
    ) -> None:
        self.messages, self.tools = messages, tools
        self.prompt_ids, self.completion_ids, self.reply_text = prompt_ids, completion_ids, reply_text
