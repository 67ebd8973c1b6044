"""Evaluate token lists with the shunting-yard algorithm (Dijkstra, 1961)."""

from calckit.tokens import CalcError, tokenize

PRECEDENCE = {"+": 1, "-": 1, "*": 2, "/": 2, "^": 3}
RIGHT_ASSOCIATIVE = {"^"}


def to_postfix(tokens):
    """Tokens in reverse Polish order."""
    output = []
    stack = []
    for token in tokens:
        if token.kind == "number":
            output.append(token)
        elif token.kind == "op":
            while stack and stack[-1].kind == "op" and PRECEDENCE[stack[-1].value] > PRECEDENCE[token.value]:
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
        if len(values) < 2:
            raise CalcError(f"operator {token.value!r} is missing an operand")
        right = values.pop()
        left = values.pop()
        values.append(_apply(token.value, left, right))
    if len(values) != 1:
        raise CalcError("malformed expression")
    return float(values[0])
