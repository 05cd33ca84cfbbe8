"""Deep store SPI: durable storage for committed segment files.

A deep store is rooted at a URI (``file:///var/cuvee/deepstore``, later ``s3://bucket/prefix``). Callers name
objects by a relative key (``events/events__0__3__20261121T1647Z.tar.zst``); ``uri(key)`` is the full download URI
kept in segment metadata. Every failure raises DeepStoreError (or a subclass), whatever the implementation.
"""

from __future__ import annotations

import abc
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import BinaryIO

from cuvee.errors import CuveeError


class DeepStoreError(CuveeError):
    """The deep store could not do what was asked (unreachable, unwritable, ...). Callers may retry later,
    except for InvalidKeyError, which no retry fixes."""


class ObjectNotFoundError(DeepStoreError):
    pass


class InvalidKeyError(DeepStoreError):
    """A key that is empty, absolute, or walks out of the store (``..``). Retrying will not help."""


class DeepStore(abc.ABC):
    @property
    @abc.abstractmethod
    def root_uri(self) -> str: ...

    @abc.abstractmethod
    def uri(self, key: str) -> str:
        """The full URI of ``key``."""

    @abc.abstractmethod
    def key_of(self, uri: str) -> str:
        """The key of a full URI under this store's root. Raises DeepStoreError for a URI outside it."""

    @abc.abstractmethod
    def put(self, local_path: Path | str, key: str) -> str:
        """Copy a local file to ``key`` atomically (readers never see a partial object); returns its URI."""

    @abc.abstractmethod
    def get(self, key: str, local_path: Path | str) -> Path:
        """Copy ``key`` to a local file (atomically: temp then rename). Raises ObjectNotFoundError."""

    @contextmanager
    def reader(self, key: str) -> Iterator[BinaryIO]:
        """``key`` opened for reading from its start, so a caller that needs only its head (a segment archive's
        metadata) stops early. This fallback copies the object to a temporary file first; stores override it
        with a streaming read."""
        with tempfile.TemporaryDirectory(prefix="cuvee-deepstore-") as tmp:
            with open(self.get(key, Path(tmp) / "object"), "rb") as stream:
                yield stream

    @abc.abstractmethod
    def move(self, src_key: str, dst_key: str) -> str:
        """Move an object, replacing ``dst_key`` if present; returns the new URI. Atomic on a local disk only:
        object stores copy then delete, so a reader may briefly see both."""

    @abc.abstractmethod
    def exists(self, key: str) -> bool: ...

    @abc.abstractmethod
    def delete(self, key: str) -> None:
        """Deleting a missing key is not an error."""

    @abc.abstractmethod
    def list(self, prefix: str = "") -> list[str]:
        """Keys (sorted) under ``prefix``."""
