"""Who may call what: principals, permissions, and each role's routes mapped to what they require. Pure.

Default deny: a route no rule names needs an admin. Table names in paths may carry the type suffix
(``events_REALTIME``); permissions are granted on raw names (``events``), or on ``*``.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass

from cuvee.config.table import raw_table_name
from cuvee.protocol.completion_http import COMPLETION_PATHS


class Permission(str, enum.Enum):
    READ = "READ"
    CREATE = "CREATE"
    UPDATE = "UPDATE"
    DELETE = "DELETE"


class Role(str, enum.Enum):
    CONTROLLER = "controller"
    SERVER = "server"
    BROKER = "broker"


@dataclass(frozen=True)
class Principal:
    """Who a request comes from. ``internal``: another role of the cluster (its own credential)."""

    name: str
    admin: bool = False
    internal: bool = False
    tables: frozenset[str] = frozenset({"*"})
    permissions: frozenset[Permission] = frozenset({Permission.READ})

    def may(self, permission: Permission, table: str) -> bool:
        if self.admin:
            return True
        raw = raw_table_name(table)
        return permission in self.permissions and ("*" in self.tables or raw in self.tables)


class Need(str, enum.Enum):
    PUBLIC = "public"  # anyone, no credentials (health probes)
    AUTHENTICATED = "authenticated"  # any known principal (the broker checks a query's table once planned)
    INTERNAL = "internal"  # the cluster's own roles (or an admin)
    TABLE = "table"  # ``permission`` on the table named by the path, query or body
    JOB = "job"  # ``permission`` on the table of the controller job the path names: the route reads the job and
    # checks it (``job_decision``); the layer lets any known principal reach the route
    ADMIN = "admin"


@dataclass(frozen=True)
class Requirement:
    need: Need
    permission: Permission | None = None
    table: str | None = None  # from the path or the query string
    body_key: str | None = None  # the table is named by this key of the JSON body (read by the layer)


@dataclass(frozen=True)
class Decision:
    allowed: bool
    status: int = 200  # 401: who you are is not known; 403: known, not allowed
    reason: str = ""


def decide(requirement: Requirement, principal: Principal | None, table: str | None = None) -> Decision:
    """``principal`` None: no (valid) credentials. ``table``: the table the body names, when the requirement
    says so (else the requirement's own)."""
    if requirement.need is Need.PUBLIC:
        return Decision(True)
    if principal is None:
        return Decision(False, 401, "authentication required")
    need = requirement.need
    if need is Need.AUTHENTICATED or need is Need.JOB or principal.admin:
        return Decision(True)
    if need is Need.INTERNAL:
        return Decision(principal.internal, 403, f"{principal.name} may not call the cluster's internal API")
    if need is Need.TABLE:
        name = table if requirement.body_key else requirement.table
        assert requirement.permission is not None
        if principal.internal and requirement.permission is Permission.READ:
            return Decision(True)
        if not name:  # the route's own validation answers a request that names none; anyone allowed all tables gets it
            allowed = "*" in principal.tables and requirement.permission in principal.permissions
            return Decision(allowed, 403, "the request names no table")
        if principal.may(requirement.permission, name):
            return Decision(True)
        return Decision(False, 403, f"{principal.name} has no {requirement.permission.value} permission on table "
                                    f"{raw_table_name(name)[:128]!r}")
    return Decision(False, 403, f"{principal.name} is not an admin")


def job_decision(principal: Principal | None, table: str, permission: Permission = Permission.READ) -> Decision:
    """A route under ``Need.JOB``, once it has read the job: ``permission`` on the job's table (``table``, with
    or without its type). ``principal`` None: auth is off."""
    if principal is None:
        return Decision(True)
    return decide(Requirement(Need.TABLE, permission, table), principal)


@dataclass(frozen=True)
class _Rule:
    method: str
    pattern: tuple[str, ...]  # path segments; "{x}" matches one segment, a trailing "*" any rest
    need: Need
    permission: Permission | None = None
    table_from: str | None = None  # "{table}" segment name, "?tableName" query key, or "body:<key>"


def _rule(method: str, path: str, need: Need, permission: Permission | None = None,
          table_from: str | None = None) -> _Rule:
    return _Rule(method, tuple(p for p in path.split("/") if p), need, permission, table_from)


JOB_ID = re.compile(r"[0-9a-fA-F-]{1,64}")  # what a controller job's id looks like (a uuid)
_JOB_SEGMENT = "{jobId}"  # matches only a job id: /tables/forceCommitStatus/idealstate is a table's route (a table
# named so), served by the table's handler, so it must meet the table's rule, not the job rule's

P = Permission
_HEALTH = _rule("GET", "/health", Need.PUBLIC)
_RULES: Mapping[Role, tuple[_Rule, ...]] = {
    Role.CONTROLLER: (
        _HEALTH,
        _rule("GET", "/", Need.PUBLIC),  # the console's static files: no data, and the login form must load
        _rule("GET", "/console", Need.PUBLIC),
        _rule("GET", "/console/*", Need.PUBLIC),
        _rule("POST", "/sql", Need.AUTHENTICATED),  # the broker it goes to checks READ with the same credentials
        *(_rule("POST", path, Need.INTERNAL) for path in COMPLETION_PATHS.values()),
        _rule("GET", "/tables", Need.AUTHENTICATED),  # the names the principal may READ (filtered by the route)
        _rule("GET", "/schemas", Need.AUTHENTICATED),
        _rule("GET", "/instances", Need.AUTHENTICATED),
        _rule("GET", "/instances/{id}", Need.AUTHENTICATED),
        _rule("GET", "/deepStore", Need.AUTHENTICATED),
        _rule("GET", "/metrics", Need.AUTHENTICATED),
        _rule("GET", "/schemas/{name}", Need.TABLE, P.READ, "{name}"),
        _rule("POST", "/schemas", Need.TABLE, P.CREATE, "body:schemaName"),
        _rule("PUT", "/schemas/{name}", Need.TABLE, P.UPDATE, "{name}"),
        _rule("DELETE", "/schemas/{name}", Need.TABLE, P.DELETE, "{name}"),
        _rule("POST", "/tables", Need.TABLE, P.CREATE, "body:tableName"),
        # a job's status: READ on the job's table (the route checks it); before the generic rules, which would
        # read the path's literal word as a table name
        _rule("GET", "/tables/forceCommitStatus/{jobId}", Need.JOB, P.READ),
        _rule("GET", "/segments/segmentReloadStatus/{jobId}", Need.JOB, P.READ),
        _rule("GET", "/tables/{table}", Need.TABLE, P.READ, "{table}"),
        _rule("GET", "/tables/{table}/*", Need.TABLE, P.READ, "{table}"),
        _rule("PUT", "/tables/{table}", Need.TABLE, P.UPDATE, "{table}"),
        _rule("DELETE", "/tables/{table}", Need.TABLE, P.DELETE, "{table}"),
        _rule("POST", "/tables/{table}/*", Need.TABLE, P.UPDATE, "{table}"),
        _rule("DELETE", "/tables/{table}/*", Need.TABLE, P.UPDATE, "{table}"),
        _rule("GET", "/segments/{table}", Need.TABLE, P.READ, "{table}"),
        _rule("GET", "/segments/{table}/*", Need.TABLE, P.READ, "{table}"),
        _rule("DELETE", "/segments/{table}", Need.TABLE, P.DELETE, "{table}"),
        _rule("DELETE", "/segments/{table}/*", Need.TABLE, P.DELETE, "{table}"),
        _rule("POST", "/segments/{table}/*", Need.TABLE, P.UPDATE, "{table}"),
        _rule("GET", "/tasks/{table}", Need.TABLE, P.READ, "{table}"),
        _rule("POST", "/tasks/{table}/*", Need.TABLE, P.UPDATE, "{table}"),
        _rule("POST", "/v2/segments", Need.TABLE, P.UPDATE, "?tableName"),
        _rule("POST", "/segments", Need.TABLE, P.UPDATE, "?tableName"),
    ),
    Role.SERVER: (_HEALTH, _rule("GET", "/metrics", Need.AUTHENTICATED),  # else internal: clients ask brokers
                  # what a server serves of a segment (cuvee segment inspect --server): metadata, no rows
                  _rule("GET", "/tables/{table}/segments/{segment}/metadata", Need.TABLE, P.READ, "{table}")),
    Role.BROKER: (
        _HEALTH,
        _rule("POST", "/query/sql", Need.AUTHENTICATED),  # READ on the query's table: checked once it is planned
        _rule("POST", "/query", Need.AUTHENTICATED),
        _rule("GET", "/query/sql", Need.AUTHENTICATED),
        _rule("GET", "/metrics", Need.AUTHENTICATED),
        _rule("GET", "/debug/*", Need.ADMIN),
    ),
}
_FALLBACK = {Role.CONTROLLER: Need.ADMIN, Role.SERVER: Need.INTERNAL, Role.BROKER: Need.ADMIN}


def requirement(role: Role, method: str, path: str, query: Mapping[str, str] | None = None) -> Requirement:
    """What a request to ``role`` needs (default deny: an admin, or on servers the cluster's own roles)."""
    segments = [p for p in path.split("/") if p]
    for rule in _RULES[role]:
        if rule.method != method.upper() and not (rule.method == "GET" and method.upper() == "HEAD"):
            continue
        captured = _match(rule.pattern, segments)
        if captured is None:
            continue
        if rule.need is not Need.TABLE:
            return Requirement(rule.need)
        source = rule.table_from or ""
        if source.startswith("body:"):
            return Requirement(Need.TABLE, rule.permission, body_key=source[5:])
        if source.startswith("?"):
            return Requirement(Need.TABLE, rule.permission, (query or {}).get(source[1:]))
        return Requirement(Need.TABLE, rule.permission, captured.get(source))
    return Requirement(_FALLBACK[role])


def _match(pattern: tuple[str, ...], segments: list[str]) -> dict[str, str] | None:
    captured: dict[str, str] = {}
    for i, part in enumerate(pattern):
        if part == "*":
            return captured if len(segments) > i else None
        if i >= len(segments):
            return None
        if part == _JOB_SEGMENT and not JOB_ID.fullmatch(segments[i]):
            return None
        if part.startswith("{"):
            captured[part] = segments[i]
        elif part != segments[i]:
            return None
    return captured if len(segments) == len(pattern) else None
