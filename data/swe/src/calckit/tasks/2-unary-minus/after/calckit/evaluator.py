"""Evaluate token lists with the shunting-yard algorithm (Dijkstra, 1961)."""

from calckit.tokens import CalcError, tokenize

# Negation ("neg", a unary minus) binds tighter than * and / and looser than ^, as in Python:
# -2 ^ 2 is -(2 ^ 2), 2 * -3 is 2 * (-3).
PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "neg": 3, "^": 4}
RIGHT_ASSOCIATIVE = {"^"}


def _applies_first(top, incoming):
    """Whether operator ``top`` (on the stack) is applied before the ``incoming`` one: it binds
    tighter, or as tight and ``incoming`` groups from the left."""
    if PRECEDENCE[top] != PRECEDENCE[incoming]:
        return PRECEDENCE[top] > PRECEDENCE[incoming]
    return incoming not in RIGHT_ASSOCIATIVE


def to_postfix(tokens):
    """Tokens in reverse Polish order."""
    output = []
    stack = []
    for token in tokens:
        if token.kind == "number":
            output.append(token)
        elif token.kind == "op" and token.value == "neg":
            # a prefix operator: its operand comes after it, so nothing on the stack is applied yet
            stack.append(token)
        elif token.kind == "op":
            while stack and stack[-1].kind == "op" and _applies_first(stack[-1].value, token.value):
                output.append(stack.pop())
            stack.append(token)
        elif token.kind == "(":
            stack.append(token)
        else:
            while stack and stack[-1].kind != "(":
                output.append(stack.pop())
            if not stack:
                raise CalcError("unbalanced ')'")
            stack.pop()
    while stack:
        token = stack.pop()
        if token.kind == "(":
            raise CalcError("unbalanced '('")
        output.append(token)
    return output


def _apply(op, left, right):
    if op == "+":
        return left + right
    if op == "-":
        return left - right
    if op == "*":
        return left * right
    if op == "/":
        if right == 0:
            raise CalcError("division by zero")
        return left / right
    return left**right


def evaluate(text):
    """Value of the expression ``text`` as a float."""
    values = []
    for token in to_postfix(tokenize(text)):
        if token.kind == "number":
            values.append(token.value)
            continue
        if token.value == "neg":
            if not values:
                raise CalcError("'-' is missing an operand")
            values.append(-values.pop())
            continue
        if len(values) < 2:
            raise CalcError(f"operator {token.value!r} is missing an operand")
        right = values.pop()
        left = values.pop()
        values.append(_apply(token.value, left, right))
    if len(values) != 1:
        raise CalcError("malformed expression")
    return float(values[0])
