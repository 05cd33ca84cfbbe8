"""``/users`` on the controller: principals kept in the metadata store, managed over REST (admins only: the policy's
default for routes it does not name). Bodies as Pinot's user API spells them::

    POST /users  {"username": "dash", "password": "...", "role": "USER", "tables": ["events"], "permissions": ["READ"]}
    PUT  /users/dash  {... the same without username; a missing password or token keeps the stored one}
    GET  /users, GET /users/dash, DELETE /users/dash

Passwords and tokens arrive in the clear (use TLS) and are stored hashed (scrypt, sha256); no answer holds a
secret or a hash. A principal of the config file cannot be created, changed or deleted here (409).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from fastapi import APIRouter, Body

from cuvee.auth.config import AuthConfig, PrincipalConfig
from cuvee.auth.policy import Permission
from cuvee.auth.secrets import hash_password, hash_token
from cuvee.auth.stored import MAX_STORED_PRINCIPALS, PrincipalRecord
from cuvee.cluster.errors import RecordExistsError
from cuvee.cluster.store import ClusterStore
from cuvee.config.names import name_problem
from cuvee.controller.errors import BadRequest, Conflict, NotFound

MIN_PASSWORD = 8
MAX_SECRET = 1024
MIN_TOKEN = 16
MAX_TABLES = 1000
_KEYS = {"username", "password", "token", "role", "tables", "permissions", "component"}  # component: Pinot's, ignored


def router(store: Callable[[], ClusterStore], auth: AuthConfig, refreshed: Callable[[], None]) -> APIRouter:
    """``refreshed``: called after every change, so this controller's own auth layer sees it at once (the other
    roles within ``auth.principals_refresh_seconds``)."""
    api = APIRouter()
    configured = {p.name for p in auth.principals}

    def stored(name: str) -> PrincipalRecord | None:
        found = store().find(PrincipalRecord, store().paths.principal(_check_name(name)))
        return found.record if found is not None else None

    def changeable(name: str) -> None:
        if not auth.enabled:  # anyone may call now: a principal planted now would hold once auth is turned on
            raise Conflict("auth is off: principals can be managed once [auth] is enabled (docs/security.md)")
        if name in configured:
            raise Conflict(f"principal {name!r} is defined in the config file; change it there")

    @api.get("/users")
    def list_users() -> dict[str, Any]:
        out = {name: {**_view(p), "source": "config"} for name, p in ((p.name, p) for p in auth.principals)}
        for name in store().children(store().paths.principals):
            record = stored(name)
            if record is not None and name not in out:
                out[name] = {**_view(record.config), "source": "store"}
        return {"users": out}

    @api.get("/users/{name}")
    def get_user(name: str) -> dict[str, Any]:
        for p in auth.principals:
            if p.name == name:
                return {**_view(p), "source": "config"}
        record = stored(name)
        if record is None:
            raise NotFound(f"principal {name[:128]!r} does not exist")
        return {**_view(record.config), "source": "store"}

    @api.post("/users")
    def create_user(raw: Any = Body(None)) -> dict[str, Any]:
        body = _body(raw)
        name = body.get("username")
        if not isinstance(name, str):
            raise BadRequest("username (a string) is required")
        changeable(_check_name(name))
        if len(store().children(store().paths.principals)) >= MAX_STORED_PRINCIPALS:
            raise BadRequest(f"at most {MAX_STORED_PRINCIPALS} principals can be kept in the metadata store")
        config = _config(name, body, None)
        try:
            store().create(store().paths.principal(name), PrincipalRecord(config))
        except RecordExistsError:
            raise Conflict(f"principal {name!r} exists; PUT /users/{name} changes it") from None
        refreshed()
        return {"status": f"principal {name} created", "user": _view(config)}

    @api.put("/users/{name}")
    def update_user(name: str, raw: Any = Body(None)) -> dict[str, Any]:
        body = _body(raw)
        changeable(_check_name(name))
        if "username" in body and body["username"] != name:
            raise BadRequest("username in the body differs from the one in the path")
        current = stored(name)
        if current is None:
            raise NotFound(f"principal {name!r} does not exist; POST /users creates it")
        config = _config(name, body, current.config)
        store().put(store().paths.principal(name), PrincipalRecord(config))
        refreshed()
        return {"status": f"principal {name} updated", "user": _view(config)}

    @api.delete("/users/{name}")
    def delete_user(name: str) -> dict[str, Any]:
        changeable(_check_name(name))
        if not store().delete(store().paths.principal(name)):
            raise NotFound(f"principal {name[:128]!r} does not exist")
        refreshed()
        return {"status": f"principal {name} deleted"}

    return api


def _check_name(name: str) -> str:
    problem = name_problem("principal", name, 128) if isinstance(name, str) and name else "must be a non-empty string"
    if problem is None and ":" in name:
        problem = "it must not contain ':' (HTTP Basic credentials cannot carry it)"
    if problem is not None:
        raise BadRequest(f"principal name: {problem}")
    return name


def _body(body: Any) -> dict[str, Any]:
    if not isinstance(body, dict):
        raise BadRequest("the body must be a JSON object")
    unknown = sorted(set(body) - _KEYS)
    if unknown:
        raise BadRequest(f"unknown keys {unknown[:10]} (known: {sorted(_KEYS)})")
    return body


def _config(name: str, body: dict[str, Any], current: PrincipalConfig | None) -> PrincipalConfig:
    """The principal ``body`` describes; secrets hashed; what a PUT leaves out kept from ``current``."""
    password = _secret(body, "password", MIN_PASSWORD)
    token = _secret(body, "token", MIN_TOKEN)
    role = body.get("role", "ADMIN" if current is not None and current.admin else "USER")
    if role not in ("ADMIN", "USER"):
        raise BadRequest("role must be ADMIN or USER")
    tables = body.get("tables", list(current.tables) if current is not None else ["*"])
    if (not isinstance(tables, list) or not tables or len(tables) > MAX_TABLES
            or not all(isinstance(t, str) and (t == "*" or name_problem("table", t, 128) is None) for t in tables)):
        raise BadRequest(f"tables must be a list of 1 to {MAX_TABLES} table names (or \"*\")")
    permissions = body.get("permissions", list(current.permissions) if current is not None else ["READ"])
    if (not isinstance(permissions, list) or not permissions
            or not all(isinstance(p, str) and p in Permission.__members__ for p in permissions)):
        raise BadRequest("permissions must be a non-empty list of READ, CREATE, UPDATE, DELETE")
    hashed_password = hash_password(password) if password else (current.password if current else "")
    hashed_token = hash_token(token) if token else (current.token if current else "")
    if not hashed_password and not hashed_token:
        raise BadRequest("a principal needs a password or a token")
    return PrincipalConfig(name=name, password=hashed_password, token=hashed_token, admin=role == "ADMIN",
                           tables=tuple(dict.fromkeys(tables)), permissions=tuple(dict.fromkeys(permissions)))


def _secret(body: dict[str, Any], key: str, minimum: int) -> str:
    value = body.get(key)
    if value is None:
        return ""
    if not isinstance(value, str) or not minimum <= len(value) <= MAX_SECRET:
        raise BadRequest(f"{key} must be a string of {minimum} to {MAX_SECRET} characters")
    return value


def _view(config: PrincipalConfig) -> dict[str, Any]:
    """What an answer may show of a principal: never a secret or its hash."""
    return {"username": config.name, "role": "ADMIN" if config.admin else "USER", "tables": list(config.tables),
            "permissions": list(config.permissions), "password": bool(config.password), "token": bool(config.token)}


__all__ = ["router"]
