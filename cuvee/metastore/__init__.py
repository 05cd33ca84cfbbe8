"""Metadata store implementations, chosen by URI scheme.

``sqlite:///ABS/PATH.db`` is the embedded store (one file shared by the processes of one machine);
``zk://host:port[,host:port]/chroot`` is ZooKeeper. Timings are query parameters in seconds, e.g.
``sqlite:///var/cuvee/meta.db?session_timeout=10&heartbeat_interval=1&poll_interval=0.05``.
"""

from __future__ import annotations

import dataclasses
from typing import TypeVar
from urllib.parse import parse_qsl, urlsplit

from cuvee.errors import UserError
from cuvee.spi.metastore import MetadataStore

__all__ = ["open_metastore"]

O = TypeVar("O")


def open_metastore(uri: str) -> MetadataStore:
    """Open a client session on the store ``uri`` names. Bad URIs raise UserError saying what is wrong."""
    try:
        parts = urlsplit(uri)
    except ValueError as exc:
        raise UserError(f"bad metadata store URI {uri!r}: {exc}") from exc
    if parts.scheme == "sqlite":
        from cuvee.metastore.sqlite import SqliteMetadataStore, SqliteOptions

        if parts.netloc or not parts.path.startswith("/") or parts.path == "/":
            raise UserError(f"bad metadata store URI {uri!r}: use sqlite:///ABSOLUTE/PATH.db (three slashes)")
        return SqliteMetadataStore(parts.path, _options(SqliteOptions, parts.query, uri))
    if parts.scheme == "zk":
        from cuvee.metastore.zookeeper import ZooKeeperMetadataStore, ZooKeeperOptions

        if not parts.netloc or any(not _is_host_port(h) for h in parts.netloc.split(",")):
            raise UserError(f"bad metadata store URI {uri!r}: use zk://host:port[,host:port]/chroot")
        chroot = parts.path.rstrip("/")
        if "//" in parts.path or any(s in (".", "..") for s in chroot.split("/")[1:]):
            raise UserError(f"bad metadata store URI {uri!r}: the chroot {parts.path!r} is not a valid path")
        return ZooKeeperMetadataStore(parts.netloc, chroot, _options(ZooKeeperOptions, parts.query, uri))
    raise UserError(
        f"unknown metadata store URI scheme {parts.scheme!r} in {uri!r}: "
        "use sqlite:///ABSOLUTE/PATH.db or zk://host:port/chroot"
    )


def _is_host_port(item: str) -> bool:
    host, _, port = item.rpartition(":")
    return bool(host) and port.isdigit() and 0 < int(port) < 65536


def _options(cls: type[O], query: str, uri: str) -> O:
    """Build an options dataclass from query parameters: every field is a float number of seconds."""
    known = {f.name for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    values: dict[str, float] = {}
    for name, raw in parse_qsl(query, keep_blank_values=True):
        if name not in known:
            raise UserError(f"unknown option {name!r} in metadata store URI {uri!r}; known: {', '.join(sorted(known))}")
        try:
            values[name] = float(raw)
        except ValueError:
            raise UserError(f"option {name}={raw!r} in metadata store URI {uri!r} is not a number of seconds") from None
    return cls(**values)
