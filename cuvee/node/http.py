"""Run a role's FastAPI app under uvicorn: in a background thread (in-process clusters, tests) or in the
foreground (``cuvee controller|server|broker``). Port 0 picks a free port; ``url`` tells which one was taken.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
import threading
import time
from typing import Any

import orjson
import uvicorn
import uvloop
from fastapi import FastAPI, Request

from cuvee.auth.config import AuthConfig
from cuvee.auth.layer import AuthLayer, Authenticator
from cuvee.auth.policy import Role
from cuvee.auth.stored import StoredPrincipals
from cuvee.cluster.store import ClusterStore
from cuvee.errors import CuveeError
from cuvee.node.tls import TlsConfig

log = logging.getLogger(__name__)


async def read_json(request: Request) -> Any:
    """A request's JSON body, read by orjson: JSON nested past its bound (1,024 levels) is a ``ValueError`` like
    any bad JSON. Starlette's ``request.json()`` (the json module) raised ``RecursionError`` on a body nested
    100,000 deep, which routes that read bodies themselves answered 500."""
    return orjson.loads(await request.body())


class HttpServiceError(CuveeError):
    pass


DEFAULT_MAX_BODY_BYTES = 64 * 1024 * 1024


class BodySizeLimit:
    """ASGI middleware: a request body over ``max_bytes`` is answered 413 (JSON) without being read further, so an
    oversize or endless upload cannot exhaust a role's memory. Checks Content-Length first, then counts chunks."""

    def __init__(self, app: Any, max_bytes: int):
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope.get("headers") or []).get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0
        refused = False

        async def counting_receive() -> dict[str, Any]:
            # Past the limit: answer 413 now and tell the app the client left, so it stops reading.
            nonlocal seen, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    refused = True
                    await self._refuse(send)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: dict[str, Any]) -> None:
            if not refused:  # after a 413 the app's own answer (if any) is dropped
                await send(message)

        await self.app(scope, counting_receive, guarded_send)

    async def _refuse(self, send: Any) -> None:
        body = orjson.dumps({"code": 413, "error": f"request body over {self.max_bytes} bytes"})
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class HttpService:
    """One HTTP listener for one app. Binds the socket first, so the port is known before serving starts.
    Every request body is capped at ``max_body_bytes`` (413 beyond)."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0, *, name: str = "http",
                 max_body_bytes: int = DEFAULT_MAX_BODY_BYTES, auth: AuthConfig | None = None,
                 role: Role | None = None, tls: TlsConfig | None = None, store: ClusterStore | None = None):
        """``auth`` and ``role``: every request goes through ``cuvee.auth.layer.AuthLayer`` when auth is on;
        ``store``: the cluster's metadata, whose principals (``cuvee.auth.stored``) count beside the config's.
        ``tls``: serve HTTPS with its certificate (``cuvee.node.tls``)."""
        self.app = app
        self.name = name
        self.tls = tls is not None and tls.serving
        # IPPROTO_TCP explicitly: asyncio enables TCP_NODELAY on accepted connections only for sockets whose proto
        # says TCP; without it every keep-alive response waits ~40 ms on Nagle + delayed ACK.
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind((host, port))
            self._socket.listen(1024)
        except OSError as exc:
            self._socket.close()
            raise HttpServiceError(f"{name}: cannot listen on {host}:{port}: {exc.strerror}") from None
        self.host, self.port = self._socket.getsockname()[:2]
        if host and host not in ("0.0.0.0", "::"):
            self.host = host  # a configured name is what others reach (and what a TLS certificate names)
        served: Any = app
        self.principals: StoredPrincipals | None = None
        if auth is not None and auth.enabled:
            if role is None:
                raise ValueError("an HTTP service with auth needs its role (what its routes require)")
            if store is not None:
                self.principals = StoredPrincipals(store, auth.principals_refresh_seconds)
            served = AuthLayer(app, role, Authenticator(auth, stored=self.principals))
        elif not _loopback(self.host):
            log.warning("%s listens on %s:%d without authentication: anyone who can reach it can read and drop "
                        "tables; turn [auth] on (docs/security.md)", name, self.host, self.port)
        secure = {"ssl_certfile": tls.certfile, "ssl_keyfile": tls.keyfile} if tls is not None and tls.serving else {}
        config = uvicorn.Config(BodySizeLimit(served, max_body_bytes), log_level="warning", access_log=False,
                                lifespan="off", timeout_graceful_shutdown=2, **secure)
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    @property
    def url(self) -> str:
        return f"{'https' if self.tls else 'http'}://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> HttpService:
        """Serve in a daemon thread; returns once the server accepts connections."""
        if self.principals is not None:
            self.principals.start()
        self._thread = threading.Thread(target=self._run, name=f"{self.name}-http", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            self._stopped.wait(0.005)  # poll uvicorn's started flag; it has no event to wait on
        if not self._server.started:
            raise HttpServiceError(f"{self.name}: the HTTP server did not start on {self.url}")
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until ``stop`` is called or SIGINT/SIGTERM arrive."""
        if self.principals is not None:
            self.principals.start()
        self._run()

    def stop(self, timeout: float = 5.0) -> None:
        self._server.should_exit = True
        self._stopped.set()
        if self.principals is not None:
            self.principals.stop()
        if self._thread is not None:
            self._thread.join(timeout)
        self._socket.close()

    def _run(self) -> None:
        # uvloop and httptools (uvicorn's "standard" extras, both dependencies): the pure-Python loop and h11
        # parser cost a query ~1 ms at each hop (client → broker → server), most of a small query's time
        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(self._server.serve(sockets=[self._socket]))


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"
