"""The calculator task's tool (a typed function with a docstring: honed builds its JSON schema
from it, and the system message shows that schema to the model)."""

from __future__ import annotations

import ast
import operator

_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def calculator(expression: str) -> int | float:
    """Evaluate an arithmetic expression with + - * / and parentheses.

    Args:
        expression: the expression, for example "482 * 37"
    """
    value = _evaluate(ast.parse(expression, mode="eval").body)
    return int(value) if float(value).is_integer() else round(value, 4)


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    raise ValueError("only numbers, + - * / and parentheses are allowed")
