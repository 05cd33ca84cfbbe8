"""A Confluent Schema Registry for tests: the REST subset confluent-kafka's client and serializers call, on loopback.

``GET /schemas/ids/{id}`` (what decoders call), ``POST /subjects/{subject}/versions`` (register, as a serializer
does), ``POST /subjects/{subject}`` (look a schema up), ``GET /subjects``. Errors use the registry's shape
(``{"error_code": 40403, "message": ...}``). It can require HTTP basic auth, answer every request with an error
status (``fail_with``) or with any status, content type and body (``answer_raw``: a proxy's HTML page, a broken
registry), and be stopped and started again on the same port with its schemas kept (an outage).
``requests`` counts the requests per path, so tests can check that schemas are cached.
"""

from __future__ import annotations

import base64
import collections
import itertools
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

_CONTENT_TYPE = "application/vnd.schemaregistry.v1+json"
# Ids are unique across the servers of a process, as ids of different registries would be for a decoder's cache
# (keyed by URL): a port reused by a later test's registry never meets an earlier registry's schema under its id.
_IDS = itertools.count(1)


class SchemaRegistryServer:
    """``with SchemaRegistryServer() as registry: registry.url, registry.register(subject, schema)``."""

    def __init__(self, *, user_info: str | None = None):
        """``user_info``: ``user:password`` that every request must carry (basic auth), or None."""
        self.user_info = user_info
        self.port = 0
        self.fail_with: int | None = None  # every request answers this HTTP status while set
        self.answer_raw: tuple[int, str, bytes] | None = None  # every request answers (status, content type, body)
        self.requests: collections.Counter[str] = collections.Counter()
        self._schemas: dict[int, dict[str, Any]] = {}  # id -> {"schema": ..., "schemaType": ...}
        self._subjects: dict[str, list[int]] = {}
        self._lock = threading.Lock()
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def register(self, subject: str, schema: str, schema_type: str = "AVRO") -> int:
        """The id of ``schema`` (the same id for the same text and type), listed under ``subject``."""
        with self._lock:
            entry = {"schema": schema, "schemaType": schema_type}
            schema_id = next((i for i, known in self._schemas.items() if known == entry), None)
            if schema_id is None:
                schema_id = next(_IDS)
                self._schemas[schema_id] = entry
            versions = self._subjects.setdefault(subject, [])
            if schema_id not in versions:
                versions.append(schema_id)
            return schema_id

    def start(self) -> SchemaRegistryServer:
        registry = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
                return

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                registry._handle(self, "GET")

            def do_POST(self) -> None:  # noqa: N802
                registry._handle(self, "POST")

        self._server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="schema-registry",
                                        daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop answering (connections are refused); ``start`` again serves the same schemas on the same port."""
        server, self._server = self._server, None
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join()
            self._thread = None

    def __enter__(self) -> SchemaRegistryServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ---- requests ----

    def _handle(self, request: BaseHTTPRequestHandler, method: str) -> None:
        path = request.path.split("?", 1)[0]
        with self._lock:
            self.requests[f"{method} {path}"] += 1
        length = int(request.headers.get("Content-Length") or 0)
        body = request.rfile.read(length) if length else b""
        if self.fail_with is not None:
            self._send(request, self.fail_with, {"error_code": self.fail_with * 100, "message": "failing on purpose"})
            return
        if self.answer_raw is not None:
            status, content_type, data = self.answer_raw
            request.send_response(status)
            request.send_header("Content-Type", content_type)
            request.send_header("Content-Length", str(len(data)))
            request.end_headers()
            request.wfile.write(data)
            return
        if self.user_info is not None:
            expected = "Basic " + base64.b64encode(self.user_info.encode()).decode()
            if request.headers.get("Authorization") != expected:
                self._send(request, 401, {"error_code": 401, "message": "Unauthorized"})
                return
        status, answer = self._answer(method, path, body)
        self._send(request, status, answer)

    def _answer(self, method: str, path: str, body: bytes) -> tuple[int, Any]:
        if method == "GET" and (found := re.fullmatch(r"/schemas/ids/(\d+)", path)):
            entry = self._schemas.get(int(found.group(1)))
            if entry is None:
                return 404, {"error_code": 40403, "message": "Schema not found"}
            answer = {"schema": entry["schema"]}
            if entry["schemaType"] != "AVRO":
                answer["schemaType"] = entry["schemaType"]
            return 200, answer
        if method == "GET" and path == "/subjects":
            return 200, sorted(self._subjects)
        if method == "POST" and (found := re.fullmatch(r"/subjects/([^/]+)/versions", path)):
            doc = json.loads(body or b"{}")
            schema_id = self.register(found.group(1), doc["schema"], doc.get("schemaType", "AVRO"))
            return 200, {"id": schema_id}
        if method == "POST" and (found := re.fullmatch(r"/subjects/([^/]+)", path)):
            doc = json.loads(body or b"{}")
            entry = {"schema": doc["schema"], "schemaType": doc.get("schemaType", "AVRO")}
            for schema_id in self._subjects.get(found.group(1), []):
                if self._schemas[schema_id] == entry:
                    version = self._subjects[found.group(1)].index(schema_id) + 1
                    return 200, {"subject": found.group(1), "id": schema_id, "version": version, **entry}
            return 404, {"error_code": 40403, "message": "Schema not found"}
        return 404, {"error_code": 404, "message": f"no route {method} {path}"}

    @staticmethod
    def _send(request: BaseHTTPRequestHandler, status: int, answer: Any) -> None:
        data = json.dumps(answer).encode()
        request.send_response(status)
        request.send_header("Content-Type", _CONTENT_TYPE)
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)
