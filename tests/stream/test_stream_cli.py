"""`cuvee stream create-topic | produce | offsets`."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import pytest

from cuvee.cli.main import main
from cuvee.spi.stream import partition_for_key
from cuvee.stream.log import LogConsumer


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def offsets(log_dir: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, dict[str, int]]:
    code, out, _err = run(["stream", "offsets", "--log-dir", str(log_dir), "events"], capsys)
    assert code == 0
    return json.loads(out)["partitions"]


def test_create_produce_offsets(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log_dir = tmp_path / "log"
    code, out, _ = run(["stream", "create-topic", "--log-dir", str(log_dir), "events", "--partitions", "3"], capsys)
    assert code == 0 and "events" in out
    assert offsets(log_dir, capsys) == {str(p): {"earliest": 0, "latest": 0} for p in range(3)}

    lines = [json.dumps({"user": f"u{i % 4}", "n": i}) for i in range(20)]
    source = tmp_path / "events.jsonl"
    source.write_text("\n".join(lines[:10]) + "\n\n  \n" + "\n".join(lines[10:]) + "\n")
    code, out, err = run(["stream", "produce", "--log-dir", str(log_dir), "events", "--file", str(source),
                          "--key-field", "user"], capsys)
    assert code == 0, err
    assert "wrote 20 messages" in out and "skipped" not in out

    latest = {int(p): o["latest"] for p, o in offsets(log_dir, capsys).items()}
    assert sum(latest.values()) == 20
    with LogConsumer(log_dir, "events") as consumer:
        for partition in range(3):
            for message in consumer.fetch(partition, 0, max_wait_ms=0).messages:
                assert message.key is not None and partition_for_key(message.key, 3) == partition
                assert json.loads(message.value)["user"] == message.key.decode()


def test_produce_from_stdin_reports_skipped_lines(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    main(["stream", "create-topic", "--log-dir", str(tmp_path), "events", "--partitions", "1"])
    text = '{"id": 7}\nnot json\n{"other": 1}\n[1, 2]\n{"id": null}\n{"id": "x"}\n{"id": 1.5}\n'
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(text.encode())))
    code, out, err = run(["stream", "produce", "--log-dir", str(tmp_path), "events", "--key-field", "id"], capsys)
    assert code == 0
    assert "wrote 3 messages" in out and "4 lines skipped" in out
    for number in (2, 3, 4, 5):
        assert f"line {number}: skipped" in err
    with LogConsumer(tmp_path, "events") as consumer:
        assert [m.key for m in consumer.fetch(0, 0, max_wait_ms=0).messages] == [b"7", b"x", b"1.5"]


def test_without_a_key_field_every_line_is_a_message(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    main(["stream", "create-topic", "--log-dir", str(tmp_path), "events", "--partitions", "2"])
    source = tmp_path / "in.jsonl"
    source.write_text("a\nb\n\nc\n")
    code, out, _ = run(["stream", "produce", "--log-dir", str(tmp_path), "events", "--file", str(source)], capsys)
    assert code == 0 and "wrote 3 messages" in out
    assert sum(o["latest"] for o in offsets(tmp_path, capsys).values()) == 3


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["stream", "offsets", "--log-dir", "{dir}", "missing"], "topic 'missing' does not exist"),
        (["stream", "produce", "--log-dir", "{dir}", "events", "--file", "{dir}/nope.jsonl"], "no such file"),
        (["stream", "create-topic", "--log-dir", "{dir}", "events", "--partitions", "2"], "already exists"),
        (["stream", "create-topic", "--log-dir", "{dir}", "other", "--partitions", "0"], "at least 1 partition"),
        (["stream", "create-topic", "--log-dir", "{dir}", "bad/name", "--partitions", "1"], "invalid topic name"),
    ],
)
def test_mistakes_are_one_line_and_a_non_zero_exit(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                                   argv: list[str], message: str) -> None:
    main(["stream", "create-topic", "--log-dir", str(tmp_path), "events", "--partitions", "1"])
    capsys.readouterr()
    code, out, err = run([a.replace("{dir}", str(tmp_path)) for a in argv], capsys)
    assert code != 0
    assert message in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_the_installed_command(tmp_path: Path) -> None:
    cuvee = Path(sys.executable).parent / "cuvee"
    subprocess.run([cuvee, "stream", "create-topic", "--log-dir", tmp_path, "events", "--partitions", "2"],
                   check=True, capture_output=True, timeout=60)
    produced = subprocess.run([cuvee, "stream", "produce", "--log-dir", tmp_path, "events", "--key-field", "k"],
                              input=b'{"k": "a"}\n{"k": "b"}\n{"x": 1}\n', capture_output=True, timeout=60)
    assert produced.returncode == 0, produced.stderr
    assert b"wrote 2 messages" in produced.stdout and b"line 3: skipped" in produced.stderr
    shown = subprocess.run([cuvee, "stream", "offsets", "--log-dir", tmp_path, "events"],
                           capture_output=True, timeout=60, check=True)
    report = json.loads(shown.stdout)
    assert sum(p["latest"] for p in report["partitions"].values()) == 2
    missing = subprocess.run([cuvee, "stream", "offsets", "--log-dir", tmp_path, "nope"], capture_output=True, timeout=60)
    assert missing.returncode == 1 and missing.stderr.startswith(b"cuvee: error: topic 'nope' does not exist")
