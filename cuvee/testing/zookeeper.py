"""A real, throw-away ZooKeeper server for tests and local tools.

Debian's ``zookeeper`` package installs the jars but starts nothing; this runs ``ZooKeeperServerMain`` with its
own config on a free loopback port and a temporary data directory. A short tick lets sessions expire in about a
second, so expiry tests stay fast. ``stop()``/``start()`` keep the port and data, so a client's session can
survive an outage: that is how connection-loss tests are written.
"""

from __future__ import annotations

import atexit
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

from cuvee.errors import UserError
from cuvee.testing.process import die_with_parent

ZOOKEEPER_JAR = Path("/usr/share/java/zookeeper.jar")
"""Its manifest's Class-Path names the other jars it needs (netty, jute, slf4j-api, ...) in /usr/share/java."""
SLF4J_BINDING_JAR = Path("/usr/share/java/slf4j-simple.jar")
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
JVM_FLAGS = ["-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1", "-Djava.net.preferIPv4Stack=true"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class ZooKeeperServer:
    """``with ZooKeeperServer() as zk: open_metastore(zk.zk_uri("/test"))``."""

    def __init__(
        self,
        *,
        tick_ms: int = 100,
        min_session_timeout_ms: int = 200,
        max_session_timeout_ms: int = 60_000,
        startup_timeout: float = 30.0,
        java: str = "java",
    ):
        self._tick_ms = tick_ms
        self._min_session_ms = min_session_timeout_ms
        self._max_session_ms = max_session_timeout_ms
        self._startup_timeout = startup_timeout
        self._java = java
        self._dir: Path | None = None
        self._port: int | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: object | None = None

    # ---- addresses ---------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("the ZooKeeper server was never started")
        return self._port

    @property
    def connect_string(self) -> str:
        return f"127.0.0.1:{self.port}"

    def zk_uri(self, chroot: str = "/cuvee", **options: float) -> str:
        """A metadata store URI for this server, e.g. ``zk_uri("/t1", session_timeout=2)``."""
        query = f"?{urlencode(options)}" if options else ""
        return f"zk://{self.connect_string}{chroot}{query}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    # ---- lifecycle ---------------------------------------------------------------------------------------

    def start(self) -> ZooKeeperServer:
        if self.running:
            return self
        java = shutil.which(self._java)
        if java is None:
            raise UserError(f"cannot start ZooKeeper: {self._java!r} is not on PATH (install Java 17)")
        for jar in (ZOOKEEPER_JAR, SLF4J_BINDING_JAR):
            if not jar.is_file():
                raise UserError(f"cannot start ZooKeeper: {jar} is missing (apt-get install -y zookeeper)")
        if self._dir is None:
            self._dir = Path(tempfile.mkdtemp(prefix="cuvee-zk-"))
            self._port = free_port()
            atexit.register(self.close)
        config = self._write_config()
        log_file = open(self._dir / "zookeeper.log", "ab")  # noqa: SIM115 - closed in stop()
        self._log_file = log_file
        self._process = subprocess.Popen(
            [java, *JVM_FLAGS, "-cp", f"{ZOOKEEPER_JAR}:{SLF4J_BINDING_JAR}", MAIN_CLASS, str(config)],
            stdout=log_file,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            preexec_fn=die_with_parent(),
        )
        self._wait_ready()
        return self

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server but keep its port and data, so ``start()`` brings the same ensemble back."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.terminate()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if self._log_file is not None:
            self._log_file.close()  # type: ignore[attr-defined]
            self._log_file = None

    def restart(self) -> None:
        self.stop()
        self.start()

    def close(self) -> None:
        """Stop and delete the data directory."""
        self.stop()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None
        atexit.unregister(self.close)

    def __enter__(self) -> ZooKeeperServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ---- internals ---------------------------------------------------------------------------------------

    def _write_config(self) -> Path:
        assert self._dir is not None
        config = self._dir / "zoo.cfg"
        config.write_text(
            "\n".join(
                [
                    f"tickTime={self._tick_ms}",
                    f"minSessionTimeout={self._min_session_ms}",
                    f"maxSessionTimeout={self._max_session_ms}",
                    f"dataDir={self._dir / 'data'}",
                    f"clientPort={self.port}",
                    "clientPortAddress=127.0.0.1",
                    "admin.enableServer=false",
                    "4lw.commands.whitelist=ruok,srvr,stat",
                    "",
                ]
            )
        )
        return config

    def _wait_ready(self) -> None:
        deadline = time.monotonic() + self._startup_timeout
        while time.monotonic() < deadline:
            assert self._process is not None
            if self._process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with code {self._process.returncode}:\n{self._log_tail()}")
            if self.four_letter_word("ruok") == "imok":
                return
            time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"ZooKeeper did not answer 'ruok' within {self._startup_timeout}s:\n{self._log_tail()}")

    def four_letter_word(self, command: str) -> str | None:
        """Send a ZooKeeper four-letter command; None if the server does not answer."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=1.0) as sock:
                sock.sendall(command.encode())
                chunks = []
                while chunk := sock.recv(4096):
                    chunks.append(chunk)
                return b"".join(chunks).decode(errors="replace")
        except OSError:
            return None

    def _log_tail(self, lines: int = 30) -> str:
        assert self._dir is not None
        log_path = self._dir / "zookeeper.log"
        text = log_path.read_text(errors="replace") if log_path.exists() else ""
        return "\n".join(text.splitlines()[-lines:])
