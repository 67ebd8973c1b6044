"""Split arithmetic expressions into tokens."""


class Tokenizer:
    """Turns text such as ``"12 + x*3"`` into ``["12", "+", "x", "*", "3"]``."""

    OPERATORS = set("+-*/()")

    def __init__(self):
        self.tokens = []
        self.current = ""

    def tokenize(self, text):
        """The tokens of ``text``."""
        self.tokens = []
        self.current = ""
        for char in text:
            if char.isalnum() or char in "._":
                self.current += char
                continue
            self._flush()
            if char in self.OPERATORS:
                self.tokens.append(char)
            elif not char.isspace():
                raise ValueError(f"unexpected character {char!r}")
        self._flush()
        return self.tokens

    def _flush(self):
        if self.current:
            self.tokens.append(self.current)
            self.current = ""
