"""The compatibility suite's judge: it must fail wrong answers (else the suite proves nothing) and accept the
answers Pinot's rules allow (default LIMIT 10, ties under ORDER BY … LIMIT, integral DOUBLE sums)."""

from __future__ import annotations

from cuvee.testing.compat.judge import compare, shape_of


def judge(pinot: str, got: list[list], limited: list[tuple], unlimited: list[tuple] | None = None) -> bool:
    shape = shape_of(pinot, pinot)
    return compare(shape, got, limited, unlimited if unlimited is not None else limited)[0]


def test_a_wrong_value_a_missing_row_or_a_wrong_order_fails() -> None:
    assert not judge("SELECT a, COUNT(*) FROM t GROUP BY a", [["x", 2]], [("x", 3)])
    assert not judge("SELECT COUNT(*) FROM t", [[1]], [(2,)])
    assert not judge("SELECT a FROM t ORDER BY a LIMIT 2", [["b"], ["a"]], [("a",), ("b",)],
                     [("a",), ("b",), ("c",)])
    assert not judge("SELECT a FROM t WHERE b = 1 LIMIT 100", [["a"]], [("a",), ("b",)])


def test_pinot_rules_are_accepted() -> None:
    assert judge("SELECT SUM(x) FROM t", [[6.0]], [(6,)])  # Pinot's SUM is a DOUBLE
    assert judge("SELECT AVG(x) FROM t", [[0.1 + 0.2]], [(0.3,)])
    assert not judge("SELECT AVG(x) FROM t", [[12345.64]], [(12345.6,)])  # 6 digits only for FLOAT inputs
    shape = shape_of("SELECT SUM(f) FROM t", "SELECT SUM(f) FROM t")
    assert compare(shape, [[12345.6001]], [(12345.6002,)], [(12345.6002,)], float_inputs=True)[0]
    # Default LIMIT 10: any 10 of the groups, in any order when there is no ORDER BY.
    groups = [(i, 1) for i in range(20)]
    assert judge("SELECT a, COUNT(*) FROM t GROUP BY a", [[i, 1] for i in range(19, 9, -1)], groups[:10], groups)
    # Ties under the LIMIT: rows with the same sort key may be any of the tied ones.
    tied = [("a", 1), ("b", 1), ("c", 2)]
    assert judge("SELECT n, k FROM t ORDER BY k LIMIT 2", [["b", 1], ["a", 1]], tied[:2], tied)
    assert not judge("SELECT n, k FROM t ORDER BY k LIMIT 2", [["a", 1], ["c", 2]], tied[:2], tied)


def test_rows_sorted_by_a_column_not_shown_cannot_be_told_right_or_wrong_under_ties() -> None:
    shape = shape_of("SELECT a FROM t ORDER BY b LIMIT 1", "SELECT a FROM t ORDER BY b LIMIT 1")
    assert compare(shape, [["x"]], [("y",)], [("y",), ("x",)])[0] is None  # unjudged, not passed
    assert compare(shape, [["z"]], [("y",)], [("y",), ("x",)])[0] is False  # not among the rows at all: wrong


def test_the_full_answer_is_fetched_only_to_judge_ties() -> None:
    shape = shape_of("SELECT a FROM t ORDER BY a LIMIT 1", "SELECT a FROM t ORDER BY a")
    asked = []

    def full() -> list[tuple]:
        asked.append(1)
        return [("x",), ("y",)]

    assert compare(shape, [["x"]], [("x",)], full)[0] is True and asked == []  # the limited answer itself
    assert compare(shape, [["y"]], [("x",)], full)[0] is False and asked == [1]  # fetched once to look for ties
