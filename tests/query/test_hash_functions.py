"""Pinot's hash functions (``HashFunctions``) through the planner and DuckDB, judged against independent
computations: hashlib and zlib for the digests, and for the Murmur and FNV hashes (no library in the venv has them)
plain-Python implementations written here from the reference algorithms, one value at a time, plus the published
test vectors of Kafka's murmur2 and of MurmurHash3 and confluent-kafka's murmur2 partitioner."""

from __future__ import annotations

import hashlib
import random
import zlib

import duckdb
import pyarrow as pa
import pytest
from confluent_kafka import murmur2 as kafka_partition

from cuvee.query import QueryError, QueryErrorCode
from cuvee.query.execute import merge_partials, run_server_step, user_message
from cuvee.query.hash_functions import guarded
from cuvee.query.parse import TableInfo
from cuvee.query.rewrite import plan_sql

M32, M64 = 2 ** 32 - 1, 2 ** 64 - 1
_RANDOM = random.Random(20240611)
# every tail length of every block size, twice over, then longer values; a few with bytes >= 0x80
BLOBS = [bytes(_RANDOM.randrange(256) for _ in range(n)) for n in [*range(40), *range(40), 64, 65, 100, 131]]
SEEDS = [_RANDOM.choice([0, 1, 42, -1, 2 ** 31 - 1, -(2 ** 31), _RANDOM.randrange(-(2 ** 31), 2 ** 31)])
         for _ in BLOBS]
TEXTS = ["", "a", "hello", "héllo wörld", "日本語テキスト", "The quick brown fox jumps over the lazy dog"]
TABLE = TableInfo("t", ("id", "b", "seed", "s"), number_columns=frozenset({"id", "seed"}))
ROWS = pa.table({"id": list(range(len(BLOBS))), "b": pa.array(BLOBS, pa.binary()),
                 "seed": pa.array(SEEDS, pa.int32()),
                 "s": [TEXTS[i % len(TEXTS)] for i in range(len(BLOBS))]})


def column(expression: str) -> list:
    sql = f"SELECT {expression}, id FROM t ORDER BY id LIMIT {len(BLOBS)}"
    plan = plan_sql(sql, lambda _: TABLE)
    return merge_partials(plan, [run_server_step(plan, [ROWS])], ROWS.schema).column(0).to_pylist()


def signed(value: int, bits: int) -> int:
    return value - (1 << bits) if value >= 1 << (bits - 1) else value


def rotl(x: int, r: int, bits: int) -> int:
    return ((x << r) | (x >> (bits - r))) & ((1 << bits) - 1)


def fmix64(k: int) -> int:
    k ^= k >> 33
    k = (k * 0xFF51AFD7ED558CCD) & M64
    k ^= k >> 33
    k = (k * 0xC4CEB9FE1A85EC53) & M64
    return k ^ (k >> 33)


def murmur2(data: bytes) -> int:
    """Kafka's murmur2: seed 0x9747b28c, m 0x5bd1e995, r 24."""
    m, h = 0x5BD1E995, 0x9747B28C ^ len(data)
    for i in range(0, len(data) // 4 * 4, 4):
        k = (int.from_bytes(data[i:i + 4], "little") * m) & M32
        k = ((k ^ (k >> 24)) * m) & M32
        h = ((h * m) & M32) ^ k
    tail = data[len(data) // 4 * 4:]
    if tail:
        h ^= int.from_bytes(tail, "little")
        h = (h * m) & M32
    h = ((h ^ (h >> 13)) * m) & M32
    return signed(h ^ (h >> 15), 32)


def murmur64a(data: bytes, seed: int) -> int:
    """MurmurHash64A with Pinot's start ``(seed & 0xffffffff) ^ (length * m)``."""
    m, h = 0xC6A4A7935BD1E995, ((seed & M32) ^ (len(data) * 0xC6A4A7935BD1E995)) & M64
    for i in range(0, len(data) // 8 * 8, 8):
        k = (int.from_bytes(data[i:i + 8], "little") * m) & M64
        k = ((k ^ (k >> 47)) * m) & M64
        h = ((h ^ k) * m) & M64
    tail = data[len(data) // 8 * 8:]
    if tail:
        h = ((h ^ int.from_bytes(tail, "little")) * m) & M64
    h = ((h ^ (h >> 47)) * m) & M64
    return signed(h ^ (h >> 47), 64)


def murmur3_32(data: bytes, seed: int) -> int:
    """Appleby's MurmurHash3_x86_32 (Guava's murmur3_32_fixed)."""
    c1, c2, h = 0xCC9E2D51, 0x1B873593, seed & M32

    def mix(k: int) -> int:
        return (rotl((k * c1) & M32, 15, 32) * c2) & M32

    for i in range(0, len(data) // 4 * 4, 4):
        h = (rotl(h ^ mix(int.from_bytes(data[i:i + 4], "little")), 13, 32) * 5 + 0xE6546B64) & M32
    tail = data[len(data) // 4 * 4:]
    if tail:
        h ^= mix(int.from_bytes(tail, "little"))
    h ^= len(data)
    for shift, factor in ((16, 0x85EBCA6B), (13, 0xC2B2AE35)):
        h = ((h ^ (h >> shift)) * factor) & M32
    return signed(h ^ (h >> 16), 32)


def murmur3_128(data: bytes, seed: int) -> bytes:
    """Appleby's MurmurHash3_x64_128 with Guava's sign-extended int seed, as Guava's asBytes (little-endian)."""
    c1, c2 = 0x87C37B91114253D5, 0x4CF5AD432745937F
    h1 = h2 = seed & M64
    n = len(data) // 16 * 16
    for i in range(0, n, 16):
        k1, k2 = int.from_bytes(data[i:i + 8], "little"), int.from_bytes(data[i + 8:i + 16], "little")
        h1 ^= (rotl((k1 * c1) & M64, 31, 64) * c2) & M64
        h1 = (((rotl(h1, 27, 64) + h2) & M64) * 5 + 0x52DCE729) & M64
        h2 ^= (rotl((k2 * c2) & M64, 33, 64) * c1) & M64
        h2 = (((rotl(h2, 31, 64) + h1) & M64) * 5 + 0x38495AB5) & M64
    tail = data[n:]
    if len(tail) > 8:
        h2 ^= (rotl((int.from_bytes(tail[8:], "little") * c2) & M64, 33, 64) * c1) & M64
    if tail:
        h1 ^= (rotl((int.from_bytes(tail[:8], "little") * c1) & M64, 31, 64) * c2) & M64
    h1, h2 = h1 ^ len(data), h2 ^ len(data)
    h1 = (h1 + h2) & M64
    h2 = (h2 + h1) & M64
    h1, h2 = fmix64(h1), fmix64(h2)
    h1 = (h1 + h2) & M64
    h2 = (h2 + h1) & M64
    return h1.to_bytes(8, "little") + h2.to_bytes(8, "little")


def infinispan_128(data: bytes, seed: int) -> tuple[int, int]:
    """Infinispan's MurmurHash3 variant (Pinot's murmurHash3X64…): constants that change per block, tail bytes as
    Java's sign-extended bytes."""
    h1, h2 = 0x9368E53C2F6AF274 ^ (seed & M64), 0x586DCD208F7CD3FD ^ (seed & M64)
    c1, c2 = 0x87C37B91114253D5, 0x4CF5AD432745937F

    def bmix(k1: int, k2: int) -> None:
        nonlocal h1, h2, c1, c2
        h1 ^= (rotl((k1 * c1) & M64, 23, 64) * c2) & M64
        h1 = (h1 + h2) & M64
        h2 = rotl(h2, 41, 64) ^ ((rotl((k2 * c2) & M64, 23, 64) * c1) & M64)
        h2 = (h2 + h1) & M64
        h1, h2 = (h1 * 3 + 0x52DCE729) & M64, (h2 * 3 + 0x38495AB5) & M64
        c1, c2 = (c1 * 5 + 0x7B7D159C) & M64, (c2 * 5 + 0x6BCE6396) & M64

    n = len(data) // 16 * 16
    for i in range(0, n, 16):
        bmix(int.from_bytes(data[i:i + 8], "little"), int.from_bytes(data[i + 8:i + 16], "little"))
    tail = data[n:]
    if tail:
        k1 = k2 = 0
        for i, byte in enumerate(tail):
            extended = (byte - 256 if byte >= 128 else byte) & M64
            if i >= 8:
                k2 ^= (extended << (8 * (i - 8))) & M64
            else:
                k1 ^= (extended << (8 * i)) & M64
        bmix(k1, k2)
    h2 ^= len(data)
    h1 = (h1 + h2) & M64
    h2 = (h2 + h1) & M64
    h1, h2 = fmix64(h1), fmix64(h2)
    h1 = (h1 + h2) & M64
    return h1, (h2 + h1) & M64


def fnv(data: bytes, bits: int, alternate: bool) -> int:
    mask = (1 << bits) - 1
    h, prime = (0x811C9DC5, 0x01000193) if bits == 32 else (0xCBF29CE484222325, 0x100000001B3)
    for byte in data:
        h = ((h ^ byte) * prime) & mask if alternate else ((h * prime) & mask) ^ byte
    return signed(h, bits)


def test_the_digests_answer_hex_and_sha224_is_pinots_sha3_224() -> None:
    assert column("sha512(b)") == [hashlib.sha512(b).hexdigest() for b in BLOBS]
    assert column("sha224(b)") == [hashlib.sha3_224(b).hexdigest() for b in BLOBS]  # DigestUtils.sha3_224Hex
    assert column("md5_raw(b)") == [hashlib.md5(b).digest() for b in BLOBS]
    assert column("sha512(toUtf8(s))") == [hashlib.sha512(s.encode()).hexdigest() for s in ROWS["s"].to_pylist()]
    assert column("adler32(b)") == [signed(zlib.adler32(b), 32) for b in BLOBS]  # Guava's asInt(): signed
    assert column("crc32(b)") == [signed(zlib.crc32(b), 32) for b in BLOBS]


def test_murmur2_is_kafkas_and_its_64_bit_form_takes_a_seed() -> None:
    # Kafka's own vectors (UtilsTest.testMurmur2), which Pinot's copy of the code answers too
    vectors = {b"21": -973932308, b"foobar": -790332482, b"a-little-bit-long-string": -985981536,
               b"a-little-bit-longer-string": -1486304829, b"abc": 479470107,
               b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971}
    assert [murmur2(key) for key in vectors] == list(vectors.values())
    hashed = column("murmurHash2(b)")
    assert hashed == [murmur2(b) for b in BLOBS] == column("murmur2(b)")
    # confluent-kafka's partitioner: the hash's low 31 bits modulo the partition count
    assert [(h & 0x7FFFFFFF) % 1_000_003 for h in hashed] == [kafka_partition(b, 1_000_003) for b in BLOBS]
    assert column("murmurHash2UTF8(s)") == [murmur2(s.encode()) for s in ROWS["s"].to_pylist()]
    assert column("murmurHash2Bit64(b, seed)") == [murmur64a(b, s) for b, s in zip(BLOBS, SEEDS)]
    assert column("murmurHash2Bit64(b)") == [murmur64a(b, 0xE17A1465) for b in BLOBS]  # Pinot's default seed


def test_murmur3_is_guavas_x86_32_and_x64_128() -> None:
    assert murmur3_32(b"hello", 0) == 0x248BFA47 and murmur3_128(  # MurmurHash3's published vectors
        b"The quick brown fox jumps over the lazy dog", 0).hex() == "6c1b07bc7bbc4be347939ac4a93c437a"
    assert column("murmurHash3Bit32(b, seed)") == [murmur3_32(b, s) for b, s in zip(BLOBS, SEEDS)]
    assert column("murmur3_32(b)") == [murmur3_32(b, 0) for b in BLOBS]
    wide = [murmur3_128(b, s) for b, s in zip(BLOBS, SEEDS)]
    assert column("murmurHash3Bit128(b, seed)") == wide
    assert column("murmurHash3Bit64(b, seed)") == [signed(int.from_bytes(w[:8], "little"), 64) for w in wide]


def test_murmur3_x64_is_infinispans_variant_with_pinots_64_bit_quirk() -> None:
    pairs = [infinispan_128(b, s) for b, s in zip(BLOBS, SEEDS)]
    thirty_two = [signed(h1 >> 32, 32) for h1, _ in pairs]
    assert column("murmurHash3X64Bit32(b, seed)") == thirty_two
    assert column("murmurHash3X64Bit64(b, seed)") == thirty_two  # Pinot's Bit64 calls its Bit32
    assert column("murmurHash3X64Bit128(b, seed)") == [h1.to_bytes(8, "big") + h2.to_bytes(8, "big")
                                                      for h1, h2 in pairs]


@pytest.mark.parametrize(("names", "bits", "alternate"), [
    (("fnv1Hash32", "fnv1_32"), 32, False), (("fnv1aHash32", "fnv1a_32"), 32, True),
    (("fnv1Hash64", "fnv1_64"), 64, False), (("fnv1aHash64", "fnv1a_64"), 64, True)])
def test_fnv_hashes_of_bytes_and_of_utf8(names: tuple[str, str], bits: int, alternate: bool) -> None:
    expected = [fnv(b, bits, alternate) for b in BLOBS]
    assert column(f"{names[0]}(b)") == expected == column(f"{names[1]}(b)")
    assert column(f"{names[0]}UTF8(s)") == [fnv(s.encode(), bits, alternate) for s in ROWS["s"].to_pylist()]


def test_result_types_are_pinots_and_null_in_is_null_out() -> None:
    plan = plan_sql("SELECT murmurHash2(b), murmurHash2Bit64(b), murmurHash3Bit32(b, 1), murmurHash3Bit64(b, 1), "
                    "murmurHash3Bit128(b, 1), murmurHash3X64Bit64(b, 1), fnv1a_64(b), crc32(b), sha512(b) FROM t",
                    lambda _: TABLE)
    answer = merge_partials(plan, [run_server_step(plan, [ROWS.slice(0, 3)])], ROWS.schema)
    assert answer.schema.types == [pa.int32(), pa.int64(), pa.int32(), pa.int64(), pa.binary(), pa.int64(),
                                   pa.int64(), pa.int32(), pa.string()]
    assert column("murmurHash3Bit32(CASE WHEN id > 0 THEN b END, CASE WHEN id > 1 THEN seed END)")[:3] == \
        [None, None, murmur3_32(BLOBS[2], SEEDS[2])]


@pytest.mark.parametrize(("sql", "words"), [
    ("SELECT md2(b) FROM t", "MD2 is not supported"),
    ("SELECT cityHash64(b) FROM t", "CITYHASH64 is not supported"),
    ("SELECT murmurHash3Bit32(b) FROM t", "MURMURHASH3BIT32 takes 2 argument(s), got 1"),
])
def test_unsupported_hashes_and_wrong_counts_are_150_in_words(sql: str, words: str) -> None:
    with pytest.raises(QueryError) as caught:
        plan_sql(sql, lambda _: TABLE)
    assert caught.value.code is QueryErrorCode.SQL_PARSING and words in caught.value.message


def test_a_kernels_unexpected_failure_reaches_the_client_without_python_text() -> None:
    """A bug in a kernel: DuckDB would hand the Python exception's text on; the guard says what failed, briefly."""
    def broken(values: pa.Array) -> pa.Array:
        raise ValueError("secret internals at 0x7f")

    con = duckdb.connect()
    con.create_function("cuvee_broken", guarded("cuvee_broken", broken), [duckdb.sqltype("BLOB")],
                        duckdb.sqltype("INTEGER"), type="arrow", null_handling="special")
    with pytest.raises(duckdb.Error) as caught:
        con.sql("SELECT cuvee_broken(CAST('a' AS BLOB))").fetchall()
    message = user_message(str(caught.value).splitlines()[0])
    assert "secret" not in message and "ValueError" not in message
    assert message == "broken failed on an internal error (the log has the details)"
