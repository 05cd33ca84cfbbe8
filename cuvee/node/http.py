"""Run a role's FastAPI app under uvicorn: in a background thread (in-process clusters, tests) or in the
foreground (``cuvee controller|server|broker``). Port 0 picks a free port; ``url`` tells which one was taken.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time

import uvicorn
from fastapi import FastAPI

from cuvee.errors import CuveeError


class HttpServiceError(CuveeError):
    pass


class HttpService:
    """One HTTP listener for one app. Binds the socket first, so the port is known before serving starts."""

    def __init__(self, app: FastAPI, host: str = "127.0.0.1", port: int = 0, *, name: str = "http"):
        self.app = app
        self.name = name
        self._socket = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._socket.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            self._socket.bind((host, port))
            self._socket.listen(1024)
        except OSError as exc:
            self._socket.close()
            raise HttpServiceError(f"{name}: cannot listen on {host}:{port}: {exc.strerror}") from None
        self.host, self.port = self._socket.getsockname()[:2]
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off", timeout_graceful_shutdown=2)
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None
        self._stopped = threading.Event()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def start(self, timeout: float = 10.0) -> HttpService:
        """Serve in a daemon thread; returns once the server accepts connections."""
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
        self._run()

    def stop(self, timeout: float = 5.0) -> None:
        self._server.should_exit = True
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(timeout)
        self._socket.close()

    def _run(self) -> None:
        asyncio.run(self._server.serve(sockets=[self._socket]))
