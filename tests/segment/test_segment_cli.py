"""`cuvee segment build` / `inspect` / `pack` / `unpack` through the real CLI entry point."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from cuvee.cli.main import main
from cuvee.segment.immutable import ImmutableSegment

SCHEMA = {
    "schemaName": "clicks",
    "dimensionFieldSpecs": [
        {"name": "country", "dataType": "STRING"},
        {"name": "tags", "dataType": "STRING", "singleValueField": False},
    ],
    "metricFieldSpecs": [{"name": "n", "dataType": "LONG"}],
    "dateTimeFieldSpecs": [
        {"name": "ts", "dataType": "LONG", "format": "1:MILLISECONDS:EPOCH", "granularity": "1:MILLISECONDS"}
    ],
}
TABLE = {
    "tableName": "clicks",
    "tableType": "OFFLINE",
    "segmentsConfig": {"timeColumnName": "ts", "replication": "1"},
    "tableIndexConfig": {"invertedIndexColumns": ["country"], "sortedColumn": ["country"]},
}


@pytest.fixture
def configs(tmp_path: Path) -> tuple[Path, Path]:
    schema, table = tmp_path / "schema.json", tmp_path / "table.json"
    schema.write_text(json.dumps(SCHEMA))
    table.write_text(json.dumps(TABLE))
    return schema, table


def run(capsys, *argv: str | Path) -> tuple[int, str, str]:
    code = main([str(a) for a in argv])
    out, err = capsys.readouterr()
    return code, out, err


def test_build_jsonl_reports_bad_rows_and_inspect(tmp_path: Path, configs, capsys) -> None:
    lines = [
        '{"country": "us", "tags": ["a"], "n": 1, "ts": 1000}',
        "this is not json",
        '{"country": "fr", "tags": [], "n": 2, "ts": 3000}',
        "",
        '{"country": "de", "n": "not-a-number", "ts": 2000}',
        '{"country": "fr", "n": 5, "ts": 2500}',
    ]
    source = tmp_path / "rows.jsonl"
    source.write_text("\n".join(lines) + "\n")
    code, out, err = run(capsys, "segment", "build", "--schema", configs[0], "--table", configs[1],
                         "--input", source, "--out", tmp_path / "out", "--archive")
    assert code == 0, err
    segment_path, archive_path = out.strip().splitlines()
    assert Path(segment_path) == tmp_path / "out" / "clicks_1000_3000_0"
    assert "2 bad row(s)" in err and "line 2:" in err and "line 5:" in err
    segment = ImmutableSegment.load(segment_path, verify=True)
    assert segment.total_docs == 3
    assert segment.column("country").to_pylist() == ["fr", "fr", "us"]
    assert segment.metadata.custom == {"badRowCount": 2}

    for target in (segment_path, archive_path):
        code, out, err = run(capsys, "segment", "inspect", target)
        assert code == 0, err
        report = json.loads(out)
        assert (report["segmentName"], report["totalDocs"], report["crc"]) == ("clicks_1000_3000_0", 3, segment.crc)
        assert report["columns"]["country"]["cardinality"] == 2
        assert report["columns"]["country"]["isSorted"] is True
        assert report["columns"]["ts"]["min"] == 1000


def test_build_parquet_casts_to_schema(tmp_path: Path, configs, capsys) -> None:
    source = tmp_path / "rows.parquet"
    pq.write_table(
        pa.table({"country": ["b", "a"], "n": pa.array([1, 2], pa.int32()), "ts": [5, 9], "extra": [0.1, 0.2]}), source
    )
    code, out, err = run(capsys, "segment", "build", "--schema", configs[0], "--table", configs[1],
                         "--input", source, "--out", tmp_path / "out", "--sequence", "4")
    assert code == 0, err
    segment = ImmutableSegment.load(out.strip())
    assert segment.name == "clicks_5_9_4"
    assert segment.to_arrow().to_pylist() == [
        {"country": "a", "tags": None, "n": 2, "ts": 9},
        {"country": "b", "tags": None, "n": 1, "ts": 5},
    ]


def test_pack_and_unpack_commands(tmp_path: Path, configs, capsys) -> None:
    source = tmp_path / "rows.jsonl"
    source.write_text('{"country": "us", "n": 1, "ts": 7}\n')
    _, out, _ = run(capsys, "segment", "build", "--schema", configs[0], "--table", configs[1],
                    "--input", source, "--out", tmp_path / "out", "--name", "manual")
    code, archive, err = run(capsys, "segment", "pack", out.strip(), "--out", tmp_path / "m.tar.gz")
    assert code == 0, err
    code, restored, err = run(capsys, "segment", "unpack", archive.strip(), "--out", tmp_path / "restored")
    assert code == 0, err
    assert ImmutableSegment.load(restored.strip()).name == "manual"


@pytest.mark.parametrize(
    ("make_input", "message"),
    [
        (lambda d: d / "missing.jsonl", "does not exist"),
        (lambda d: (d / "rows.csv").write_text("a,b\n") and d / "rows.csv", "cannot tell the format"),
        (lambda d: (d / "bad.parquet").write_bytes(b"nope") and d / "bad.parquet", "cannot read Parquet"),
    ],
)
def test_build_errors_are_one_line(tmp_path: Path, configs, capsys, make_input, message: str) -> None:
    code, out, err = run(capsys, "segment", "build", "--schema", configs[0], "--table", configs[1],
                         "--input", make_input(tmp_path), "--out", tmp_path / "out")
    assert code == 1
    assert err.count("\n") == 1 and err.startswith("cuvee: error:") and message in err


def test_parquet_column_that_cannot_be_cast(tmp_path: Path, configs, capsys) -> None:
    source = tmp_path / "rows.parquet"
    pq.write_table(pa.table({"country": ["x"], "n": ["not a number"], "ts": [1]}), source)
    code, _, err = run(capsys, "segment", "build", "--schema", configs[0], "--table", configs[1],
                       "--input", source, "--out", tmp_path / "out")
    assert code == 1 and "column 'n'" in err and err.count("\n") == 1


def test_inspect_errors(tmp_path: Path, capsys) -> None:
    code, _, err = run(capsys, "segment", "inspect", tmp_path / "nothing")
    assert code == 1 and "no segment at" in err
    junk = tmp_path / "junk.tar.gz"
    junk.write_bytes(b"\x1f\x8b garbage")
    code, _, err = run(capsys, "segment", "inspect", junk)
    assert code == 1 and "damaged" in err and err.count("\n") == 1
    code, _, err = run(capsys, "segment", "inspect", tmp_path)
    assert code == 1 and "not a segment" in err


def test_build_applies_the_tables_transforms_and_filter(tmp_path: Path, configs, capsys) -> None:
    schema_path, table_path = configs
    table_path.write_text(json.dumps({**TABLE, "ingestionConfig": {
        "transformConfigs": [{"columnName": "country", "transformFunction": "lower(country_code)"}],
        "filterConfig": {"filterFunction": "n < 0"}}}))
    source = tmp_path / "rows.jsonl"
    source.write_text('{"country_code": "US", "n": 1, "ts": 1000}\n{"country_code": "FR", "n": -4, "ts": 2000}\n'
                      '{"country_code": "DE", "n": 3, "ts": 3000}\n')
    code, out, err = run(capsys, "segment", "build", "--schema", schema_path, "--table", table_path,
                         "--input", source, "--out", tmp_path / "out")
    assert code == 0, err
    assert "1 row(s) dropped by the table's filterConfig" in err
    segment = ImmutableSegment.load(out.strip(), verify=True)
    assert segment.column("country").to_pylist() == ["de", "us"] and segment.column("n").to_pylist() == [3, 1]
    assert segment.metadata.custom == {"badRowCount": 0, "filteredRowCount": 1}
