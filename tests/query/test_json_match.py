"""JSON_MATCH through the planner and DuckDB, judged against Pinot's own algorithm written here independently: each
document flattened into records as Pinot's JSON index flattens it (``JsonUtils.flatten``: a record per combination
of array elements, leaf key paths like ``.addresses..country``, the element index under ``.addresses.$index``), a
filter holding for a document when it holds for one of its records (``IS NULL``: when none holds the leaf)."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from itertools import product
from typing import Any

import pyarrow as pa
import pytest

from cuvee.query import QueryError, QueryErrorCode
from cuvee.query.execute import merge_partials, run_server_step
from cuvee.query.parse import TableInfo
from cuvee.query.rewrite import plan_sql

DOCS: list[Any] = [
    {"name": "adam", "age": 30, "addresses": [{"number": 112, "street": "main st", "country": "us"},
                                              {"number": 2, "street": "second st", "country": "us"},
                                              {"number": 3, "street": "third st", "country": "ca"}]},
    {"name": "bob", "age": 25, "addresses": [{"number": 1, "street": "main st", "country": "ca"}]},
    {"name": "charles", "addresses": []},
    {"name": None, "tags": ["x", "y"]},
    {"tags": ["y"], "addresses": [{"country": "us", "phones": [{"t": "home", "n": 1}, {"t": "work", "n": 2}]},
                                  {"country": "ca", "phones": [{"t": "home", "n": 3}]}]},
    {"addresses": [None, {"country": "ca"}, {}], "tags": [], "age": "30"},
    {"a": {"b": [1, 2.5, "3"]}, "age": 30.5, "ok": True},
    [{"key1": "value1", "key2": 1}, {"key1": "value2", "key2": 2}],
    "not json",
    None,
]
TABLE = TableInfo("t", ("id", "j"), number_columns=frozenset({"id"}))
ROWS = pa.table({"id": list(range(len(DOCS))),
                 "j": [d if d is None or isinstance(d, str) else json.dumps(d) for d in DOCS]})
Record = dict[str, str]


def leaf_text(value: Any) -> str:
    """Jackson's asText of a leaf (the documents' numbers print alike in Java and Python)."""
    return ("true" if value else "false") if isinstance(value, bool) else str(value)


def flatten(node: Any) -> list[Record]:
    """Pinot's JsonUtils.flatten, from its description: leaves, a record per array element, objects merged with
    every combination of their fields' records; JSON null gives nothing."""
    if node is None:
        return []
    if not isinstance(node, (dict, list)):
        return [{"": leaf_text(node)}]
    if isinstance(node, list):
        return [{**{"." + k: v for k, v in child.items()}, ".$index": str(i)}
                for i, element in enumerate(node) for child in flatten(element)]
    fields = [[{"." + key + k: v for k, v in child.items()} for child in flatten(value)] for key, value in node.items()]
    fields = [records for records in fields if records]
    return [{k: v for record in combination for k, v in record.items()} for combination in product(*fields)]


def records(doc: Any) -> list[Record]:
    return flatten(json.loads(doc)) if isinstance(doc, str) and doc.startswith(("{", "[")) else []


def matching(holds: Callable[[Record], bool]) -> list[int]:
    """The documents one of whose records the filter holds for."""
    return [i for i, doc in enumerate(ROWS["j"].to_pylist()) if any(holds(r) for r in records(doc))]


def answer(json_filter: str) -> list[int]:
    quoted = json_filter.replace("'", "''")
    plan = plan_sql(f"SELECT id FROM t WHERE JSON_MATCH(j, '{quoted}') ORDER BY id LIMIT 100", lambda _: TABLE)
    return [r["id"] for r in merge_partials(plan, [run_server_step(plan, [ROWS])], ROWS.schema).to_pylist()]


def number(record: Record, key: str) -> float | None:
    try:
        return float(record[key])
    except (KeyError, ValueError):
        return None


CASES: list[tuple[str, Callable[[Record], bool]]] = [
    ('"$.name" = \'adam\'', lambda r: r.get(".name") == "adam"),
    ("name = 'adam'", lambda r: r.get(".name") == "adam"),  # the legacy key spelling
    ('"$.addresses[*].country" = \'ca\'', lambda r: r.get(".addresses..country") == "ca"),
    ('"$.addresses[*].street" = \'main st\' AND "$.addresses[*].country" = \'ca\'',  # the same element
     lambda r: r.get(".addresses..street") == "main st" and r.get(".addresses..country") == "ca"),
    ('"$.addresses[0].country" = \'us\'',
     lambda r: r.get(".addresses.$index") == "0" and r.get(".addresses..country") == "us"),
    ('"$.addresses[1].country" = \'ca\' OR "$.addresses[1].number" = 2',
     lambda r: r.get(".addresses.$index") == "1" and (r.get(".addresses..country") == "ca"
                                                       or r.get(".addresses..number") == "2")),
    ('"$.addresses[*].phones[*].t" = \'work\' AND "$.addresses[*].country" = \'us\'',
     lambda r: r.get(".addresses..phones..t") == "work" and r.get(".addresses..country") == "us"),
    ('"$.addresses[*].phones[*].t" = \'home\' AND "$.addresses[*].phones[*].n" = 2',
     lambda r: r.get(".addresses..phones..t") == "home" and r.get(".addresses..phones..n") == "2"),
    ('"$.tags[*]" = \'y\' AND "$.addresses[*].country" = \'ca\'',  # two arrays: every pair of elements
     lambda r: r.get(".tags.") == "y" and r.get(".addresses..country") == "ca"),
    ('"$.tags[*]" = \'x\' OR "$.name" = \'charles\'', lambda r: r.get(".tags.") == "x" or r.get(".name") == "charles"),
    ('"$.addresses[*].country" != \'us\'', lambda r: r.get(".addresses..country", "us") != "us"),
    ('"$.addresses[*].country" NOT IN (\'ca\', \'mx\')',
     lambda r: ".addresses..country" in r and r[".addresses..country"] not in ("ca", "mx")),
    ('"$.name" IN (\'adam\', \'bob\') AND "$.age" != 30',
     lambda r: r.get(".name") in ("adam", "bob") and r.get(".age", "30") != "30"),
    ('"$.age" IS NOT NULL', lambda r: ".age" in r),
    ('"$.age" = 30', lambda r: r.get(".age") == "30"),  # text compared: the string "30" matches too
    ('"$.ok" = true', lambda r: r.get(".ok") == "true"),
    ('"$.a.b[*]" >= 2', lambda r: (number(r, ".a.b.") or 0) >= 2),
    ('"$.a.b[1]" = 2.5', lambda r: r.get(".a.b.$index") == "1" and r.get(".a.b.") == "2.5"),
    ('"$.addresses[*].phones[*].n" BETWEEN 2 AND 3', lambda r: 2 <= (number(r, ".addresses..phones..n") or 0) <= 3),
    ('"$.name" < \'b\'', lambda r: ".name" in r and r[".name"] < "b"),
    ('"$[*].key2" = 1 AND "$[*].key1" = \'value1\'', lambda r: r.get("..key2") == "1" and r.get("..key1") == "value1"),
    ('"$[*].key2" = 1 AND "$[*].key1" = \'value2\'', lambda r: r.get("..key2") == "1" and r.get("..key1") == "value2"),
    ('REGEXP_LIKE("$.addresses[*].street", \'.*d st\')',
     lambda r: re.fullmatch(".*d st", r.get(".addresses..street", "")) is not None),
    ('"$.name" LIKE \'%a%\'', lambda r: "a" in r.get(".name", "")),
    ('("$.name" = \'bob\' OR "$.tags[*]" = \'y\') AND "$.addresses[*].country" = \'ca\'',
     lambda r: (r.get(".name") == "bob" or r.get(".tags.") == "y") and r.get(".addresses..country") == "ca"),
]


@pytest.mark.parametrize(("json_filter", "holds"), CASES, ids=[c[0] for c in CASES])
def test_json_match_holds_where_one_of_pinots_flattened_records_matches(
        json_filter: str, holds: Callable[[Record], bool]) -> None:
    assert answer(json_filter) == matching(holds)


def test_is_null_alone_matches_the_documents_no_record_of_which_holds_the_leaf() -> None:
    """Malformed JSON and NULL have no records, so they match IS NULL, as Pinot's flipped bitmap does."""
    expected = [i for i, doc in enumerate(ROWS["j"].to_pylist()) if not any(".age" in r for r in records(doc))]
    assert answer('"$.age" IS NULL') == expected
    assert 8 in expected and 9 in expected and 0 not in expected


def test_json_match_beside_other_conditions_and_negated_outside() -> None:
    adam_or_bob = matching(lambda r: r.get(".name") in ("adam", "bob"))
    plan = plan_sql("SELECT COUNT(*) FROM t WHERE NOT JSON_MATCH(j, '\"$.name\" IN (''adam'', ''bob'')') AND id < 9",
                    lambda _: TABLE)
    counted = merge_partials(plan, [run_server_step(plan, [ROWS])], ROWS.schema).column(0).to_pylist()
    assert counted == [len([i for i in range(9) if i not in adam_or_bob])]


@pytest.mark.parametrize(("sql", "words"), [
    ("JSON_MATCH(j, 'NOT \"$.name\" = ''adam''')", "NOT is not supported inside the filter"),
    ("JSON_MATCH(j, '\"$.age\" IS NULL AND \"$.name\" = ''x''')", "IS NULL cannot be nested"),
    ("JSON_MATCH(j, '''$.name'' = ''adam''')", "must be a JSON key path in double quotes"),
    ("JSON_MATCH(j, '\"$.name\" = upper(''adam'')')", "must be a literal"),
    ("JSON_MATCH(j, '\"$..name\" = ''adam''')", "cannot read the key path"),
    ("JSON_MATCH(j, '\"$.name\" + 1')", "is not a predicate Pinot's JSON index evaluates"),
    ("JSON_MATCH(j, j)", "the filter must be a string literal"),
    ("JSON_MATCH(j)", "takes 2 arguments"),
    ("JSON_MATCH(j, '\"$.name\" = ')", "cannot parse the filter"),
])
def test_what_pinots_json_index_does_not_evaluate_is_a_150_naming_it(sql: str, words: str) -> None:
    with pytest.raises(QueryError) as caught:
        plan_sql(f"SELECT id FROM t WHERE {sql}", lambda _: TABLE)
    assert caught.value.code is QueryErrorCode.SQL_PARSING, caught.value
    assert words in caught.value.message and caught.value.message.startswith("JSON_MATCH: "), caught.value.message
