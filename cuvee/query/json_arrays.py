"""Pinot's JSON functions that answer lists: ``jsonPathArray``, ``jsonPathArrayDefaultEmpty`` and
``jsonExtractScalar``'s ``…_ARRAY`` types, as DuckDB expressions. Pure tree building.

Pinot reads paths with Jayway JsonPath. A *definite* path (keys and indexes only) names one value: its array's
elements, or the value alone as a one-element list, NULL when it is missing or JSON null (Pinot's
``convertObjectToArray``). An *indefinite* one (with ``[*]``) collects every match: an empty list when there is
none. ``jsonPathArray`` answers the values as STRING_ARRAY: a string's text, a number's or boolean's JSON text, an
object's or array's JSON (Pinot hands back Java objects; Cuvee's result columns are typed). Malformed JSON gives
NULL (Pinot fails the query), and ``jsonPathArrayDefaultEmpty`` an empty list wherever Pinot would fail or answer
NULL. ``jsonExtractScalar(json, path, 'INT_ARRAY'[, default])`` answers an empty list for a missing path or
malformed JSON, as Pinot's MV readers do; its default must read as the element type (Pinot parses it when the
query starts) and is not used otherwise.

Paths take the Jayway forms DuckDB's JSON functions also read: ``$``, ``.key``, ``['key']``, ``[n]``, ``[*]``; deep
scans (``..``), filters, slices and unions are refused with a 150 naming them.
"""

from __future__ import annotations

import re
from decimal import Decimal, InvalidOperation

from sqlglot import exp

from cuvee.query.commons_split import let
from cuvee.query.errors import QueryError, QueryErrorCode

_STEP = re.compile(r"\.([A-Za-z0-9_$@-]+)|\[(\*|\d+)\]|\['([^']*)'\]|\[\"([^\"]*)\"\]")
_VALUE = "cuvee_fn_value"  # a lambda parameter no column is named


def _error(message: str) -> QueryError:
    return QueryError(QueryErrorCode.SQL_PARSING, message)


def _call(name: str, *args: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this=name, expressions=list(args))


def jayway_path(node: exp.Expression, function: str) -> tuple[str, bool]:
    """A path argument as DuckDB's JSON path text, and whether it is definite (no ``[*]``)."""
    if not (isinstance(node, exp.Literal) and node.is_string):
        raise _error(f"{function}: the JSON path must be a string literal, got {node.sql(dialect='duckdb')}")
    text = node.name.strip()
    if not text.startswith("$"):
        raise _error(f"{function}: the JSON path must start with '$', got {text!r}")
    steps, definite, at = ["$"], True, 1
    while at < len(text):
        match = _STEP.match(text, at)
        if match is None:
            raise _error(f"{function}: the JSON path {text!r} has a form not supported here at {text[at:]!r} "
                         "(keys, [n] and [*] only: no deep scan, filter, slice or union)")
        key, index, quoted, double_quoted = match.groups()
        name = key if key is not None else quoted if quoted is not None else double_quoted
        if name is not None:
            steps.append('."' + name.replace('"', '\\"') + '"')
        else:
            steps.append(f"[{index}]")
            definite = definite and index != "*"
        at = match.end()
    return "".join(steps), definite


def _text(value: exp.Expression) -> exp.Expression:
    """A JSON value as text: a string's content, JSON null as NULL, anything else its JSON."""
    kind = _call("json_type", value)
    return exp.Case(ifs=[exp.If(this=exp.EQ(this=kind, expression=exp.Literal.string("VARCHAR")),
                                true=_call("json_extract_string", value.copy(), exp.Literal.string("$"))),
                         exp.If(this=exp.EQ(this=kind.copy(), expression=exp.Literal.string("NULL")),
                                true=exp.Null())],
                    default=exp.Cast(this=value.copy(), to=exp.DataType.build("VARCHAR")))


def _texts(values: exp.Expression) -> exp.Expression:
    return _call("list_transform", values, exp.Lambda(this=_text(exp.column(_VALUE, quoted=False)),
                                                       expressions=[exp.to_identifier(_VALUE)]))


def _valid(json: exp.Expression) -> exp.Expression:
    return exp.TryCast(this=json, to=exp.DataType.build("JSON"))  # NULL where it is not JSON


def _empty(element: str) -> exp.Expression:
    return exp.Cast(this=exp.Array(expressions=[]), to=exp.DataType.build(f"{element}[]"))


def json_path_array(name: str, args: list[exp.Expression], default_empty: bool) -> exp.Expression:
    """``jsonPathArray(json, path)`` / ``jsonPathArrayDefaultEmpty``: a STRING_ARRAY (see the module doc)."""
    if len(args) != 2:
        raise _error(f"{name} takes 2 arguments (json, jsonPath), got {len(args)}")
    path, definite = jayway_path(args[1], name)
    found = _call("json_extract", _valid(args[0]), exp.Literal.string(path))
    if definite:
        def listed(value: exp.Column) -> exp.Expression:
            kind = _call("json_type", value)
            return exp.Case(ifs=[exp.If(this=exp.EQ(this=kind, expression=exp.Literal.string("ARRAY")),
                                        true=_texts(exp.Cast(this=value.copy(), to=exp.DataType.build("JSON[]")))),
                                 exp.If(this=exp.Or(this=exp.Is(this=value.copy(), expression=exp.Null()),
                                                    expression=exp.EQ(this=kind.copy(),
                                                                      expression=exp.Literal.string("NULL"))),
                                        true=exp.Null())],
                            default=exp.Array(expressions=[_text(value.copy())]))
        answer = let(found, _VALUE + "_found", listed)
    else:
        answer = _texts(found)
    return _call("coalesce", answer, _empty("VARCHAR")) if default_empty else answer


_CHECKS = {"INT": int, "LONG": int, "FLOAT": float, "DOUBLE": float, "BIG_DECIMAL": Decimal}


def json_extract_array(name: str, json: exp.Expression, path: str, element: str, duck: str,
                       default: exp.Expression | None) -> exp.Expression:
    """``jsonExtractScalar(json, path, '<element>_ARRAY'[, default])``: a list of ``duck`` values, empty where the
    path is missing or the JSON malformed. A default that does not read as the element type is a 150."""
    if default is not None:
        if not isinstance(default, (exp.Literal, exp.Neg)):
            raise _error(f"{name}: the default must be a literal, got {default.sql(dialect='duckdb')}")
        text = default.sql(dialect="duckdb") if isinstance(default, exp.Neg) else default.name
        try:
            _CHECKS.get(element, str)(text)
        except (ValueError, InvalidOperation):
            raise _error(f"{name}: the default {text!r} does not read as {element}") from None
    listed = exp.TryCast(this=_call("json_extract", _valid(json), exp.Literal.string(path)),
                         to=exp.DataType.build(f"{duck}[]"))
    return _call("coalesce", listed, _empty(duck))
