"""Deep store implementations, chosen by the scheme of the store's root URI.

Openers are imported lazily so an optional backend (S3 through fsspec, a later issue) costs nothing until used
and can say exactly what to install when it is missing.
"""

from __future__ import annotations

from collections.abc import Callable
from urllib.parse import urlparse

from cuvee.errors import UserError
from cuvee.spi.deepstore import DeepStore


def _open_local(uri: str) -> DeepStore:
    from cuvee.deepstore.local import LocalDeepStore

    return LocalDeepStore.from_uri(uri)


# scheme -> opener; S3 ("s3") slots in here.
_OPENERS: dict[str, Callable[[str], DeepStore]] = {"file": _open_local}


def supported_schemes() -> list[str]:
    return sorted(_OPENERS)


def open_deepstore(uri: str) -> DeepStore:
    """The deep store rooted at ``uri`` (``file:///var/cuvee/deepstore``); a bad URI is a UserError."""
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
    return opener(uri)
