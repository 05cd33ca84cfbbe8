"""The S3 deep store (``s3://bucket/prefix``), through fsspec's ``s3fs``.

Where it connects and as whom: the ``[s3]`` table of a role's config (``S3Settings``), else the usual AWS chain
(``AWS_ACCESS_KEY_ID``/``AWS_SECRET_ACCESS_KEY``, profiles, instance roles) and the standard ``AWS_ENDPOINT_URL_S3``
or ``AWS_ENDPOINT_URL`` variables for an S3-compatible service (MinIO, moto, Ceph). Spark executors, which open the
deep store from its URI alone, use the environment.

An S3 PUT is atomic (readers see the whole object or none), so ``put`` writes the final key directly; ``get``
streams to a temp file beside the target and renames it; ``move`` is a server-side copy then a delete (the SPI
says a reader may briefly see both). Listings are never cached: the store's content changes under every role.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO
from urllib.parse import urlparse

from cuvee.deepstore.keys import TEMP_PREFIX, check_key, check_prefix
from cuvee.spi.deepstore import DeepStore, DeepStoreError, InvalidKeyError, ObjectNotFoundError


@dataclass(frozen=True)
class S3Settings:
    """``[s3]`` in a role's config; every key optional (empty: the AWS default chain and environment)."""

    endpoint_url: str = ""  # an S3-compatible service; else AWS_ENDPOINT_URL_S3 / AWS_ENDPOINT_URL, else AWS
    region: str = ""  # else AWS_REGION / AWS_DEFAULT_REGION
    access_key_id: str = field(default="", repr=False)  # with secret_access_key; else the default chain
    secret_access_key: str = field(default="", repr=False)
    session_token: str = field(default="", repr=False)
    connect_timeout_seconds: float = 5.0  # an unreachable S3 fails fast: commits go on without it (peers)
    read_timeout_seconds: float = 60.0
    max_attempts: int = 3  # per request, retries included (botocore's and s3fs's own)

    def __post_init__(self) -> None:
        if self.connect_timeout_seconds <= 0 or self.read_timeout_seconds <= 0 or self.max_attempts < 1:
            raise ValueError("s3.connect_timeout_seconds and s3.read_timeout_seconds must be positive and "
                             "s3.max_attempts at least 1")
        if bool(self.access_key_id) != bool(self.secret_access_key):
            raise ValueError("s3.access_key_id and s3.secret_access_key go together")
        if self.endpoint_url and urlparse(self.endpoint_url).scheme not in ("http", "https"):
            raise ValueError(f"s3.endpoint_url must be an http(s) URL, got {self.endpoint_url!r}")

    def endpoint(self) -> str:
        return self.endpoint_url or os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL") or ""


def _errors() -> tuple[type[BaseException], ...]:
    from botocore.exceptions import BotoCoreError, ClientError

    return OSError, BotoCoreError, ClientError, ValueError


class S3DeepStore(DeepStore):
    """Objects are ``s3://bucket/prefix/<key>``."""

    def __init__(self, bucket: str, prefix: str = "", settings: S3Settings | None = None):
        try:
            import s3fs
        except ImportError:  # pragma: no cover - a dependency of the package
            raise DeepStoreError("the S3 deep store needs the s3fs package (pip install s3fs)") from None
        if not bucket:
            raise DeepStoreError("an S3 deep store URI names a bucket: s3://bucket/prefix")
        self.bucket = bucket
        self.prefix = prefix.strip("/")
        if self.prefix:
            check_prefix(self.prefix)
            if "?" in self.prefix:
                raise DeepStoreError(f"an S3 deep store prefix cannot hold '?': {self.prefix!r}")
        settings = settings or S3Settings()
        client: dict[str, Any] = {}
        if settings.endpoint():
            client["endpoint_url"] = settings.endpoint()
        region = settings.region or os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
        if region:
            client["region_name"] = region
        config = {"connect_timeout": settings.connect_timeout_seconds, "read_timeout": settings.read_timeout_seconds,
                  "retries": {"max_attempts": settings.max_attempts, "mode": "standard"}}
        self._fs = s3fs.S3FileSystem(key=settings.access_key_id or None, secret=settings.secret_access_key or None,
                                     token=settings.session_token or None, client_kwargs=client,
                                     config_kwargs=config, use_listings_cache=False, skip_instance_cache=True)
        self._fs.retries = settings.max_attempts  # s3fs's own retry loop around botocore's (a class default of 5)
        self._errors = _errors()

    @classmethod
    def from_uri(cls, uri: str, settings: S3Settings | None = None) -> S3DeepStore:
        parsed = urlparse(uri)
        if parsed.scheme != "s3" or not parsed.netloc or parsed.query or parsed.fragment:
            raise DeepStoreError(f"{uri!r} is not an S3 deep store URI like s3://bucket/prefix")
        return cls(parsed.netloc, parsed.path, settings)

    @property
    def root_uri(self) -> str:
        return f"s3://{self._root()}"

    def uri(self, key: str) -> str:
        return f"s3://{self._path(key)}"

    def key_of(self, uri: str) -> str:
        root = self.root_uri.rstrip("/") + "/"
        if not isinstance(uri, str) or not uri.startswith(root):
            raise DeepStoreError(f"{uri!r} is not under deep store {self.root_uri}")
        return check_key(uri[len(root):])

    def put(self, local_path: Path | str, key: str) -> str:
        path = self._path(key)
        try:
            self._fs.put_file(str(local_path), path)
        except self._errors as e:
            raise DeepStoreError(f"cannot put {str(local_path)!r} to deep store key {key!r} ({self.uri(key)}): "
                                 f"{_reason(e)}") from e
        return self.uri(key)

    def get(self, key: str, local_path: Path | str) -> Path:
        path = self._path(key)
        local_path = Path(local_path)
        temp = local_path.parent / f"{TEMP_PREFIX}{local_path.name}-{uuid.uuid4().hex}"
        try:
            local_path.parent.mkdir(parents=True, exist_ok=True)
            self._fs.get_file(path, str(temp))  # streamed in blocks: no whole archive in memory
            os.replace(temp, local_path)
        except FileNotFoundError:
            temp.unlink(missing_ok=True)
            raise ObjectNotFoundError(f"deep store key {key!r} does not exist ({self.uri(key)})") from None
        except self._errors as e:
            temp.unlink(missing_ok=True)
            raise DeepStoreError(f"cannot get deep store key {key!r} into {str(local_path)!r}: {_reason(e)}") from e
        return local_path

    @contextmanager
    def reader(self, key: str) -> Iterator[BinaryIO]:
        """Ranged reads in blocks, so reading an object's head does not fetch all of it."""
        path = self._path(key)
        try:
            stream = self._fs.open(path, "rb")
        except FileNotFoundError:
            raise ObjectNotFoundError(f"deep store key {key!r} does not exist ({self.uri(key)})") from None
        except self._errors as e:
            raise DeepStoreError(f"cannot read deep store key {key!r}: {_reason(e)}") from e
        with stream:
            yield stream

    def move(self, src_key: str, dst_key: str) -> str:
        source, target = self._path(src_key), self._path(dst_key)
        try:
            if not self._fs.exists(source):
                raise ObjectNotFoundError(f"deep store key {src_key!r} does not exist ({self.uri(src_key)})")
            self._fs.cp_file(source, target)  # one object, server side (``copy`` would expand glob characters)
            self._fs.rm_file(source)
        except ObjectNotFoundError:
            raise
        except self._errors as e:
            raise DeepStoreError(f"cannot move deep store key {src_key!r} to {dst_key!r}: {_reason(e)}") from e
        return self.uri(dst_key)

    def exists(self, key: str) -> bool:
        path = self._path(key)
        try:  # not ``isfile``: it answers False for every error, and an outage must not read as "not there"
            return self._fs.info(path).get("type") == "file"
        except FileNotFoundError:
            return False
        except self._errors as e:
            raise DeepStoreError(f"cannot check deep store key {key!r}: {_reason(e)}") from e

    def delete(self, key: str) -> None:
        path = self._path(key)
        try:
            self._fs.rm_file(path)
        except FileNotFoundError:
            return
        except self._errors as e:
            raise DeepStoreError(f"cannot delete deep store key {key!r} ({self.uri(key)}): {_reason(e)}") from e

    def list(self, prefix: str = "") -> list[str]:
        check_prefix(prefix)
        directory = prefix.rsplit("/", 1)[0] if "/" in prefix else ""
        root = self._root()
        start = f"{root}/{directory}" if directory else root
        try:
            found = self._fs.find(start)
        except FileNotFoundError:
            return []
        except self._errors as e:
            raise DeepStoreError(f"cannot list deep store {self.root_uri} under {prefix!r}: {_reason(e)}") from e
        keys = []
        for path in found:
            key = path[len(root) + 1:]
            if key.startswith(prefix) and not any(part.startswith(TEMP_PREFIX) for part in key.split("/")):
                keys.append(key)
        return sorted(keys)

    def _root(self) -> str:
        return f"{self.bucket}/{self.prefix}" if self.prefix else self.bucket

    def _path(self, key: str) -> str:
        if "?" in check_key(key):  # s3fs reads "?versionId=" as an object version: another object's key
            raise InvalidKeyError(f"deep store key {key!r}: '?' cannot be part of an S3 key here")
        return f"{self._root()}/{key}"


def _reason(error: BaseException) -> str:
    """One line: what went wrong, without the botocore request dump."""
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}: {text}"[:300]


__all__ = ["S3DeepStore", "S3Settings"]
