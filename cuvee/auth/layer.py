"""The one authentication and authorisation layer, an ASGI middleware every role's HTTP service runs its app in.

Credentials: ``Authorization: Basic`` (a principal's name and password), or ``Bearer`` (a principal's token, or
the cluster's internal token, which identifies the roles themselves). What a route needs comes from
``cuvee.auth.policy``; the principal is left in the ASGI scope (``principal_of``) for the checks a route can
only make later (the broker checks READ on a query's table once it is planned). Refusals are Pinot-style JSON:
401 (who you are is not known; with ``WWW-Authenticate``) or 403 (known, not allowed). Successful password
checks are cached for a few minutes (scrypt is slow on purpose), keyed by a hash of the header.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import hmac
import threading
import time
from collections import OrderedDict
from concurrent.futures import ThreadPoolExecutor
from collections.abc import Callable
from typing import Any
from urllib.parse import parse_qsl

import orjson

from cuvee.auth.config import AuthConfig, PrincipalConfig
from cuvee.auth.policy import Decision, Principal, Role, decide, requirement
from cuvee.auth.secrets import hash_password, verify
from cuvee.auth.stored import StoredPrincipals

INTERNAL = Principal("cuvee-internal", internal=True)
_SCOPE_KEY = "cuvee.principal"
_CACHE_SECONDS = 300.0
_FAILURE_SECONDS = 5.0  # a wrong header is not checked again for this long (scrypt is slow on purpose)
_CACHE_SIZE = 1024
_CHECKS_AT_ONCE = 4  # password checks running at once per role (a pool of their own: the event loop and the
# default thread pool, which queries use, never wait on one)
_MAX_WAITING = 64  # checks queued beyond this are answered 503
_MAX_HEADER = 4096


def principal_of(scope: Any) -> Principal | None:
    """The principal the layer authenticated for this request (None when auth is off or the route is public)."""
    return scope.get(_SCOPE_KEY) if isinstance(scope, dict) else None


def internal_headers(config: AuthConfig | None) -> dict[str, str]:
    """What one role sends another (empty when auth is off)."""
    if config is None or not config.enabled:
        return {}
    return {"Authorization": f"Bearer {config.internal_token}"}


class Authenticator:
    """Credentials -> principal. Thread-safe."""

    def __init__(self, config: AuthConfig, clock: Callable[[], float] = time.monotonic,
                 stored: StoredPrincipals | None = None):
        """``stored``: the principals kept in the metadata store, beside the config's (which win on a name)."""
        self._internal = config.internal_token.encode()
        self._by_name = {p.name: p for p in config.principals}
        self._stored = stored
        self._clock = clock
        self._lock = threading.Lock()
        # Entries carry the stored principals' generation: a change there (a deleted principal, a new password)
        # makes every entry of an older generation a miss.
        self._cache: OrderedDict[bytes, tuple[Principal | None, float, int]] = OrderedDict()
        self._failures: OrderedDict[bytes, tuple[float, int]] = OrderedDict()  # apart: a flood never evicts good ones
        self.pool = ThreadPoolExecutor(_CHECKS_AT_ONCE, thread_name_prefix="auth")
        self.waiting = 0  # checks queued on the pool (the layer refuses past _MAX_WAITING)
        self._decoy = hash_password("decoy", n=2**14)  # checked for unknown names: their answer takes as long

    def cached(self, header: str) -> tuple[bool, Principal | None]:
        """(known, principal): whether ``header`` was checked lately, and who it was (None: refused)."""
        key = hashlib.sha256(header.encode()).digest()
        now = self._clock()
        generation = self._generation()
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[1] > now and hit[2] == generation:
                self._cache.move_to_end(key)
                return True, hit[0]
            failed = self._failures.get(key)
            if failed is not None and failed[0] > now and failed[1] == generation:
                return True, None
        return False, None

    def _generation(self) -> int:
        return self._stored.generation if self._stored is not None else 0

    def _principal_config(self, name: str) -> PrincipalConfig | None:
        found = self._by_name.get(name)
        if found is None and self._stored is not None:
            found = self._stored.get(name)
        return found

    def _all_configs(self) -> list[PrincipalConfig]:
        stored = self._stored.all() if self._stored is not None else ()
        return [*self._by_name.values(), *(p for p in stored if p.name not in self._by_name)]

    def authenticate(self, header: str | None) -> Principal | None:
        """The principal of an ``Authorization`` header value; None if missing or not valid. Blocking (scrypt):
        the layer calls it on a worker thread."""
        if not header or len(header) > _MAX_HEADER:
            return None
        known, principal = self.cached(header)
        if known:
            return principal
        scheme, _, value = header.partition(" ")
        generation = self._generation()  # read before the check: a change during it makes the entry a miss
        found = self._check(scheme.lower(), value.strip())
        key = hashlib.sha256(header.encode()).digest()
        with self._lock:
            if found is not None:
                self._cache[key] = (found, self._clock() + _CACHE_SECONDS, generation)
                while len(self._cache) > _CACHE_SIZE:
                    self._cache.popitem(last=False)
            else:
                self._failures[key] = (self._clock() + _FAILURE_SECONDS, generation)
                while len(self._failures) > _CACHE_SIZE:
                    self._failures.popitem(last=False)
        return found

    def _check(self, scheme: str, value: str) -> Principal | None:
        if scheme == "bearer":
            if self._internal and hmac.compare_digest(value.encode(), self._internal):
                return INTERNAL
            for config in self._all_configs():
                if config.token and verify(value, config.token):
                    return config.principal()
            return None
        if scheme == "basic":
            try:
                name, _, password = base64.b64decode(value, validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return None
            config = self._principal_config(name)
            if config is None or not config.password:
                verify(password, self._decoy)  # as slow as a known name's: no telling which names exist
                return None
            if verify(password, config.password):
                return config.principal()
        return None


class AuthLayer:
    """ASGI middleware: ``AuthLayer(app, Role.BROKER, Authenticator(config))``."""

    def __init__(self, app: Any, role: Role, authenticator: Authenticator, realm: str = "cuvee"):
        self.app = app
        self.role = role
        self.authenticator = authenticator
        self.realm = realm

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if scope["method"] not in _SAFE_METHODS and _cross_site(scope):
            # a browser holding this site's credentials sent it from another site's page (a form, a script)
            await self._refuse(send, Decision(False, 403, "cross-site request refused"))
            return
        query = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
        need = requirement(self.role, scope["method"], scope["path"], query)
        header = _header(scope, b"authorization")
        principal = None
        if header:
            auth = self.authenticator
            known, principal = auth.cached(header)
            if not known:
                if auth.waiting >= _MAX_WAITING:  # a flood of unknown credentials: refuse rather than queue
                    await self._refuse(send, Decision(False, 503, "too many credential checks waiting; retry"))
                    return
                auth.waiting += 1
                try:
                    principal = await asyncio.get_running_loop().run_in_executor(auth.pool, auth.authenticate,
                                                                                 header)
                finally:
                    auth.waiting -= 1
        script = _header(scope, b"x-requested-with") == "XMLHttpRequest"
        if header and principal is None:
            await self._refuse(send, Decision(False, 401, "invalid credentials"), script)
            return
        table = None
        if need.body_key is not None and principal is not None and not principal.admin:
            body = await _read_body(receive)
            table = _body_name(body, need.body_key)
            receive = _replay(body, receive)
        decision = decide(need, principal, table)
        if not decision.allowed:
            await self._refuse(send, decision, script)
            return
        if principal is not None:
            scope = {**scope, _SCOPE_KEY: principal}
        await self.app(scope, receive, send)

    async def _refuse(self, send: Any, decision: Decision, script: bool = False) -> None:
        body = orjson.dumps({"code": decision.status, "error": decision.reason})
        headers = [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
        if decision.status == 401 and not script:  # a page's script shows its own login (no browser prompt)
            headers.append((b"www-authenticate", f'Basic realm="{self.realm}"'.encode()))
        await send({"type": "http.response.start", "status": decision.status, "headers": headers})
        await send({"type": "http.response.body", "body": body})


_SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})


def _cross_site(scope: dict[str, Any]) -> bool:
    """Whether a browser says the request comes from another site's page: ``Sec-Fetch-Site: cross-site``, or an
    ``Origin`` naming another host than the one asked. Clients that are not browsers send neither."""
    if _header(scope, b"sec-fetch-site") == "cross-site":
        return True
    origin = _header(scope, b"origin")
    if origin is None:
        return False
    host = _header(scope, b"host") or ""
    return origin == "null" or origin.split("://", 1)[-1].rstrip("/").lower() != host.lower()


def _header(scope: dict[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers") or []:
        if key.lower() == name:
            return value.decode("latin-1")
    return None


async def _read_body(receive: Any) -> bytes:
    """The whole body (the size limit outside this layer bounds it)."""
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            break
        chunks.append(message.get("body", b""))
        if not message.get("more_body"):
            break
    return b"".join(chunks)


def _replay(body: bytes, receive: Any) -> Any:
    sent = False

    async def again() -> dict[str, Any]:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return again


def _body_name(body: bytes, key: str) -> str | None:
    try:
        doc = orjson.loads(body)
    except orjson.JSONDecodeError:
        return None
    value = doc.get(key) if isinstance(doc, dict) else None
    return value if isinstance(value, str) else None


__all__ = ["INTERNAL", "AuthLayer", "Authenticator", "internal_headers", "principal_of"]
