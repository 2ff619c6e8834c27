"""A safe evaluator for countdown answers: integers, `+ - * /` and parentheses, nothing else.

Completions come from a policy under training, so they are never handed to `eval`. Arithmetic
is exact (`Fraction`), so `7/2*2` is 7 and an answer is never right or wrong by rounding.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

# Long enough for any sensible answer; the bound also bounds the parser's recursion depth.
MAX_LENGTH = 200

_TOKEN = re.compile(r"\s*(?:(\d+)|(.))")


class ExpressionError(ValueError):
    """The text is not a well-formed expression (or divides by zero)."""


@dataclass(frozen=True)
class Evaluated:
    """The exact value of an expression and the integer literals it uses, in order."""

    value: Fraction
    numbers: list[int]


def evaluate(text: str) -> Evaluated:
    """Parse and evaluate `text`; raise `ExpressionError` when it is not a valid expression."""
    if len(text) > MAX_LENGTH:
        raise ExpressionError(f"longer than {MAX_LENGTH} characters")
    tokens: list[int | str] = []
    for number, symbol in _TOKEN.findall(text.strip()):
        if number:
            tokens.append(int(number))
        elif symbol in "+-*/()":
            tokens.append(symbol)
        else:
            raise ExpressionError(f"unexpected character {symbol!r}")
    parser = _Parser(tokens)
    value = parser.sum()
    if parser.pos != len(tokens):
        raise ExpressionError(f"unexpected {tokens[parser.pos]!r} after a complete expression")
    return Evaluated(value, parser.numbers)


class _Parser:
    """Recursive descent: sum := product (('+'|'-') product)*; product := atom (('*'|'/') atom)*;
    atom := integer | '(' sum ')'. No unary minus: countdown numbers are positive."""

    def __init__(self, tokens: list[int | str]) -> None:
        self.tokens = tokens
        self.pos = 0
        self.numbers: list[int] = []

    def _peek(self) -> int | str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def sum(self) -> Fraction:
        value = self.product()
        while self._peek() in ("+", "-"):
            op = self.tokens[self.pos]
            self.pos += 1
            rhs = self.product()
            value = value + rhs if op == "+" else value - rhs
        return value

    def product(self) -> Fraction:
        value = self.atom()
        while self._peek() in ("*", "/"):
            op = self.tokens[self.pos]
            self.pos += 1
            rhs = self.atom()
            if op == "*":
                value *= rhs
            elif rhs == 0:
                raise ExpressionError("division by zero")
            else:
                value /= rhs
        return value

    def atom(self) -> Fraction:
        token = self._peek()
        self.pos += 1
        if isinstance(token, int):
            self.numbers.append(token)
            return Fraction(token)
        if token == "(":
            value = self.sum()
            if self._peek() != ")":
                raise ExpressionError("missing ')'")
            self.pos += 1
            return value
        raise ExpressionError("unexpected end" if token is None else f"unexpected {token!r}")
