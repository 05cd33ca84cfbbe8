"""Primary keys as the key map holds them: per row, in row order, equal keys equally; whole keys under NONE (bytes
kept wherever the index is a hash), Pinot's bytes and Pinot's 128-bit hashes under MD5 and MURMUR3."""

from __future__ import annotations

import hashlib
import struct

import numpy as np
import pyarrow as pa
import pytest

from cuvee.config import Schema
from cuvee.config.schema import DataType
from cuvee.upsert.hashing import KeyColumn, KeyHasher
from tests.upsert.collisions import colliding_longs

STRING = KeyColumn("k", DataType.STRING, "null")


def long_column(name: str) -> KeyColumn:
    return KeyColumn(name, DataType.LONG, -(2**63))


def digest(keys, row: int) -> bytes:  # type: ignore[no-untyped-def]
    """A 128-bit key's hash as Pinot's bytes (Guava's ``asBytes()``)."""
    return struct.pack("<QQ", int(keys.index[row]), keys.exact[row].as_py())


def test_pinot_worked_example_md5_and_murmur3() -> None:
    """Pinot's HashUtilsTest: "hello world" hashes to these with MD5 and MURMUR3 (one STRING column's bytes are
    its UTF-8 bytes)."""
    rows = pa.table({"k": ["hello world", "other"]})
    md5 = KeyHasher([STRING], "MD5").keys(rows)
    murmur = KeyHasher([STRING], "MURMUR3").keys(rows)
    assert digest(md5, 0).hex() == "5eb63bbbe01eeed093cb22bb8f5acdc3"
    assert digest(murmur, 0).hex() == "0e617feb46603f53b163eb607d4697ab"
    assert md5.exact is not None and md5.exact.type == pa.uint64() and md5.nbytes == 2 * 16  # two words a key
    assert digest(md5, 1) == hashlib.md5(b"other").digest()


def test_composite_and_fixed_width_keys_hash_pinots_bytes() -> None:
    """PrimaryKey.asBytes: one column alone big-endian (INT 4 bytes, LONG 8, ...); several in turn, a string after
    its length (4 bytes, big-endian); a null as the column's default null value."""
    columns = [KeyColumn("id", DataType.LONG, -(2**63)), KeyColumn("user", DataType.STRING, "null"),
               KeyColumn("n", DataType.INT, -(2**31))]
    rows = pa.table({"id": pa.array([7, None], pa.int64()), "user": ["é", None], "n": pa.array([-1, 3], pa.int32())})
    expected = [struct.pack(">qi", 7, 2) + "é".encode() + struct.pack(">i", -1),
                struct.pack(">qi", -(2**63), 4) + b"null" + struct.pack(">i", 3)]
    assert KeyHasher(columns).key_bytes(rows).to_pylist() == expected
    md5 = KeyHasher(columns, "MD5").keys(rows)
    assert [digest(md5, i) for i in range(2)] == [hashlib.md5(b).digest() for b in expected]
    none = KeyHasher(columns).keys(rows)
    assert none.exact is not None and none.exact.to_pylist() == expected  # NONE keeps the whole key

    millis = 1_700_000_000_000
    singles = {DataType.INT: (pa.array([5], pa.int32()), struct.pack(">i", 5)),
               DataType.TIMESTAMP: (pa.array([millis], pa.timestamp("ms")), struct.pack(">q", millis)),
               DataType.DOUBLE: (pa.array([1.5]), struct.pack(">d", 1.5)),
               DataType.FLOAT: (pa.array([1.5], pa.float32()), struct.pack(">f", 1.5)),
               DataType.BOOLEAN: (pa.array([True]), struct.pack(">i", 1))}
    for kind, (values, raw) in singles.items():
        column = KeyColumn("v", kind, False if kind is DataType.BOOLEAN else 0)
        assert KeyHasher([column]).key_bytes(pa.table({"v": values})).to_pylist() == [raw], kind
        assert digest(KeyHasher([column], "MD5").keys(pa.table({"v": values})), 0) == hashlib.md5(raw).digest()


def test_equal_keys_hash_equally_in_row_order() -> None:
    n = 300_000
    ids = np.arange(n) % 1000
    rows = pa.table({"user": pa.array(np.char.add("u", ids.astype(str))), "region": pa.array(ids % 3)})
    hasher = KeyHasher([KeyColumn("user", DataType.STRING, "null"), KeyColumn("region", DataType.LONG, 0)])
    keys = hasher.keys(rows)
    assert len(keys) == n and keys.index.dtype == np.uint64 and len(np.unique(keys.index)) == 1000
    assert (keys.index[:1000] == keys.index[1000:2000]).all() and (keys.index[:1000] == keys.index[-1000:]).all()
    ids_seen = keys.group_ids()
    assert len(np.unique(ids_seen)) == 1000 and (ids_seen[:1000] == ids_seen[-1000:]).all()


def test_integer_keys_are_their_own_index_whatever_the_arrays_width() -> None:
    ids = np.arange(-50_000, 50_000, dtype=np.int64)
    hasher = KeyHasher([long_column("id")])
    assert hasher.exact_by_index
    keys = hasher.keys(pa.table({"id": ids}))
    assert keys.exact is None and len(np.unique(keys.index)) == len(ids)  # a bijection: no two ids collide
    assert keys.nbytes == 8 * len(ids)
    narrow = pa.table({"id": pa.array(ids[:100], pa.int32())})
    assert (hasher.keys(narrow).index == keys.index[:100]).all()
    encoded = pa.table({"id": pa.array(ids[:100]).dictionary_encode()})
    assert (hasher.keys(encoded).index == keys.index[:100]).all()
    with_null = hasher.keys(pa.table({"id": pa.array([1, None, 1, None, -(2**63)])})).index
    assert with_null[0] == with_null[2] and with_null[1] == with_null[3] and with_null[0] != with_null[1]
    assert with_null[1] == with_null[4]  # a null is the default null value, as Pinot stores it
    two_ints = KeyHasher([KeyColumn("a", DataType.INT, 0), KeyColumn("b", DataType.INT, 0)])
    assert two_ints.exact_by_index  # 8 bytes: still its own index
    pairs = two_ints.keys(pa.table({"a": pa.array([1, 2, 1], pa.int32()), "b": pa.array([2, 1, 2], pa.int32())}))
    assert pairs.exact is None and pairs.index[0] == pairs.index[2] != pairs.index[1]


def test_two_keys_with_one_64_bit_hash_keep_their_bytes_apart() -> None:
    (a1, b1), (a2, b2) = colliding_longs()
    hasher = KeyHasher([long_column("a"), long_column("b")])
    assert not hasher.exact_by_index
    keys = hasher.keys(pa.table({"a": [a1, a2, a1], "b": [b1, b2, b1]}))
    assert keys.index[0] == keys.index[1]  # a true 64-bit collision ...
    assert keys.exact is not None and keys.exact.to_pylist() == [struct.pack(">qq", a1, b1),
                                                                 struct.pack(">qq", a2, b2),
                                                                 struct.pack(">qq", a1, b1)]
    assert keys.group_ids().tolist() in ([0, 1, 0], [1, 0, 1])  # ... and still two keys
    assert keys[np.array([1])].isin(keys[np.array([0])]).tolist() == [False]


def test_a_schema_gives_its_key_columns_and_bad_input_is_refused() -> None:
    schema = Schema.from_json({"schemaName": "s", "primaryKeyColumns": ["b", "a"],
                               "dimensionFieldSpecs": [{"name": "a", "dataType": "INT", "defaultNullValue": 7},
                                                       {"name": "b", "dataType": "STRING"}]})
    hasher = KeyHasher.of(schema, "MURMUR3")
    assert [(c.name, c.data_type, c.null_value) for c in hasher.columns] == [("b", DataType.STRING, "null"),
                                                                              ("a", DataType.INT, 7)]
    rows = pa.table({"a": pa.array([None], pa.int32()), "b": ["x"]})
    assert hasher.key_bytes(rows).to_pylist() == [struct.pack(">i", 1) + b"x" + struct.pack(">i", 7)]
    assert len(hasher.keys(rows.slice(0, 0))) == 0
    with pytest.raises(ValueError):
        KeyHasher([])
    with pytest.raises(ValueError, match="UUID"):
        KeyHasher([STRING], "UUID")
