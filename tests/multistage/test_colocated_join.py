"""Joins of tables partitioned alike on the join key run on the servers (colocated joins): each rewritten query,
run as servers would (the server SQL over each partition's rows of both tables, the broker's stage over the union
of their answers), answers as DuckDB's join over all the rows; and every join whose answer it could change is
left to the broker."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest
import sqlglot

from cuvee.multistage.colocated_join import OTHER_RELATION, colocated_joins
from cuvee.multistage.plan import _answer_names, plan_stages
from cuvee.query import TableInfo
from cuvee.query.lookup import SERVER_RELATION

PARTITIONS = 4
ORDERS = pa.table({
    "orderId": pa.array(range(1, 41), pa.int64()),
    "customerId": pa.array([(i * 7) % 13 for i in range(40)], pa.int32()),
    "amount": pa.array([float(i % 9) * 2.5 for i in range(40)]),
    "status": pa.array(["open", "paid", "void", "paid"] * 10),
})
CUSTOMERS = pa.table({
    "customerId": pa.array([c for c in range(11)] + [3, 5], pa.int32()),  # 11, 12 never ordered from; 3, 5 twice
    "region": pa.array(["north", "south", "east", "west"] * 3 + ["east"]),
    "tier": pa.array(["gold", "silver", "gold", "bronze", "silver", "gold", "gold", "bronze", "silver", "gold",
                      "bronze", "gold", "silver"]),
    "status": pa.array(["active"] * 13),
})
ORDERS = ORDERS.append_column("placed", pa.array([1_700_000_000_000 + i * 3_600_000 for i in range(40)],
                                                pa.timestamp("ms")))
ORDERS = ORDERS.append_column("tags", pa.array([["x", "y"][: i % 3] for i in range(40)], pa.list_(pa.string())))
ORDERS = ORDERS.append_column("day", pa.array([f"2026-11-{1 + i % 28:02d}" for i in range(40)]))
CUSTOMERS = CUSTOMERS.append_column("placed", pa.array(range(13), pa.int64()))  # a LONG of the same name
INFOS = {
    "orders": TableInfo("orders_OFFLINE", tuple(ORDERS.column_names), timestamp_columns=frozenset({"placed"}),
                        multi_value_columns=frozenset({"tags"}), string_time_patterns=(("day", "yyyy-MM-dd"),),
                        number_columns=frozenset({"orderId", "customerId", "amount"})),
    "customers": TableInfo("customers_OFFLINE", tuple(CUSTOMERS.column_names),
                           number_columns=frozenset({"customerId", "placed"})),
}
PARTITION_COLUMNS = {"orders_OFFLINE": "customerId", "customers_OFFLINE": "customerId"}


def resolve(name: str) -> TableInfo | None:
    return INFOS.get(name.lower())


def colocate(left: TableInfo, left_key: str, right: TableInfo, right_key: str) -> str | None:
    """Placement exists when both sides join on their partition columns (what the broker checks, minus servers)."""
    if PARTITION_COLUMNS.get(left.name) == left_key and PARTITION_COLUMNS.get(right.name) == right_key:
        return "placed"
    return None


def _partition(rows: pa.Table, p: int) -> pa.Table:
    keys = rows.column("customerId").to_pylist()
    return rows.take([i for i, k in enumerate(keys) if k % PARTITIONS == p])


def run(sql: str) -> list[tuple]:
    tree, joins, made = colocated_joins(sqlglot.parse_one(sql, read="duckdb"), resolve, colocate, 1000)
    assert joins, f"not rewritten: {sql}"
    tables = {"orders_OFFLINE": ORDERS, "customers_OFFLINE": CUSTOMERS}
    relations: dict[str, pa.Table] = {}
    for join in joins:
        answers = []
        for p in range(PARTITIONS):  # one "server" per partition, each with its own rows of both tables
            con = duckdb.connect()
            con.register(SERVER_RELATION, _partition(tables[join.left], p))
            con.register(OTHER_RELATION, _partition(tables[join.right], p))
            answers.append(con.sql(join.sql).to_arrow_table())
        relations[join.relation] = pa.concat_tables(answers)
    stages = plan_stages(tree, resolve, 1000, made)
    assert not stages.leaves
    con = duckdb.connect()
    for name, rows in relations.items():
        con.register(name, rows)
    return [tuple(r) for r in con.sql(stages.final_sql).fetchall()]


def oracle(sql: str) -> list[tuple]:
    con = duckdb.connect()
    con.register("orders", ORDERS)
    con.register("customers", CUSTOMERS)
    return [tuple(r) for r in con.sql(sql).fetchall()]


@pytest.mark.parametrize("sql", [
    "SELECT c.region, SUM(o.amount) AS total FROM orders o JOIN customers c ON o.customerId = c.customerId "
    "WHERE c.tier = 'gold' GROUP BY c.region ORDER BY c.region",
    "SELECT COUNT(*) FROM orders JOIN customers ON customers.customerId = orders.customerId",
    "SELECT o.orderId, c.tier FROM orders o LEFT JOIN customers c ON o.customerId = c.customerId "
    "AND c.tier <> 'bronze' ORDER BY o.orderId, c.tier",
    # WHERE on the null-supplying side after a LEFT join: rows without a match are filtered after the join
    "SELECT o.orderId FROM orders o LEFT OUTER JOIN customers c ON c.customerId = o.customerId "
    "WHERE c.region IS NULL ORDER BY o.orderId",
    "SELECT region AS r, COUNT(DISTINCT orderId) AS n, MAX(amount) FROM orders o INNER JOIN customers c "
    "ON o.customerId = c.customerId AND amount > 3 GROUP BY r HAVING COUNT(*) > 1 ORDER BY n DESC, r",
    "SELECT o.status, c.status, COUNT(*) FROM orders o JOIN customers c ON o.customerId = c.customerId "
    "GROUP BY o.status, c.status ORDER BY 1, 2",
    "SELECT o.orderId, SUM(o.amount) OVER (PARTITION BY c.region ORDER BY o.orderId) AS running "
    "FROM orders o JOIN customers c ON o.customerId = c.customerId ORDER BY o.orderId, running",
    # a TIMESTAMP compared as epoch millis on the servers, and passed on through a CTE keeping that meaning
    "SELECT o.orderId FROM orders o JOIN customers c ON o.customerId = c.customerId "
    "WHERE o.placed > 1700050000000 ORDER BY o.orderId",
    "WITH j AS (SELECT o.placed, c.region FROM orders o JOIN customers c ON o.customerId = c.customerId) "
    "SELECT COUNT(*) FROM j WHERE placed > 1700050000000",
    # a quoted name in another case than the schema's
    'SELECT COUNT(*) FROM orders o JOIN customers c ON o.customerId = c.customerId WHERE o."AMOUNT" > 5',
    # inside a larger query: the join is one relation of the broker's stage
    "WITH spend AS (SELECT c.region AS region, SUM(o.amount) AS total FROM orders o JOIN customers c "
    "ON o.customerId = c.customerId GROUP BY c.region) SELECT region FROM spend WHERE total > 10 ORDER BY region",
])
def test_a_join_on_the_partition_columns_runs_on_the_servers_and_answers_as_the_join(sql: str) -> None:
    # the oracle reads a TIMESTAMP compared with a number as Pinot does: as epoch millis
    assert run(sql) == oracle(sql.replace("o.placed >", "epoch_ms(o.placed) >").replace(
        "WHERE placed >", "WHERE epoch_ms(placed) >"))


def test_the_answer_keeps_the_names_the_join_would_give() -> None:
    sql = ("SELECT c.region, o.status, SUM(o.amount), COUNT(*) AS n FROM orders o JOIN customers c "
           "ON o.customerId = c.customerId GROUP BY c.region, o.status")
    tree, joins, made = colocated_joins(sqlglot.parse_one(sql, read="duckdb"), resolve, colocate, 10)
    assert joins
    assert plan_stages(tree, resolve, 10, made).column_names == _answer_names(
        sqlglot.parse_one(sql, read="duckdb"))


def test_the_servers_send_only_the_columns_the_rest_of_the_query_reads() -> None:
    sql = ("SELECT c.region, COUNT(*) FROM orders o JOIN customers c ON o.customerId = c.customerId "
           "WHERE o.status = 'paid' GROUP BY c.region")
    _, joins, _ = colocated_joins(sqlglot.parse_one(sql, read="duckdb"), resolve, colocate, 10)
    assert len(joins) == 1
    server = joins[0].sql
    assert server.startswith('SELECT "c"."region" AS "__c1" FROM') and "LIMIT 11" in server
    assert '"o"."status" AS' not in server  # read by WHERE on the server, never sent
    assert (joins[0].left, joins[0].right) == ("orders_OFFLINE", "customers_OFFLINE")


@pytest.mark.parametrize("sql", [
    # not on the partition columns
    "SELECT COUNT(*) FROM orders o JOIN customers c ON o.status = c.status",
    # RIGHT and FULL joins, CROSS, USING, NATURAL: left to the broker
    "SELECT COUNT(*) FROM orders o RIGHT JOIN customers c ON o.customerId = c.customerId",
    "SELECT COUNT(*) FROM orders o FULL OUTER JOIN customers c ON o.customerId = c.customerId",
    "SELECT COUNT(*) FROM orders o JOIN customers c USING (customerId)",
    "SELECT COUNT(*) FROM orders o, customers c WHERE o.customerId = c.customerId",
    # a star, an ambiguous column, an alias shadowing a column, a nested query, an unknown column
    "SELECT * FROM orders o JOIN customers c ON o.customerId = c.customerId",
    "SELECT status FROM orders o JOIN customers c ON o.customerId = c.customerId",
    "SELECT o.amount * 2 AS amount FROM orders o JOIN customers c ON o.customerId = c.customerId ORDER BY amount",
    "SELECT o.orderId FROM orders o JOIN customers c ON o.customerId = c.customerId "
    "WHERE o.amount > (SELECT AVG(amount) FROM orders)",
    "SELECT o.nothing FROM orders o JOIN customers c ON o.customerId = c.customerId",
    # a select alias in WHERE: the servers would not know it
    "SELECT o.amount * 2 AS twice FROM orders o JOIN customers c ON o.customerId = c.customerId WHERE twice > 3",
    # a CTE named like a table is not the table
    "WITH customers AS (SELECT 1 AS customerId) SELECT COUNT(*) FROM orders o JOIN customers c "
    "ON o.customerId = c.customerId",
    # a multi-value or STRING date-time column in a filter: Pinot's rules for it apply in the table's own leaf
    "SELECT COUNT(*) FROM orders o JOIN customers c ON o.customerId = c.customerId WHERE o.tags = 'x'",
    "SELECT COUNT(*) FROM orders o JOIN customers c ON o.customerId = c.customerId "
    "WHERE EXTRACT(DAY FROM o.day) = 5",
    # a name that is a TIMESTAMP on one side and a LONG on the other, both in filters
    "SELECT COUNT(*) FROM orders o JOIN customers c ON o.customerId = c.customerId "
    "WHERE o.placed > 1700050000000 AND c.placed > 3",
    # three tables
    "SELECT COUNT(*) FROM orders o JOIN customers c ON o.customerId = c.customerId "
    "JOIN customers d ON d.customerId = o.customerId",
])
def test_a_join_whose_answer_could_change_is_left_to_the_broker(sql: str) -> None:
    _, joins, _ = colocated_joins(sqlglot.parse_one(sql, read="duckdb"), resolve, colocate, 10)
    assert joins == []


def test_no_placement_leaves_the_join_to_the_broker() -> None:
    sql = "SELECT COUNT(*) FROM orders o JOIN customers c ON o.customerId = c.customerId"
    tree, joins, _ = colocated_joins(sqlglot.parse_one(sql, read="duckdb"), resolve, lambda *_: None, 10)
    assert joins == [] and tree.find(sqlglot.exp.Join) is not None
