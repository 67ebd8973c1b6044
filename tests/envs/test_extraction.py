"""extract_code on the shapes model answers come in."""

from __future__ import annotations

import random
import string

import pytest

from lit_codeRL.envs import extract_code

ADD = "def add(a, b):\n    return a + b\n"


@pytest.mark.parametrize(
    "text",
    [
        f"```python\n{ADD}```",
        f"Here is my solution:\n\n```python\n{ADD}```\n\nIt adds the two numbers.",
        f"```py\n{ADD}```",
        f"```\n{ADD}```",
        f"```Python\n{ADD}```",
        f"~~~python\n{ADD}~~~",
        f"  ```python\n  {ADD.replace(chr(10) + '    ', chr(10) + '      ')}  ```",  # indented in a list
        f"<|im_start|>assistant\n```python\n{ADD}```<|im_end|>",
        f"<think>maybe ```python\nbroken(\n``` no</think>```python\n{ADD}```",
    ],
    ids=[
        "fenced",
        "prose-around",
        "py",
        "untagged",
        "capitalised",
        "tilde",
        "indented",
        "chat-tokens",
        "think",
    ],
)
def test_fenced(text):
    assert extract_code(text) == ADD


def test_multiple_blocks_entry_point_wins():
    text = f"```python\nprint(add(1, 2))\n```\nDefinition:\n```python\n{ADD}```\nUsage:\n```python\nadd(3, 4)\n```"
    assert extract_code(text, entry_point="add") == ADD


def test_multiple_blocks_without_entry_point_take_the_longest_compiling():
    text = f"```python\n{ADD}```\nExample:\n```python\nprint(add(1, 2))\n```\n```python\ndef broken(:\n    pass\n```"
    assert extract_code(text) == ADD


def test_output_blocks_are_not_code():
    text = "```python\nprint(1)\n```\nOutput:\n```output\n1 and a much longer line of output text here\n```"
    assert extract_code(text) == "print(1)\n"


def test_import_only_block_is_kept():
    text = "```python\nimport math\n```\n```python\ndef root(x):\n    return math.sqrt(x)\n```"
    assert extract_code(text, "root") == "import math\ndef root(x):\n    return math.sqrt(x)\n"


def test_unterminated_fence_keeps_complete_functions():
    text = f"```python\n{ADD}\ndef sub(a, b):\n    return a -"
    assert extract_code(text) == ADD


def test_unterminated_fence_inside_a_function_keeps_the_compiling_prefix():
    text = "```python\ndef f(x):\n    y = x * 2\n    return (y +"
    assert extract_code(text) == "def f(x):\n    y = x * 2\n"


def test_closed_fence_keeps_its_syntax_error():
    # The policy finished this block; its syntax error is real and must reach the sandbox.
    text = "```python\ndef f(x):\n    return (x +\n```"
    assert extract_code(text) == "def f(x):\n    return (x +\n"


def test_half_a_code_block_is_empty():
    assert extract_code("Sure, here it is:\n```python\n") == ""
    assert extract_code("```python\n```") == ""


def test_bare_code():
    assert extract_code(ADD) == ADD
    assert extract_code("import math\nprint(math.pi)") == "import math\nprint(math.pi)\n"


def test_bare_code_with_prose_before_and_after():
    text = f"Sure! Here is the code:\n\n{ADD}\nThis function returns the sum of a and b."
    assert extract_code(text) == ADD
    text = "Solution\nx = 5\nprint(x * 2)\nThat prints 10."
    assert extract_code(text) == "x = 5\nprint(x * 2)\n"


def test_bare_truncated_code():
    text = f"import math\n\n{ADD}\nprint(add(1,"
    assert extract_code(text) == f"import math\n\n{ADD}"


def test_no_code():
    assert extract_code("") == ""
    assert extract_code("   \n  ") == ""
    assert extract_code("I do not know how to solve this problem, sorry.") == ""
    assert extract_code(None) == ""  # type: ignore[arg-type]  # never raises


def test_garbage_never_raises_and_keeps_only_what_parses():
    """Long adversarial answers (the shapes that make regexes backtrack): no code where nothing
    parses, the valid lines where some do, a cut-off function repaired to its complete part.
    (Speed is the benchmarks' business; a catastrophic backtrack would show here as a hang.)"""
    rng = random.Random(0)
    no_code = [
        "".join(rng.choice(string.printable) for _ in range(10_000)),
        "((((" * 2500,
        "```\n" * 2500,
        "\x00" * 10_000,
        "é" * 10_000,
    ]
    for text in no_code:
        assert extract_code(text) == "", text[:30]
    # an unclosed docstring before valid lines: the lines are the program
    assert extract_code('"""\n' + "x = 1\n" * 1600) == "x = 1\n" * 1600
    # a function cut off mid-expression: the unfinished last line is dropped
    body = "def f():\n" + "    y = 1\n" * 1200
    out = extract_code(body + "    return (")
    assert out == body
    compile(out, "<extracted>", "exec")
