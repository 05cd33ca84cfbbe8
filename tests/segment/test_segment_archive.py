"""The one-file archive: deterministic bytes, round trip, and refusal of damaged or unsafe archives."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

import pyarrow as pa
import pytest

from cuvee.config.table import IndexingConfig
from cuvee.segment.archive import pack, unpack
from cuvee.segment.errors import CorruptSegmentError
from cuvee.segment.immutable import ImmutableSegment
from tests.segment.test_immutable_builder import FULL_INDEXING, build


def _members(archive: Path) -> list[tuple[tarfile.TarInfo, bytes]]:
    with tarfile.open(fileobj=io.BytesIO(_tar_bytes(archive)), mode="r") as tar:
        return [(m, tar.extractfile(m).read() if m.isfile() else b"") for m in tar.getmembers()]


def _tar_bytes(archive: Path) -> bytes:
    raw = archive.read_bytes()
    assert raw[:4] == b"\x28\xb5\x2f\xfd", "packed with zstd"
    return pa.CompressedInputStream(pa.BufferReader(raw), "zstd").read()


def _rewrite_archive(source: Path, target: Path, change) -> None:
    """Copy an archive member by member into a gzip-compressed tar (the older format, which unpack still
    reads), letting ``change(info, data)`` alter or add members."""
    with tarfile.open(target, "w:gz") as tar_out:
        for member, data in _members(source):
            for info, payload in change(member, data):
                tar_out.addfile(info, io.BytesIO(payload) if info.isfile() else None)


def test_round_trip_and_deterministic_bytes(tmp_path: Path) -> None:
    a = build(tmp_path / "a", creation_time_ms=5)
    b = build(tmp_path / "b", creation_time_ms=5)
    archive_a, archive_b = pack(a.path), pack(b.path, tmp_path / "b.tar.zst")
    assert archive_a == a.path.with_name("events_0.tar.zst")
    assert archive_a.read_bytes() == archive_b.read_bytes()
    restored = ImmutableSegment.load(unpack(archive_a, tmp_path / "restored"), verify=True)
    assert restored.path == tmp_path / "restored" / "events_0"
    assert restored.crc == a.crc
    assert restored.to_arrow().drop_columns(["clicks"]).equals(a.to_arrow().drop_columns(["clicks"]))
    with pytest.raises(CorruptSegmentError, match="already exists"):
        unpack(archive_a, tmp_path / "restored")
    assert unpack(archive_a, tmp_path / "restored", overwrite=True) == restored.path
    members = [m for m, _ in _members(archive_a)]
    assert [m.name for m in members][0] == "events_0"
    # the metadata first (a reader wanting only it stops there), then the files in name order
    assert [m.name for m in members[1:]] == sorted((m.name for m in members[1:]),
                                                   key=lambda n: (not n.endswith("/metadata.json"), n))
    assert members[1].name == "events_0/metadata.json"
    assert {(m.mtime, m.uid, m.gid, m.uname) for m in members} == {(0, 0, 0, "")}


def test_damaged_archive_is_rejected_and_leaves_nothing(tmp_path: Path) -> None:
    archive = pack(build(tmp_path / "a", FULL_INDEXING).path)
    raw = bytearray(archive.read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    broken = tmp_path / "broken.tar.gz"
    broken.write_bytes(bytes(raw))
    dest = tmp_path / "dest"
    with pytest.raises(CorruptSegmentError):
        unpack(broken, dest)
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(archive.read_bytes()[: len(raw) // 3])
    with pytest.raises(CorruptSegmentError, match="damaged"):
        unpack(truncated, dest)
    assert list(dest.iterdir()) == []


def test_tampered_data_fails_crc(tmp_path: Path) -> None:
    archive = pack(build(tmp_path / "a", IndexingConfig()).path)

    def tamper(info: tarfile.TarInfo, data: bytes):
        if info.name.endswith("country.dict.arrow"):
            data = data.replace(b"defrus", b"defrux")
        info.size = len(data)
        yield info, data

    tampered = tmp_path / "tampered.tar.gz"
    _rewrite_archive(archive, tampered, tamper)
    with pytest.raises(CorruptSegmentError, match="CRC"):
        unpack(tampered, tmp_path / "dest")
    assert list((tmp_path / "dest").iterdir()) == []


@pytest.mark.parametrize("evil_name", ["../escape.txt", "/abs/escape.txt", "events_0/../../escape.txt"])
def test_path_traversal_is_refused(tmp_path: Path, evil_name: str) -> None:
    archive = pack(build(tmp_path / "a", IndexingConfig()).path)

    def add_evil(info: tarfile.TarInfo, data: bytes):
        yield info, data
        if info.isdir():
            evil = tarfile.TarInfo(evil_name)
            evil.size = 4
            yield evil, b"evil"

    evil_archive = tmp_path / "evil.tar.gz"
    _rewrite_archive(archive, evil_archive, add_evil)
    with pytest.raises(CorruptSegmentError, match="unsafe member path"):
        unpack(evil_archive, tmp_path / "dest" / "inner")
    assert not (tmp_path / "dest" / "escape.txt").exists()
    assert not (tmp_path / "escape.txt").exists()


def test_links_and_second_top_level_dir_are_refused(tmp_path: Path) -> None:
    archive = pack(build(tmp_path / "a", IndexingConfig()).path)

    def add_link(info: tarfile.TarInfo, data: bytes):
        yield info, data
        if info.isdir():
            link = tarfile.TarInfo("events_0/passwd")
            link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
            yield link, b""

    linked = tmp_path / "link.tar.gz"
    _rewrite_archive(archive, linked, add_link)
    with pytest.raises(CorruptSegmentError, match="only regular files"):
        unpack(linked, tmp_path / "dest")

    def add_other_dir(info: tarfile.TarInfo, data: bytes):
        yield info, data
        if info.isdir():
            other = tarfile.TarInfo("other/file")
            other.size = 1
            yield other, b"x"

    two_dirs = tmp_path / "two.tar.gz"
    _rewrite_archive(archive, two_dirs, add_other_dir)
    with pytest.raises(CorruptSegmentError, match="more than one top-level"):
        unpack(two_dirs, tmp_path / "dest")


def test_gzip_archives_still_unpack(tmp_path: Path) -> None:
    """Archives packed before zstd (and hand-made ``.tar.gz`` tar pushes) load unchanged."""
    segment = build(tmp_path / "a", IndexingConfig())
    legacy = tmp_path / "legacy.tar.gz"
    _rewrite_archive(pack(segment.path), legacy, lambda info, data: [(info, data)])
    assert gzip.decompress(legacy.read_bytes())[:8]
    restored = ImmutableSegment.load(unpack(legacy, tmp_path / "restored"), verify=True)
    assert restored.crc == segment.crc


def test_unknown_compression_is_refused(tmp_path: Path) -> None:
    plain = tmp_path / "plain.tar"
    plain.write_bytes(_tar_bytes(pack(build(tmp_path / "a", IndexingConfig()).path)))
    with pytest.raises(CorruptSegmentError, match="neither zstd nor gzip"):
        unpack(plain, tmp_path / "dest")
    assert list((tmp_path / "dest").iterdir()) == []


def _long_name_archive(path: Path, length: int) -> Path:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo("events_0/" + "a" * length)
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    with pa.CompressedOutputStream(str(path), "zstd") as out:
        out.write(raw.getvalue())
    return path


def test_an_upload_cannot_balloon_through_tar_headers(tmp_path: Path) -> None:
    """A tiny archive whose GNU long name is huge: tarfile reads names whole, so an upload's stream is capped, and
    no error message echoes a long name back."""
    bomb = _long_name_archive(tmp_path / "bomb.tar.zst", 30_000_000)
    assert bomb.stat().st_size < 10_000
    with pytest.raises(CorruptSegmentError, match="more than allowed") as refused:
        unpack(bomb, tmp_path / "dest", max_bytes=1 << 20)
    assert len(str(refused.value)) < 1_000
    long_name = _long_name_archive(tmp_path / "long.tar.zst", 5_000)
    for cap in (None, 1 << 20):
        with pytest.raises(CorruptSegmentError, match=r"name too long") as refused:
            unpack(long_name, tmp_path / "dest2", max_bytes=cap)
        assert len(str(refused.value)) < 1_000


class _OneWay(io.RawIOBase):
    """A stream that cannot seek back (an object store's), counting the bytes read from it."""

    def __init__(self, data: bytes):
        self._data, self.read_bytes = data, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buffer) -> int:
        chunk = self._data[self.read_bytes:self.read_bytes + min(len(buffer), 4096)]
        buffer[:len(chunk)] = chunk
        self.read_bytes += len(chunk)
        return len(chunk)


def test_an_archives_metadata_is_read_from_a_one_way_stream_without_unpacking(tmp_path: Path) -> None:
    from cuvee.segment.archive import read_archive_metadata

    segment = build(tmp_path / "a", creation_time_ms=5)
    archive = pack(segment.path)
    for source in (archive, tmp_path / "old.tar.gz"):
        if source.suffix == ".gz":
            _rewrite_archive(archive, source, lambda info, data: [(info, data)])
        stream = _OneWay(source.read_bytes())
        metadata = read_archive_metadata(stream, str(source))
        assert (metadata.segment_name, metadata.crc, metadata.total_docs) == ("events_0", segment.crc,
                                                                              segment.total_docs)
    assert not any(p.name.startswith(".unpack") for p in tmp_path.iterdir())  # nothing written

    def without_metadata(info: tarfile.TarInfo, data: bytes):
        return [] if info.name.endswith("metadata.json") else [(info, data)]

    _rewrite_archive(archive, tmp_path / "none.tar.gz", without_metadata)
    with pytest.raises(CorruptSegmentError, match="no metadata.json"):
        read_archive_metadata(_OneWay((tmp_path / "none.tar.gz").read_bytes()), "none")
    with pytest.raises(CorruptSegmentError, match="neither zstd nor gzip"):
        read_archive_metadata(_OneWay(b"not an archive at all"), "junk")
    with pytest.raises(CorruptSegmentError, match="damaged"):
        read_archive_metadata(_OneWay(archive.read_bytes()[:200]), "cut")
