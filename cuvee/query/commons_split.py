"""Commons Lang's ``StringUtils.splitByWholeSeparator(text, separator, max)`` (Pinot's ``split`` and
``splitPart``) as one DuckDB expression. Pure tree building.

Its rules, which DuckDB's ``string_split`` does not follow: the parts between whole separators, with empty parts
dropped (adjacent separators count as one) except the last part, which is kept even when empty (``'a,b,'`` is
``['a', 'b', '']``; ``''`` is ``[]``). With ``max`` > 0, once ``max - 1`` parts are taken the rest of the text,
from the start of the next part, is the last one (``split('a::b::c', '::', 2)`` is ``['a', 'b::c']``). An empty
separator splits on runs of Java whitespace instead, keeping no trailing empty part.

DuckDB splits on every separator (``string_split``, or a one-character regular expression for whitespace); the
kept parts are picked from that list by position, and the rest of the text starts after the characters of the
parts and separators before it. The split list and the kept positions are each computed once, bound to a lambda
parameter (``let``), rather than written out again wherever they are used.
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp

# Java's Character.isWhitespace: ASCII separators, the file/group/record/unit separators and Unicode's space,
# line and paragraph separators except the no-break spaces
_JAVA_WHITESPACE = (r"[ \t\n\x0B\f\r\x1C-\x1F\x{1680}\x{2000}-\x{2006}\x{2008}-\x{200A}\x{2028}\x{2029}"
                    r"\x{205F}\x{3000}]")
_PARTS, _KEPT, _AT = "cuvee_fn_parts", "cuvee_fn_kept", "cuvee_fn_at"  # lambda parameters no column is named


def _call(name: str, *args: exp.Expression) -> exp.Expression:
    return exp.Anonymous(this=name, expressions=list(args))


def _var(name: str) -> exp.Column:
    return exp.column(name, quoted=False)


def _lambda(name: str, body: exp.Expression) -> exp.Lambda:
    return exp.Lambda(this=body, expressions=[exp.to_identifier(name)])


def let(value: exp.Expression, name: str, body: Callable[[exp.Column], exp.Expression]) -> exp.Expression:
    """``body`` over ``value`` computed once: a one-element list mapped by a lambda whose parameter is ``name``
    (DuckDB evaluates a subexpression again wherever it is written; also used by ``cuvee.query.json_match``)."""
    mapped = _call("list_transform", exp.Array(expressions=[value]), _lambda(name, body(_var(name))))
    return _call("list_extract", mapped, exp.Literal.number(1))


def _at(items: exp.Expression, index: exp.Expression) -> exp.Expression:
    return _call("list_extract", items, index)


def _parts_at(parts: exp.Column, positions: exp.Expression) -> exp.Expression:
    return _call("list_transform", positions, _lambda(_AT, _at(parts.copy(), _var(_AT))))


def _rest_from(text: exp.Expression, parts: exp.Column, separator_length: exp.Expression,
               position: exp.Expression) -> exp.Expression:
    """The text from the start of part ``position`` (1-based) on: past the parts before it and a separator each."""
    before = _call("list_slice", parts.copy(), exp.Literal.number(1),
                   exp.Sub(this=position.copy(), expression=exp.Literal.number(1)))
    lengths = _call("list_transform", before, _lambda(_AT, _call("length", _var(_AT))))
    separators = exp.Mul(this=exp.paren(exp.Sub(this=position.copy(), expression=exp.Literal.number(1))),
                         expression=separator_length)
    skipped = exp.Add(this=_call("coalesce", _call("list_sum", lengths), exp.Literal.number(0)),
                      expression=separators)
    start = exp.Cast(this=exp.Add(this=exp.paren(skipped), expression=exp.Literal.number(1)),
                     to=exp.DataType.build("BIGINT"))  # list_sum answers a HUGEINT, which substring does not take
    return exp.Substring(this=text.copy(), start=start)


def _split(text: exp.Expression, separator: exp.Expression | None, limit: int) -> exp.Expression:
    """The split of a non-empty ``text`` on ``separator`` (None: on Java whitespace)."""
    whitespace = separator is None
    pieces = _call("regexp_split_to_array", text.copy(), exp.Literal.string(_JAVA_WHITESPACE)) if whitespace \
        else _call("string_split", text.copy(), separator)
    separator_length = exp.Literal.number(1) if whitespace else _call("length", separator.copy())

    def over_parts(parts: exp.Column) -> exp.Expression:
        count = _call("len", parts.copy())
        last = count if whitespace else exp.Sub(this=count, expression=exp.Literal.number(1))
        nonempty = _call("list_filter", _call("range", exp.Literal.number(1), exp.Add(
            this=last, expression=exp.Literal.number(1))), _lambda(_AT, exp.NEQ(
                this=_at(parts.copy(), _var(_AT)), expression=exp.Literal.string(""))))

        def over_kept(kept: exp.Column) -> exp.Expression:
            every = _parts_at(parts, kept.copy())
            if not whitespace:  # the last part is kept even when empty
                every = _call("list_concat", every, exp.Array(expressions=[_at(parts.copy(), _call(
                    "len", parts.copy()))]))
            if limit <= 0:
                return every
            head = _parts_at(parts, _call("list_slice", kept.copy(), exp.Literal.number(1),
                                          exp.Literal.number(limit - 1)))
            rest = _rest_from(text, parts, separator_length, _at(kept.copy(), exp.Literal.number(limit)))
            limited = _call("list_concat", head, exp.Array(expressions=[rest]))
            return exp.Case(ifs=[exp.If(this=exp.GTE(this=_call("len", kept.copy()),
                                                     expression=exp.Literal.number(limit)), true=limited)],
                            default=every)

        return let(nonempty, _KEPT, over_kept)

    return let(pieces, _PARTS, over_parts)


def split_by_whole_separator(text: exp.Expression, separator: exp.Expression, limit: int = 0) -> exp.Expression:
    """Commons' ``splitByWholeSeparator(text, separator, limit)`` (see the module doc): a VARCHAR list, NULL for a
    NULL text. A separator known to be empty splits on whitespace; one that may be empty is checked per row."""
    empty = exp.Cast(this=exp.Array(expressions=[]), to=exp.DataType.build("VARCHAR[]"))
    if isinstance(separator, exp.Literal) and separator.is_string:
        split = _split(text, separator if separator.name else None, limit)
    else:
        split = exp.Case(ifs=[exp.If(this=exp.EQ(this=separator.copy(), expression=exp.Literal.string("")),
                                     true=_split(text, None, limit))], default=_split(text, separator, limit))
    return exp.Case(ifs=[exp.If(this=exp.EQ(this=text.copy(), expression=exp.Literal.string("")), true=empty)],
                    default=split)
