"""The pruning filter taken from a WHERE: known parts kept, unknown parts never make it stricter; its wire form."""

from __future__ import annotations

import pytest

from cuvee.pruning.predicate import (MAX_DEPTH, MAX_IN_VALUES, MAX_NODES, MAX_VALUES, And, Compare, In, Or,
                                     PredicateWireError, from_json, to_json, with_bound)
from cuvee.pruning import predicate
from tests.pruning.helpers import where_of


def test_comparisons_in_between_and_connectives() -> None:
    assert where_of("i = 5") == Compare("i", "=", 5)
    assert where_of("5 < i") == Compare("i", ">", 5)
    assert where_of("d >= -2.5") == Compare("d", ">=", -2.5)
    assert where_of("s IN ('a', 'b')") == In("s", ("a", "b"))
    assert where_of("l BETWEEN 1 AND 3") == And((Compare("l", ">=", 1), Compare("l", "<=", 3)))
    assert where_of("i = 1 AND l = 2 AND s = 'x'") == And((Compare("i", "=", 1), Compare("l", "=", 2),
                                                            Compare("s", "=", "x")))
    assert where_of("i = 1 OR (l = 2 OR l = 3)") == Or((Compare("i", "=", 1), Compare("l", "=", 2),
                                                         Compare("l", "=", 3)))


def test_unknown_parts() -> None:
    # AND keeps its known parts; OR with an unknown part is unknown; NOT, <>, functions, casts, subqueries unknown
    assert where_of("i = 1 AND NOT l > 2") == Compare("i", "=", 1)
    assert where_of("i = 1 OR NOT l > 2") is None
    assert where_of("i <> 1") is None
    assert where_of("abs(i) = 1") is None
    assert where_of("i = CAST(3 AS BIGINT)") is None
    assert where_of("i = l") is None
    assert where_of("m = 3") is None  # a multi-value column's comparison is planned as a list function
    assert where_of("i IN (1, NULL)") is None
    assert where_of("i = 99999999999999999999") is None  # past 64 bits


def test_long_chains_are_one_level() -> None:
    many = " OR ".join(f"i = {n}" for n in range(40))
    assert where_of(many) == Or(tuple(Compare("i", "=", n) for n in range(40)))
    assert where_of(" AND ".join(f"i > {n}" for n in range(40))) == And(tuple(Compare("i", ">", n) for n in range(40)))


def test_a_time_bound_joins_what_where_prunes_by() -> None:
    assert with_bound(None, "t", ">", 5) == Compare("t", ">", 5)
    assert with_bound(Compare("i", "=", 1), "t", "<=", 5) == And((Compare("i", "=", 1), Compare("t", "<=", 5)))
    assert with_bound(where_of("i = 1 AND l = 2"), "t", ">", 5) == And((Compare("i", "=", 1), Compare("l", "=", 2),
                                                                        Compare("t", ">", 5)))


def test_a_long_in_list_set_aside_as_text_is_read_for_membership_then_for_its_range() -> None:
    # 64 values or more are planned as one raw text (cuvee.query.prescan): pruning reads that text
    values = [*range(-70, 70, 2), *range(-70, 70, 2)][1:]
    assert where_of(f"i IN ({', '.join(map(str, values))})") == In("i", tuple(dict.fromkeys(values)))
    values = list(range(-70, 70, 2))
    texts = [f"a,{n}" for n in range(80)] + ["o'k"]
    quoted = ", ".join("'" + t.replace("'", "''") + "'" for t in texts)
    assert where_of(f"s IN ({quoted})") == In("s", tuple(texts))
    mixed = where_of(f"d IN ({', '.join(str(v / 4) for v in range(70))}, -3, +4, -2.5e1)")
    assert isinstance(mixed, In) and mixed.values[-2:] == (-3, -25.0) and 4.0 in mixed.values
    assert mixed.values[1] == 0.25
    # past MAX_IN_VALUES distinct values: the range from the smallest to the largest (min/max pruning only)
    many = ", ".join(str(v) for v in range(MAX_IN_VALUES, -1, -1))
    assert where_of(f"i IN ({many}) AND s = 'a'") == And((Compare("i", ">=", 0), Compare("i", "<=", MAX_IN_VALUES),
                                                         Compare("s", "=", "a")))
    repeated = ", ".join(str(v % 5) for v in range(MAX_VALUES * 2))
    assert where_of(f"i IN ({repeated})") == In("i", (0, 1, 2, 3, 4))  # distinct values are what count
    assert where_of(f"i IN ({many}, 'x')") is None  # numbers and strings: no range
    assert where_of(f"i IN ({many}, 99999999999999999999)") == And((Compare("i", ">=", 0.0),  # read as doubles
                                                                   Compare("i", "<=", 1e20)))
    assert where_of(f"i IN ({values}, 99999999999999999999)") is None  # a value no BIGINT holds: unknown


def test_a_long_mixed_list_is_read_only_up_to_where_it_becomes_unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    read: list[str] = []
    real = predicate._token
    monkeypatch.setattr(predicate, "_token", lambda token: read.append(token) or real(token))
    texts = ", ".join(f"'x{n}'" for n in range(MAX_IN_VALUES + 1))
    more = ", ".join(f"'y{n}'" for n in range(5000))
    assert where_of(f"s IN (5, {texts}, {more})") is None
    assert len(read) == MAX_IN_VALUES + 1  # the number, then strings until one past MAX_IN_VALUES distinct values
    read.clear()
    assert where_of(f"s IN ({texts}, 1e999, {texts})") is None  # a value no literal reads: stop there
    assert len(read) == MAX_IN_VALUES + 2
    few = ", ".join(f"'x{n}'" for n in range(100))
    assert where_of(f"s IN (5, {few})") == In("s", (5, *(f"x{n}" for n in range(100))))  # mixed, few: membership


def _in_lists(count: int) -> list[str]:
    """``count`` values as IN lists of 63 (each an ordinary parsed list, not one set aside as raw text)."""
    return [f"i IN ({', '.join(str(v) for v in range(start, min(start + 63, count)))})"
            for start in range(0, count, 63)]


def _nested(level: int, top: int) -> str:
    """Connectives nested ``top`` levels deep (OR and AND alternating, so no level flattens into another)."""
    if level == top:
        return f"i = {level}"
    return f"(i = {level} {'OR' if level % 2 == 0 else 'AND'} {_nested(level + 1, top)})"


@pytest.mark.parametrize("condition, kept", [
    (" OR ".join(f"i = {n}" for n in range(MAX_NODES - 3)), True),
    (" OR ".join(f"i = {n}" for n in range(MAX_NODES - 2)), False),
    (" OR ".join(_in_lists(MAX_VALUES - 1)), True),
    (" OR ".join(_in_lists(MAX_VALUES)), False),
    (_nested(0, MAX_DEPTH - 1), True),
    (_nested(0, MAX_DEPTH), False),
])
def test_room_is_left_for_a_hybrid_time_bound(condition: str, kept: bool) -> None:
    """A WHERE at the bounds is extracted only when a server still accepts it with the time bound joined."""
    predicate = where_of(condition)
    assert (predicate is not None) is kept
    if predicate is not None:
        bounded = with_bound(predicate, "t", "<=", 100)
        assert from_json(to_json(bounded)) == bounded


def test_wire_round_trip() -> None:
    predicate = where_of("(i = 1 OR s IN ('a', 'b')) AND d BETWEEN 0.5 AND 2")
    assert predicate is not None
    assert from_json(to_json(predicate)) == predicate


@pytest.mark.parametrize("doc", [
    None, [], ["cmp", "i", "==", 1], ["cmp", "", "=", 1], ["cmp", "i", "=", True], ["cmp", "i", "=", [1]],
    ["cmp", "i", "=", 2**64], ["in", "i", []], ["and", [["cmp", "i", "=", 1]]], ["xor", []],
    ["cmp", "x" * 600, "=", 1], ["in", "i", list(range(MAX_VALUES + 1))],
    ["or", [["cmp", "i", "=", n] for n in range(MAX_NODES + 1)]],
])
def test_malformed_wire_form_is_refused(doc: object) -> None:
    with pytest.raises(PredicateWireError):
        from_json(doc)


def test_deep_wire_form_is_refused() -> None:
    doc: list = ["cmp", "i", "=", 1]
    for _ in range(40):
        doc = ["and", [doc, ["cmp", "i", "=", 1]]]
    with pytest.raises(PredicateWireError):
        from_json(doc)


def test_between_symmetric_is_unknown() -> None:
    """``i BETWEEN SYMMETRIC 20 AND 10`` matches 10..20: read as plain BETWEEN it would rule out every segment."""
    assert where_of("i BETWEEN SYMMETRIC 20 AND 10") is None
    assert where_of("i BETWEEN SYMMETRIC 20 AND 10 AND l = 1") == Compare("l", "=", 1)
