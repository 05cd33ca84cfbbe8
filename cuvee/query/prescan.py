"""One pass over a query's text before sqlglot parses it: how deep its parentheses nest, and its long IN-lists of
literals set aside.

Depth: a parser's recursion follows the parentheses, so SQL nested deeper than the broker allows is refused before
it is parsed. IN-lists: sqlglot builds a node per literal, and a 140,000-value ``IN (...)`` took it about 10 s to
parse and as long to print again, while DuckDB, which runs the printed SQL on the servers, reads such a list in
milliseconds. So a list of at least ``MIN_SET_ASIDE`` plain literals (numbers, single-quoted strings) is replaced by
a placeholder identifier, and after parsing the placeholder by a node that prints the list's original text
(matched to be nothing but literals and commas). Shorter lists take the ordinary path. Strings, quoted identifiers
and comments are consumed whole, so nothing inside them counts.

Size: the same pass counts the query's tokens, its ANDs and ORs and its longest IN-list, which
``cuvee.query.limits`` bounds before anything recursive (sqlglot, DuckDB, Arrow's filter binding) sees the text.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass, field

from sqlglot import exp

MIN_SET_ASIDE = 64
_NUMBER = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?"
_STRING = r"'[^']*(?:''[^']*)*'"  # unrolled: a doubled quote stays inside
_LITERAL = f"(?:{_NUMBER}|{_STRING})"
_TOKENS = re.compile(
    rf"(?P<in>\bIN\s*\(\s*(?P<values>{_LITERAL}(?:\s*,\s*{_LITERAL})*)\s*\))"
    r"|'[^']*(?:''[^']*)*'?|\"[^\"]*(?:\"\"[^\"]*)*\"?|`[^`]*`?|--[^\n]*|/\*.*?(?:\*/|\Z)"
    r"|(?P<open>\()|(?P<close>\))|(?P<connective>\b(?:AND|OR)\b)|\w+|[^\w\s]",
    re.IGNORECASE | re.DOTALL | re.ASCII)  # ASCII: \d and \s match what SQL calls digits and spaces, nothing more


LIST_META = "cuvee_literal_list"  # in a set-aside list's meta: "numbers" or "strings"


def literal_list(text: str) -> exp.Var:
    """A set-aside IN-list: a ``Var`` prints its text as it is; its meta says whether every value is a number, so
    rewrites that look at a comparison's operands (TIMESTAMP columns as epoch millis) still can."""
    node = exp.Var(this=text)
    node.meta[LIST_META] = "strings" if "'" in text else "numbers"
    return node


def is_number_list(node: exp.Expression) -> bool:
    return isinstance(node, exp.Var) and node.meta.get(LIST_META) == "numbers"


@dataclass
class Prescan:
    text: str  # the query with long IN-lists replaced by placeholders
    depth: int  # how deep parentheses nest (outside strings and comments)
    tokens: int = 0  # words, literals, operators and parentheses (a set-aside IN-list counts as one)
    connectives: int = 0  # ANDs and ORs: a chain of n terms is n - 1 nested pairs once parsed
    longest_in: int = 0  # the values of the longest IN-list of literals
    lists: dict[str, str] = field(default_factory=dict)  # placeholder -> the list's original text


def prescan(text: str) -> Prescan:
    lists: dict[str, str] = {}
    out: list[str] = []
    nonce = ""
    depth = deepest = last = tokens = connectives = longest_in = 0
    for match in _TOKENS.finditer(text):
        tokens += 1
        kind = match.lastgroup  # the outer group: "in" for a list, not its "values"
        if kind is None:
            continue
        if kind == "connective":
            connectives += 1
        elif kind == "open":
            depth += 1
            if depth > deepest:
                deepest = depth
        elif kind == "close":
            depth -= 1
        else:
            deepest = max(deepest, depth + 1)
            values = match.group("values")
            count = len(re.findall(_LITERAL, values)) if "'" in values else values.count(",") + 1
            longest_in = max(longest_in, count)
            if count >= MIN_SET_ASIDE:
                nonce = nonce or secrets.token_hex(4)
                name = f"__cuvee_in_{nonce}_{len(lists)}"
                lists[name] = values
                out.append(text[last:match.start("values")])
                out.append(name)
                last = match.end("values")
    if lists:
        out.append(text[last:])
        text = "".join(out)
    return Prescan(text, deepest, tokens, connectives, longest_in, lists)


def put_back(tree: exp.Expression, lists: Mapping[str, str]) -> int:
    """Give every placeholder ``IN`` list of ``tree`` its original text again; returns how many were put back.
    Fewer than ``len(lists)`` means a placeholder landed somewhere this scanner misread (a string form it does
    not know, such as E'...' or $$...$$): the caller then parses the original text instead."""
    if not lists:
        return 0
    swapped = 0

    def swap(node: exp.Expression) -> exp.Expression:
        nonlocal swapped
        if isinstance(node, exp.In) and len(node.expressions) == 1:
            only = node.expressions[0]
            if isinstance(only, exp.Column) and not only.table and only.name in lists:
                node.set("expressions", [literal_list(lists[only.name])])
                swapped += 1
        return node

    tree.transform(swap, copy=False)
    return swapped


__all__ = ["MIN_SET_ASIDE", "Prescan", "is_number_list", "literal_list", "prescan", "put_back"]
