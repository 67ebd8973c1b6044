"""Chat formatting of episodes: the first prompt, and the tokens of each later observation.

The policy's own tokens are never re-tokenized: a multi-turn context is the prompt's ids, then the
exact sampled ids of turn 1, then the ids of the observation after it, and so on. Only the
observations (user messages) are rendered here, as the chat template would render them after an
assistant turn, so the context equals the templated conversation up to how the policy's text
would tokenize.
"""

from __future__ import annotations

from lit_codeRL.envs.text import clean_text
from lit_codeRL.policy.special_tokens import encode, holds_special, special_texts
from lit_codeRL.problems.prompts import chat_messages_from_text

_SENTINEL_ASSISTANT = "\x00ASSISTANT\x00"
_SENTINEL_USER = "\x00USER\x00"


class ChatFormat:
    """Renders prompts and observation turns with a tokenizer's chat template.

    Args:
        tokenizer: A HF tokenizer with a chat template.
        system_prompt: System message of every episode; ``None`` uses the template's default.
    """

    def __init__(self, tokenizer, system_prompt: str | None = None) -> None:
        self.tokenizer, self.system_prompt = tokenizer, system_prompt
        self._head, self._tail = self._observation_template()
        eos = tokenizer.eos_token_id
        self._eos_ids = {eos} if eos is not None else set()
        self._eos_text = tokenizer.eos_token or ""
        self._specials = special_texts(tokenizer)

    def prompt_text(self, observation: str) -> str:
        """The templated first prompt (system + user message + assistant header)."""
        messages = chat_messages_from_text(observation, self.system_prompt)
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)

    def prompt_ids(self, observation: str) -> list[int]:
        if self._holds_special(observation):
            before, found, after = self.prompt_text(_SENTINEL_USER).partition(_SENTINEL_USER)
            if found:
                return self._ids(before) + self._ids(observation, literal=True) + self._ids(after)
        return self._ids(self.prompt_text(observation))

    def _holds_special(self, text: str) -> bool:
        return holds_special(text, self._specials)

    def _ids(self, text: str, literal: bool = False) -> list[int]:
        """``text``'s ids; ``literal``: a user message is data, its special tokens' texts are text
        (``policy/special_tokens.py``)."""
        return encode(self.tokenizer, text, literal)

    def _observation_template(self) -> tuple[str, str]:
        """The text the template puts between an assistant message's content and a user message's
        content (``head``), and after the user content up to the next assistant header (``tail``)."""
        messages = [
            {"role": "user", "content": "x"},
            {"role": "assistant", "content": _SENTINEL_ASSISTANT},
            {"role": "user", "content": _SENTINEL_USER},
        ]
        text = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        after = text[text.rindex(_SENTINEL_ASSISTANT) + len(_SENTINEL_ASSISTANT) :]
        head, _, tail = after.partition(_SENTINEL_USER)
        return head, tail

    def observation_text(self, observation: str, action_ids: list[int]) -> str:
        """What follows an action in the context: the end of the assistant turn (unless the policy
        already emitted it), the user message ``observation``, and the next assistant header."""
        head = self._head
        if action_ids and action_ids[-1] in self._eos_ids and head.startswith(self._eos_text):
            head = head[len(self._eos_text) :]
        return head + observation + self._tail

    def observation_ids(self, observation: str, action_ids: list[int]) -> list[int]:
        # an env's text may carry lone surrogates (undecodable bytes) or a program's raw control
        # characters: never into the tokenizer (every env's observation, whatever the env did)
        observation = clean_text(observation)
        if self._holds_special(observation):  # its special tokens' texts as text (see _ids)
            head, _, tail = self.observation_text(_SENTINEL_USER, action_ids).partition(_SENTINEL_USER)
            return self._ids(head) + self._ids(observation, literal=True) + self._ids(tail)
        return self._ids(self.observation_text(observation, action_ids))


def render_prompt(tokenizer, problem, system_prompt: str | None = None, num_shown_tests: int = 1) -> str:
    """The templated first prompt of a code problem: exactly what rollouts and evaluation show
    (the code envs' observation is :func:`~lit_codeRL.problems.prompts.format_prompt`)."""
    from lit_codeRL.problems.prompts import format_prompt

    return ChatFormat(tokenizer, system_prompt).prompt_text(format_prompt(problem, num_shown_tests))
