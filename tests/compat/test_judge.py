"""The compatibility suite's judge: it must fail wrong answers (else the suite proves nothing) and accept the
answers Pinot's rules allow (default LIMIT 10, ties under ORDER BY … LIMIT, integral DOUBLE sums)."""

from __future__ import annotations

import duckdb

from cuvee.testing.compat.judge import compare, run_oracle, shape_of


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


def judged(pinot: str, got: list[list], rows: list[tuple], columns: list[str] | None = None) -> bool | None:
    """``got`` judged as ``run.judge_all`` does: DuckDB over ``rows`` (columns n, k, v) is the oracle, with the
    sort keys appended when the answer does not show them."""
    con = duckdb.connect()
    con.execute("CREATE TABLE t (n VARCHAR, k INTEGER, v INTEGER)")
    con.executemany("INSERT INTO t VALUES (?, ?, ?)", rows)
    shape = shape_of(pinot, pinot)
    star = [*columns, *shape.key_names] if columns is not None else None
    limited = run_oracle(con, shape.limited_sql, columns)
    keyed = None if shape.keyed_sql is None else run_oracle(con, shape.keyed_sql, star)
    return compare(shape, got, limited, lambda: run_oracle(con, shape.unlimited_sql, columns), keyed=keyed)[0]


def test_ties_on_a_sort_key_not_shown_are_judged_by_the_oracles_keys() -> None:
    tied = [("x", 1, 0), ("y", 1, 0), ("z", 1, 0), ("w", 2, 0)]
    sql = "SELECT n FROM t ORDER BY k LIMIT 2"
    assert judged(sql, [["z"], ["y"]], tied) is True  # any two of the rows tied on k = 1
    assert judged(sql, [["x"], ["w"]], tied) is False  # w comes after the cut
    assert judged(sql, [["x"], ["x"]], tied) is False  # one x only among the tied rows
    # the right rows, one in the wrong place: y and z sort after x
    groups = [("x", 1, 0), ("y", 2, 0), ("z", 2, 0), ("v", 3, 0)]
    assert judged("SELECT n FROM t ORDER BY k LIMIT 3", [["y"], ["x"], ["z"]], groups) is False
    assert judged("SELECT n FROM t ORDER BY k LIMIT 3", [["x"], ["z"], ["y"]], groups) is True
    # a duplicate too many: x twice is in the full answer, but once only under the first key
    twice = [("x", 1, 0), ("y", 1, 0), ("x", 2, 0), ("z", 3, 0)]
    assert judged(sql, [["x"], ["x"]], twice) is False
    assert judged(sql, [["y"], ["x"]], twice) is True


def test_sort_keys_not_shown_across_an_offset_descending_expressions_aliases_and_groups() -> None:
    rows = [("a", 1, 5), ("b", 2, 5), ("c", 2, 5), ("d", 2, 5), ("e", 3, 5)]
    # OFFSET 2 cuts through k = 2: any two of b, c, d, then e
    sql = "SELECT n FROM t ORDER BY k LIMIT 3 OFFSET 2"
    assert judged(sql, [["d"], ["b"], ["e"]], rows) is True
    assert judged(sql, [["e"], ["b"], ["c"]], rows) is False
    assert judged(sql, [["a"], ["b"], ["e"]], rows) is False
    assert judged("SELECT n, v FROM t ORDER BY v - k DESC, n LIMIT 1", [["a", 5]], rows) is True
    assert judged("SELECT n, v FROM t ORDER BY v - k DESC, n LIMIT 1", [["b", 5]], rows) is False
    grouped = "SELECT v AS k, COUNT(*) AS c FROM t GROUP BY v ORDER BY SUM(k) DESC, 2 LIMIT 1"  # k: an alias too
    assert judged(grouped, [[5, 5]], rows) is True
    assert judged(grouped, [[5, 4]], rows) is False
    assert judged("SELECT * FROM t ORDER BY k DESC LIMIT 1", [[3, "e", 5]], rows, ["k", "n", "v"]) is True
    assert judged("SELECT * FROM t ORDER BY k DESC LIMIT 2", [[2, "d", 5], [3, "e", 5]], rows, ["k", "n", "v"]) \
        is False


def test_a_sort_key_no_rewrite_can_append_stays_unjudged() -> None:
    shape = shape_of("SELECT DISTINCT n FROM t ORDER BY k LIMIT 1", "SELECT DISTINCT n FROM t ORDER BY k LIMIT 1")
    assert shape.keyed_sql is None  # the keys would change what is distinct
    shape = shape_of("SELECT n FROM t ORDER BY k LIMIT 1", "SELECT n FROM t ORDER BY k LIMIT 1")
    assert shape.key_names and shape.keyed_sql is not None
    # keyed rows that are not the oracle's answer (a rewrite gone wrong): not judged rather than judged wrongly
    assert compare(shape, [["x"]], [("y",)], [("y",), ("x",)], keyed=[("y", 1), ("z", 1)])[0] is None
    assert compare(shape, [["x"]], [("y",)], [("y",), ("x",)], keyed=[("y", 1), ("x", 1)])[0] is True
    assert compare(shape, [["x"]], [("y",)], [("y",), ("x",)], keyed=[("y", 1), ("x", 2)])[0] is False
