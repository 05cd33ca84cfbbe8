"""Deep store implementations, chosen by the scheme of the store's root URI.

Openers are imported lazily so a backend (S3 through fsspec's s3fs) costs nothing until used.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING
from urllib.parse import urlparse

from cuvee.errors import UserError
from cuvee.spi.deepstore import DeepStore

if TYPE_CHECKING:
    from cuvee.deepstore.s3 import S3Settings


def _open_local(uri: str, s3: S3Settings | None) -> DeepStore:
    from cuvee.deepstore.local import LocalDeepStore

    return LocalDeepStore.from_uri(uri)


def _open_s3(uri: str, s3: S3Settings | None) -> DeepStore:
    from cuvee.deepstore.s3 import S3DeepStore

    return S3DeepStore.from_uri(uri, s3)


_OPENERS: dict[str, Callable[[str, "S3Settings | None"], DeepStore]] = {"file": _open_local, "s3": _open_s3}


def supported_schemes() -> list[str]:
    return sorted(_OPENERS)


def open_deepstore(uri: str, s3: S3Settings | None = None) -> DeepStore:
    """The deep store rooted at ``uri`` (``file:///var/cuvee/deepstore``, ``s3://bucket/prefix``); a bad URI is a
    UserError. ``s3``: where and as whom to reach S3 (default: the AWS environment)."""
    scheme = urlparse(uri).scheme if isinstance(uri, str) else ""
    opener = _OPENERS.get(scheme.lower())
    if opener is None:
        supported = ", ".join(f"{s}://" for s in supported_schemes())
        hint = " (give an absolute path as file:///abs/dir)" if not scheme else ""
        raise UserError(
            f"deep store URI {uri!r}: unsupported scheme {scheme or 'none'!r}; supported: {supported}{hint}"
        )
    parsed = urlparse(uri)
    if scheme == "file" and (parsed.netloc not in ("", "localhost") or not parsed.path.startswith("/")):
        raise UserError(f"deep store URI {uri!r} must name an absolute directory, like file:///var/cuvee/deepstore")
    if scheme == "s3" and (not parsed.netloc or parsed.query or parsed.fragment):
        raise UserError(f"deep store URI {uri!r} must name a bucket and optionally a prefix: s3://bucket/prefix")
    return opener(uri, s3)
