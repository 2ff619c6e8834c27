"""The example's tools: a lookup over the generated price table and a calculator (also, as
`calculator`, the tool of examples/tools_smollm2.yaml).

Plain typed functions with docstrings: honed builds each tool's JSON schema from them
(transformers' `get_json_schema`) and the chat template shows them to the model.
"""

from __future__ import annotations

import ast
import json
import operator
from pathlib import Path

PRICES: dict[str, int] = json.loads((Path(__file__).with_name("world.json")).read_text())["prices"]

_OPERATORS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
}


def lookup(name: str) -> int:
    """The price of a product in the table.

    Args:
        name: the product's name, for example "kx"
    """
    if name not in PRICES:
        raise KeyError(f"no product named {name!r}")
    return PRICES[name]


def calc(expression: str) -> int | float:
    """Evaluate an arithmetic expression with + - * / and parentheses.

    Args:
        expression: for example "3*47" or "47+85"
    """
    value = _evaluate(ast.parse(expression, mode="eval").body)
    return int(value) if float(value).is_integer() else round(value, 4)


def calculator(expression: str) -> int | float:
    """Evaluate an arithmetic expression with + - * / and parentheses.

    Args:
        expression: the expression, for example "482 * 37"
    """
    return calc(expression)


def _evaluate(node: ast.AST) -> float:
    if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
        return node.value
    if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
        return _OPERATORS[type(node.op)](_evaluate(node.left), _evaluate(node.right))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand)
    raise ValueError("only numbers, + - * / and parentheses are allowed")
