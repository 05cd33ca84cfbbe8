"""The decoder contract: message bytes in, one Arrow batch of the schema's columns out.

A decoder never raises on bad input. A message it cannot decode or coerce is returned as a ``BadRecord`` (its
stream offset and a reason an operator can act on) and the rest of the batch is still decoded, so one poison
message neither stops a consumer nor disappears without trace.
"""

from __future__ import annotations

import abc
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from cuvee.errors import CuveeError

# How much of a bad message we keep: enough to recognise it, not enough to blow up memory or a log file.
RAW_PREFIX_BYTES = 200


@dataclass(frozen=True)
class BadRecord:
    """A message that was dropped: where it was in the stream, why, and how it started."""

    offset: int
    reason: str
    raw_prefix: str

    @classmethod
    def of(cls, offset: int, reason: str, raw: bytes) -> BadRecord:
        prefix = bytes(raw[:RAW_PREFIX_BYTES]).decode("utf-8", "backslashreplace")
        return cls(offset=int(offset), reason=reason, raw_prefix=prefix)


@dataclass(frozen=True)
class DecodeResult:
    """The good rows of a batch (in input order) with their offsets, plus the messages that were dropped."""

    batch: pa.RecordBatch
    offsets: np.ndarray
    bad: list[BadRecord]

    @property
    def num_good(self) -> int:
        return self.batch.num_rows


class DecoderUnavailable(CuveeError):
    """The decoder cannot decode these messages now: an outside service it needs (a schema registry) did not
    answer. Nothing was decoded; the consumer keeps its offset and tries the same messages again later, so an
    outage delays rows and never drops them."""


class DecoderSetupError(CuveeError):
    """A decoder cannot be built where the consumer runs (e.g. its descriptor file is missing or unreadable); the
    consuming segment goes to ERROR with this message."""


class Decoder(abc.ABC):
    """Turns a batch of raw stream messages into columns of a schema."""

    @abc.abstractmethod
    def decode(self, values: Sequence[bytes], offsets: Sequence[int]) -> DecodeResult:
        """Decode ``values`` (message payloads) whose stream offsets are ``offsets``; never raises on bad input
        (DecoderUnavailable when a service it needs is down: then none of them was decoded)."""
