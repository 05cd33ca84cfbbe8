"""The ``[auth]`` table of every role's config file (the same on every role of a cluster).

    [auth]
    enabled = true
    internal_token = "..."          # what the roles present to each other: a long random secret, the same everywhere

    [[auth.principals]]
    name = "admin"
    password = "scrypt$16384$8$1$..." # cuvee auth hash-password
    admin = true

    [[auth.principals]]
    name = "dashboards"
    token = "sha256$..."             # cuvee auth new-token (the client sends the token itself as a Bearer)
    tables = ["events"]
    permissions = ["READ"]

Principals can also be kept in the metadata store, managed over REST (``/users`` on the controller, admins only;
``cuvee.auth.stored``); a config principal wins over a stored one of the same name.

Off by default (the embedded quickstart); a role listening on a non-loopback address without it logs a warning.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from cuvee.auth.policy import Permission, Principal
from cuvee.auth.secrets import SecretFormatError, check_format

MIN_INTERNAL_TOKEN = 16


@dataclass(frozen=True)
class PrincipalConfig:
    name: str = ""
    password: str = field(default="", repr=False)  # a scrypt hash (never the password itself)
    token: str = field(default="", repr=False)  # a sha256 hash of a bearer token
    admin: bool = False
    tables: tuple[str, ...] = ("*",)  # raw table names, or "*"
    permissions: tuple[str, ...] = ("READ",)  # READ, CREATE, UPDATE, DELETE

    def __post_init__(self) -> None:
        if not self.name or len(self.name) > 128 or ":" in self.name:
            raise ValueError("a principal needs a name of 1 to 128 characters without ':'")
        if not self.password and not self.token:
            raise ValueError(f"principal {self.name!r} needs a password or a token hash")
        for kind, secret in (("password", self.password), ("token", self.token)):
            if secret:
                try:
                    check_format(secret, kind)
                except SecretFormatError as exc:
                    raise ValueError(f"principal {self.name!r}: {exc}") from None
        unknown = [p for p in self.permissions if p not in Permission.__members__]
        if unknown:
            raise ValueError(f"principal {self.name!r}: unknown permissions {unknown} (READ, CREATE, UPDATE, DELETE)")

    def principal(self) -> Principal:
        return Principal(self.name, admin=self.admin, tables=frozenset(self.tables),
                         permissions=frozenset(Permission(p) for p in self.permissions))


@dataclass(frozen=True)
class AuthConfig:
    enabled: bool = False
    internal_token: str = field(default="", repr=False)
    principals: tuple[PrincipalConfig, ...] = ()
    principals_refresh_seconds: float = 5.0  # how often a role re-reads the principals kept in the metadata store

    def __post_init__(self) -> None:
        if not self.principals_refresh_seconds > 0:
            raise ValueError("auth.principals_refresh_seconds must be positive")
        if not self.enabled:
            return
        token = self.internal_token
        if len(token) < MIN_INTERNAL_TOKEN or not (token.isascii() and token.isprintable()) or " " in token:
            raise ValueError(f"auth.internal_token must be at least {MIN_INTERNAL_TOKEN} printable ASCII characters "
                             "without spaces (the same secret on every role: cuvee auth new-token prints one)")
        names = [p.name for p in self.principals]
        if len(set(names)) != len(names):
            raise ValueError("auth.principals: names must be unique")
