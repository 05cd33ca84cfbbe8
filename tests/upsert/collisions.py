"""Two different (LONG, LONG) primary keys with the same 64-bit index: a true collision, built by inverting the
fold of ``cuvee.upsert.hashing`` (SplitMix64's finaliser per column, combined), which is invertible by design."""

from __future__ import annotations

_M = 2**64 - 1
_GOLDEN = 0x9E3779B97F4A7C15
_C1, _C2 = 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


def _mix(v: int) -> int:
    x = (v + _GOLDEN) & _M
    x = ((x ^ (x >> 30)) * _C1) & _M
    x = ((x ^ (x >> 27)) * _C2) & _M
    return x ^ (x >> 31)


def _unshift(y: int, s: int) -> int:
    """The x with x ^ (x >> s) == y."""
    x = y
    for _ in range(64 // s + 1):
        x = y ^ (x >> s)
    return x


def _unmix(y: int) -> int:
    x = (_unshift(y, 31) * pow(_C2, -1, 2**64)) & _M
    x = (_unshift(x, 27) * pow(_C1, -1, 2**64)) & _M
    return (_unshift(x, 30) - _GOLDEN) & _M


def _signed(v: int) -> int:
    return v - 2**64 if v >= 2**63 else v


def colliding_longs(first: tuple[int, int] = (1, 2), other_a: int = 3) -> tuple[tuple[int, int], tuple[int, int]]:
    """``first`` and a key ``(other_a, b)`` whose two LONG columns fold to the same 64-bit hash."""
    a1, b1 = first
    inner = ((_mix(a1 & _M) * _GOLDEN) & _M) ^ _mix(b1 & _M)
    b2 = _unmix(inner ^ ((_mix(other_a & _M) * _GOLDEN) & _M))
    assert _mix(((_mix(other_a & _M) * _GOLDEN) & _M) ^ _mix(b2)) == _mix(inner)
    return first, (other_a, _signed(b2))
