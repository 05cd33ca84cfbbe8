"""Pinot's hash functions DuckDB lacks (``HashFunctions``: SHA-512, SHA3-224, MurmurHash2/3, FNV, Adler-32,
CRC-32), as vectorised Python functions every Cuvee DuckDB database registers (``register``).

Each takes a batch of byte strings as one Arrow array. The Murmur and FNV hashes run the algorithm over the whole
batch at once with numpy's wrapping unsigned arithmetic: one step per 4-, 8- or 16-byte block (per byte for FNV),
over the values still that long, so a batch costs about (its longest value / block size) numpy operations. The
digests (hashlib, zlib) have no vector form and loop over the values in C-backed calls.

Results are Java's: an ``int``/``long`` is the two's-complement reading of the hash's low bits, as Guava's
``HashCode.asInt()``/``asLong()`` and Pinot's own ``MurmurHashFunctions`` answer. Pinot's quirks are kept:
``sha224`` is SHA3-224 (``DigestUtils.sha3_224Hex``), ``murmurHash3X64Bit64`` answers the 32-bit hash widened
(it calls ``murmurHash3X64Bit32``), and the ``murmurHash3X64…`` family is Infinispan's variant of MurmurHash3
(blocks mixed with constants that change per block, tail bytes sign-extended), not Appleby's x64_128.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import zlib
from collections.abc import Callable
from dataclasses import dataclass

import duckdb
import numpy as np
import pyarrow as pa

log = logging.getLogger(__name__)

_U32 = np.uint32
_U64 = np.uint64


@dataclass(frozen=True)
class _Bytes:
    """A batch of byte strings as numpy views: ``data`` (all bytes, padded by 16 zeros so a block read past a
    value's end stays in bounds), each value's ``start`` and ``length``, and which are NULL."""

    data: np.ndarray
    start: np.ndarray
    length: np.ndarray
    null: np.ndarray

    @staticmethod
    def of(values: pa.Array | pa.ChunkedArray) -> _Bytes:
        if isinstance(values, pa.ChunkedArray):
            values = values.combine_chunks()
        if not pa.types.is_large_binary(values.type):
            values = values.cast(pa.large_binary())
        count = len(values)
        offsets = np.frombuffer(values.buffers()[1], dtype=np.int64)[values.offset:values.offset + count + 1] \
            if count else np.zeros(1, np.int64)
        raw = values.buffers()[2]
        data = np.frombuffer(raw, dtype=np.uint8)[:offsets[-1]] if raw is not None else np.zeros(0, np.uint8)
        null = np.asarray(values.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        return _Bytes(np.concatenate([data, np.zeros(16, np.uint8)]), offsets[:-1].copy(), np.diff(offsets), null)

    def byte(self, position: np.ndarray, width: type = _U32) -> np.ndarray:
        return self.data[position].astype(width)

    def word(self, position: np.ndarray, size: int, width: type) -> np.ndarray:
        """Little-endian unsigned words of ``size`` bytes starting at each position."""
        word = np.zeros(len(position), width)
        for i in range(size):
            word |= self.byte(position + i, width) << width(8 * i)
        return word


def _rotl32(x: np.ndarray, r: int) -> np.ndarray:
    return (x << _U32(r)) | (x >> _U32(32 - r))


def _rotl64(x: np.ndarray, r: int) -> np.ndarray:
    return (x << _U64(r)) | (x >> _U64(64 - r))


def _seeds(seed: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """The seeds as Java ints (NULL as 0; a NULL seed makes the answer NULL anyway)."""
    return np.asarray(seed.fill_null(0).to_numpy(zero_copy_only=False), dtype=np.int64)


def _murmur2_32(b: _Bytes) -> np.ndarray:
    """Kafka's ``murmurHash2`` (seed 0x9747b28c), which Pinot's ``murmurHash2`` copies."""
    m = _U32(0x5BD1E995)
    h = _U32(0x9747B28C) ^ b.length.astype(_U32)
    blocks = b.length // 4
    for j in range(int(blocks.max(initial=0))):
        live = blocks > j
        k = b.word(b.start[live] + 4 * j, 4, _U32) * m
        k ^= k >> _U32(24)
        h[live] = (h[live] * m) ^ (k * m)
    tail, rest = b.start + blocks * 4, b.length % 4
    for size in (3, 2, 1):
        at = rest >= size
        h[at] ^= b.byte(tail[at] + size - 1) << _U32(8 * (size - 1))
    h[rest > 0] *= m
    h ^= h >> _U32(13)
    h *= m
    h ^= h >> _U32(15)
    return h


def _murmur2_64(b: _Bytes, seed: np.ndarray) -> np.ndarray:
    """MurmurHash64A as Pinot's ``murmurHash2Bit64`` writes it: ``h = (seed & 0xffffffff) ^ (length * m)``."""
    m = _U64(0xC6A4A7935BD1E995)
    h = (seed.astype(np.int64) & 0xFFFFFFFF).astype(_U64) ^ (b.length.astype(_U64) * m)
    blocks = b.length // 8
    for j in range(int(blocks.max(initial=0))):
        live = blocks > j
        k = b.word(b.start[live] + 8 * j, 8, _U64) * m
        k ^= k >> _U64(47)
        h[live] = (h[live] ^ (k * m)) * m
    tail, rest = b.start + blocks * 8, b.length % 8
    for size in range(7, 0, -1):
        at = rest >= size
        h[at] ^= b.byte(tail[at] + size - 1, _U64) << _U64(8 * (size - 1))
    h[rest > 0] *= m
    h ^= h >> _U64(47)
    h *= m
    h ^= h >> _U64(47)
    return h


def _fmix32(h: np.ndarray) -> np.ndarray:
    h ^= h >> _U32(16)
    h *= _U32(0x85EBCA6B)
    h ^= h >> _U32(13)
    h *= _U32(0xC2B2AE35)
    h ^= h >> _U32(16)
    return h


def _fmix64(k: np.ndarray) -> np.ndarray:
    k ^= k >> _U64(33)
    k *= _U64(0xFF51AFD7ED558CCD)
    k ^= k >> _U64(33)
    k *= _U64(0xC4CEB9FE1A85EC53)
    k ^= k >> _U64(33)
    return k


def _murmur3_32(b: _Bytes, seed: np.ndarray) -> np.ndarray:
    """MurmurHash3_x86_32 (Guava's ``murmur3_32_fixed(seed)``)."""
    c1, c2 = _U32(0xCC9E2D51), _U32(0x1B873593)

    def mix(k: np.ndarray) -> np.ndarray:
        return _rotl32(k * c1, 15) * c2

    h = (seed & 0xFFFFFFFF).astype(_U32)
    blocks = b.length // 4
    for j in range(int(blocks.max(initial=0))):
        live = blocks > j
        h[live] = _rotl32(h[live] ^ mix(b.word(b.start[live] + 4 * j, 4, _U32)), 13) * _U32(5) + _U32(0xE6546B64)
    tail, rest = b.start + blocks * 4, b.length % 4
    k = np.zeros(len(h), _U32)
    for size in (3, 2, 1):
        at = rest >= size
        k[at] ^= b.byte(tail[at] + size - 1) << _U32(8 * (size - 1))
    h[rest > 0] ^= mix(k[rest > 0])
    return _fmix32(h ^ b.length.astype(_U32))


def _murmur3_128(b: _Bytes, seed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """MurmurHash3_x64_128 (Guava's ``murmur3_128(seed)``, whose int seed is sign-extended): (h1, h2)."""
    c1, c2 = _U64(0x87C37B91114253D5), _U64(0x4CF5AD432745937F)
    h1 = seed.astype(np.int64).astype(_U64)
    h2 = h1.copy()
    blocks = b.length // 16
    for j in range(int(blocks.max(initial=0))):
        live = blocks > j
        at = b.start[live] + 16 * j
        k1, k2 = b.word(at, 8, _U64), b.word(at + 8, 8, _U64)
        a = _rotl64(h1[live] ^ (_rotl64(k1 * c1, 31) * c2), 27) + h2[live]
        a = a * _U64(5) + _U64(0x52DCE729)
        z = _rotl64(h2[live] ^ (_rotl64(k2 * c2, 33) * c1), 31) + a
        h1[live], h2[live] = a, z * _U64(5) + _U64(0x38495AB5)
    tail, rest = b.start + blocks * 16, b.length % 16
    k1, k2 = np.zeros(len(h1), _U64), np.zeros(len(h1), _U64)
    for size in range(15, 0, -1):
        at = rest >= size
        shifted = b.byte(tail[at] + size - 1, _U64) << _U64(8 * ((size - 1) % 8))
        if size > 8:
            k2[at] ^= shifted
        else:
            k1[at] ^= shifted
    upper, lower = rest > 8, rest > 0
    h2[upper] ^= _rotl64(k2[upper] * c2, 33) * c1
    h1[lower] ^= _rotl64(k1[lower] * c1, 31) * c2
    length = b.length.astype(_U64)
    h1 ^= length
    h2 ^= length
    h1 += h2
    h2 += h1
    h1, h2 = _fmix64(h1), _fmix64(h2)
    h1 += h2
    h2 += h1
    return h1, h2


def murmur3_128(values: pa.Array | pa.ChunkedArray, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """MurmurHash3_x64_128 of each value (no nulls; Guava's ``murmur3_128(seed)``) as its two 64-bit words (h1,
    h2): Guava's ``asBytes()`` is h1 then h2, each little-endian."""
    b = _Bytes.of(values)
    return _murmur3_128(b, np.full(len(b.length), seed, np.int64))


def _infinispan_128(b: _Bytes, seed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Infinispan's MurmurHash3 'x64' variant (Pinot's ``murmurHash3X64…``): the mixing constants change after every
    block, and tail bytes are Java's signed bytes, sign-extended before they are shifted into place."""
    signed_seed = seed.astype(np.int64).astype(_U64)
    h1 = _U64(0x9368E53C2F6AF274) ^ signed_seed
    h2 = _U64(0x586DCD208F7CD3FD) ^ signed_seed
    c1 = np.full(len(h1), 0x87C37B91114253D5, _U64)
    c2 = np.full(len(h1), 0x4CF5AD432745937F, _U64)

    def bmix(live: np.ndarray, k1: np.ndarray, k2: np.ndarray) -> None:
        a, z, d1, d2 = h1[live], h2[live], c1[live], c2[live]
        a ^= _rotl64(k1 * d1, 23) * d2
        a += z
        z = _rotl64(z, 41)
        z ^= _rotl64(k2 * d2, 23) * d1
        z += a
        h1[live], h2[live] = a * _U64(3) + _U64(0x52DCE729), z * _U64(3) + _U64(0x38495AB5)
        c1[live], c2[live] = d1 * _U64(5) + _U64(0x7B7D159C), d2 * _U64(5) + _U64(0x6BCE6396)

    blocks = b.length // 16
    for j in range(int(blocks.max(initial=0))):
        live = blocks > j
        at = b.start[live] + 16 * j
        bmix(live, b.word(at, 8, _U64), b.word(at + 8, 8, _U64))
    tail, rest = b.start + blocks * 16, b.length % 16
    k1, k2 = np.zeros(len(h1), _U64), np.zeros(len(h1), _U64)
    for size in range(15, 0, -1):
        at = rest >= size
        signed = b.data[tail[at] + size - 1].view(np.int8).astype(np.int64).astype(_U64)
        shifted = signed << _U64(8 * ((size - 1) % 8))
        if size > 8:
            k2[at] ^= shifted
        else:
            k1[at] ^= shifted
    lower = rest > 0
    bmix(lower, k1[lower], k2[lower])
    h2 ^= b.length.astype(_U64)
    h1 += h2
    h2 += h1
    h1, h2 = _fmix64(h1), _fmix64(h2)
    h1 += h2
    h2 += h1
    return h1, h2


def _fnv(b: _Bytes, bits: int, alternate: bool) -> np.ndarray:
    """FNV-1 (multiply, then xor each byte) or FNV-1a (xor, then multiply), 32 or 64 bits."""
    width = _U32 if bits == 32 else _U64
    prime = width(0x01000193 if bits == 32 else 0x100000001B3)
    h = np.full(len(b.length), 0x811C9DC5 if bits == 32 else 0xCBF29CE484222325, width)
    for j in range(int(b.length.max(initial=0))):
        live = b.length > j
        value = b.byte(b.start[live] + j, width)
        h[live] = (h[live] ^ value) * prime if alternate else (h[live] * prime) ^ value
    return h


def _signed(values: np.ndarray, kind: pa.DataType) -> np.ndarray:
    """Unsigned hash words as Java's int/long (two's complement)."""
    return values.view(np.int32 if kind == pa.int32() else np.int64)


def _answer(b: _Bytes, values: np.ndarray | list, kind: pa.DataType, extra_null: np.ndarray | None = None) -> pa.Array:
    mask = b.null if extra_null is None else (b.null | extra_null)
    if isinstance(values, np.ndarray) and kind in (pa.int32(), pa.int64()):
        return pa.array(_signed(values, kind), kind, mask=mask)
    return pa.array([None if m else v for v, m in zip(values, mask)], kind)


def _words_to_bytes(order: str, *words: np.ndarray) -> list[bytes]:
    """Each row's 64-bit words, in turn, as bytes in ``order`` ('>' big-endian, '<' little-endian)."""
    joined = np.empty((len(words[0]), len(words)), dtype=f"{order}u8")
    for i, word in enumerate(words):
        joined[:, i] = word
    return [row.tobytes() for row in joined]


Kernel = Callable[..., pa.Array]


def _seeded(kernel: Callable[[_Bytes, np.ndarray], np.ndarray | list], kind: pa.DataType) -> Kernel:
    """A kernel over (bytes, seed): DuckDB calls it with both arrays; a NULL seed makes the answer NULL."""
    def run(values: pa.Array, seed: pa.Array) -> pa.Array:
        b = _Bytes.of(values)
        null = np.asarray(seed.is_null().to_numpy(zero_copy_only=False), dtype=bool)
        return _answer(b, kernel(b, _seeds(seed)), kind, null)
    return run


def _unseeded(kernel: Callable[[_Bytes], np.ndarray | list], kind: pa.DataType) -> Kernel:
    def run(values: pa.Array) -> pa.Array:
        b = _Bytes.of(values)
        return _answer(b, kernel(b), kind)
    return run


def _digest(hash_of: Callable[[bytes], object], kind: pa.DataType) -> Kernel:
    def run(values: pa.Array) -> pa.Array:
        return pa.array([None if v is None else hash_of(v) for v in values.to_pylist()], kind)
    return run


def _checksum(hash_of: Callable[[bytes], int]) -> Kernel:
    """zlib's unsigned checksums as Java ints (Guava's ``asInt()``)."""
    return _digest(lambda v: int(np.array(hash_of(v), _U32).view(np.int32)), pa.int32())


# name -> (kernel, DuckDB parameter types, DuckDB result type)
FUNCTIONS: dict[str, tuple[Kernel, list[str], str]] = {
    "cuvee_sha512": (_digest(lambda v: hashlib.sha512(v).hexdigest(), pa.string()), ["BLOB"], "VARCHAR"),
    "cuvee_sha3_224": (_digest(lambda v: hashlib.sha3_224(v).hexdigest(), pa.string()), ["BLOB"], "VARCHAR"),
    "cuvee_adler32": (_checksum(zlib.adler32), ["BLOB"], "INTEGER"),
    "cuvee_crc32": (_checksum(zlib.crc32), ["BLOB"], "INTEGER"),
    "cuvee_murmur2_32": (_unseeded(_murmur2_32, pa.int32()), ["BLOB"], "INTEGER"),
    "cuvee_murmur2_64": (_seeded(_murmur2_64, pa.int64()), ["BLOB", "INTEGER"], "BIGINT"),
    "cuvee_murmur3_32": (_seeded(_murmur3_32, pa.int32()), ["BLOB", "INTEGER"], "INTEGER"),
    "cuvee_murmur3_64": (_seeded(lambda b, s: _murmur3_128(b, s)[0], pa.int64()), ["BLOB", "INTEGER"], "BIGINT"),
    "cuvee_murmur3_128": (_seeded(lambda b, s: _words_to_bytes("<", *_murmur3_128(b, s)), pa.binary()),
                          ["BLOB", "INTEGER"], "BLOB"),
    "cuvee_murmur3_x64_32": (_seeded(lambda b, s: (_infinispan_128(b, s)[0] >> _U64(32)).astype(_U32), pa.int32()),
                             ["BLOB", "INTEGER"], "INTEGER"),
    "cuvee_murmur3_x64_128": (_seeded(lambda b, s: _words_to_bytes(">", *_infinispan_128(b, s)), pa.binary()),
                              ["BLOB", "INTEGER"], "BLOB"),
    "cuvee_fnv1_32": (_unseeded(lambda b: _fnv(b, 32, False), pa.int32()), ["BLOB"], "INTEGER"),
    "cuvee_fnv1a_32": (_unseeded(lambda b: _fnv(b, 32, True), pa.int32()), ["BLOB"], "INTEGER"),
    "cuvee_fnv1_64": (_unseeded(lambda b: _fnv(b, 64, False), pa.int64()), ["BLOB"], "BIGINT"),
    "cuvee_fnv1a_64": (_unseeded(lambda b: _fnv(b, 64, True), pa.int64()), ["BLOB"], "BIGINT"),
}


def guarded(name: str, kernel: Kernel) -> Kernel:
    """``kernel`` whose unexpected failure (a bug) reaches the client as a short message, the role's log having the
    Python error: DuckDB would otherwise pass the Python exception's text on. DuckDB reads the kernel's arity
    through ``functools.wraps``."""
    @functools.wraps(kernel)
    def run(*arrays: pa.Array) -> pa.Array:
        try:
            return kernel(*arrays)
        except Exception:
            log.exception("the function %s failed", name)
            raise RuntimeError(f"{name.removeprefix('cuvee_')} failed on an internal error (the log has the "
                               f"details)") from None
    return run


def register(database: duckdb.DuckDBPyConnection) -> None:
    """Make the functions callable in ``database`` (before its configuration is locked); its cursors see them."""
    for name, (kernel, parameters, result) in FUNCTIONS.items():
        database.create_function(name, guarded(name, kernel), [duckdb.sqltype(p) for p in parameters],
                                 duckdb.sqltype(result),
                                 type="arrow", null_handling="special", side_effects=False)
