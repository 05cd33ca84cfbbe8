"""A local cluster of separate processes: one controller, N servers and a broker, on this machine.

``up`` writes one TOML config per role under ``DIR/conf``, starts each role as ``python -m cuvee <role> --config``
in its own session (so it outlives the command that started it), waits until every role answers ``/health`` and
every server has registered, then writes ``DIR/cluster.json``. ``down`` reads that file and stops the processes:
SIGTERM, then SIGKILL after a grace period. Data (metadata, stream, deep store, segments) stays in DIR.

With a certificate every role serves HTTPS; with ``auth`` every role checks credentials, the roles share a made-up
internal token, and an ``admin`` principal's password is written to ``DIR/conf/admin-password`` (mode 600).
"""

from __future__ import annotations

import json
import os
import secrets
import signal
import socket
import ssl
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from cuvee.auth.secrets import hash_password
from cuvee.errors import CuveeError

CLUSTER_FILE = "cluster.json"
ADMIN_PASSWORD_FILE = "admin-password"
AUTH_FILE = "auth.json"  # the internal token and the admin's password hash, kept so a restart reuses them


class LocalClusterError(CuveeError):
    pass


@dataclass(frozen=True)
class LocalClusterSpec:
    """What to start. Empty URIs default to files under ``dir``; ``overrides`` maps a role ("controller",
    "server", "broker") to extra config keys (dotted), e.g. short timeouts for tests."""

    dir: Path
    servers: int = 3
    metadata: str = ""
    deep_store: str = ""
    cluster: str = "cuvee"
    host: str = "127.0.0.1"
    overrides: dict[str, dict[str, Any]] = field(default_factory=dict)
    start_timeout_seconds: float = 60.0
    tls_certfile: str = ""  # with tls_keyfile: every role serves HTTPS with this certificate (docs/security.md)
    tls_keyfile: str = ""
    tls_ca_file: str = ""  # what the roles (and this launcher) trust; default: the system's CAs
    auth: bool = False  # turn auth on: an internal token and an admin whose password goes to DIR/conf/admin-password

    @property
    def tls(self) -> bool:
        return bool(self.tls_certfile)

    def verify(self) -> ssl.SSLContext | bool:
        """What this launcher trusts when it calls the roles."""
        return ssl.create_default_context(cafile=self.tls_ca_file) if self.tls_ca_file else True

    def credentials(self) -> tuple[str, str] | None:
        """(name, password) of the cluster's admin when auth is on (made by ``up``)."""
        path = self.dir / "conf" / ADMIN_PASSWORD_FILE
        return ("admin", path.read_text().strip()) if self.auth and path.exists() else None

    @property
    def metadata_uri(self) -> str:
        return self.metadata or f"sqlite:///{self.dir.resolve() / 'metadata.db'}"

    @property
    def deep_store_uri(self) -> str:
        return self.deep_store or (self.dir.resolve() / "deepstore").as_uri()

    @property
    def stream_dir(self) -> Path:
        return self.dir.resolve() / "stream"


@dataclass
class _Role:
    name: str  # controller, server-0, ..., broker
    kind: str  # controller | server | broker
    port: int
    config: dict[str, Any]
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        scheme = "https" if self.config.get("tls", {}).get("certfile") else "http"
        return f"{scheme}://{self.config['host']}:{self.port}"


def up(spec: LocalClusterSpec) -> dict[str, Any]:
    """Start the cluster and return what ``cluster.json`` holds. Stops whatever it started if any role fails."""
    if spec.servers < 1:
        raise LocalClusterError("a cluster needs at least one server")
    if cluster_running(spec.dir):
        raise LocalClusterError(f"a cluster is already running from {spec.dir} (run 'cuvee cluster down --dir {spec.dir}')")
    for sub in ("conf", "logs", "stream", "data"):
        (spec.dir / sub).mkdir(parents=True, exist_ok=True)
    os.chmod(spec.dir / "conf", 0o700)  # role configs may hold the cluster's internal token
    if spec.deep_store_uri.startswith("file://"):
        Path(spec.deep_store_uri.removeprefix("file://")).mkdir(parents=True, exist_ok=True)
    roles = _plan_roles(spec)
    try:
        for role in roles:
            role.process = _launch(spec, role)
            _wait_healthy(spec, role)
        _wait_servers_registered(spec, roles)
    except BaseException:
        for role in roles:
            _stop_process(role.process.pid if role.process else None, grace_seconds=5)
        raise
    info = _cluster_info(spec, roles)
    (spec.dir / CLUSTER_FILE).write_text(json.dumps(info, indent=2) + "\n")
    return info


def down(directory: Path, grace_seconds: float = 15.0) -> list[str]:
    """Stop the processes named in ``DIR/cluster.json``; returns the names of those that were running."""
    path = directory / CLUSTER_FILE
    if not path.exists():
        raise LocalClusterError(f"no {CLUSTER_FILE} in {directory}: no cluster was started there")
    info = json.loads(path.read_text())
    pids: dict[str, int] = info.get("pids", {})
    stopped = [name for name, pid in pids.items() if _alive(pid)]
    # Broker first (no new queries), servers next, controller last (servers may still report to it).
    order = sorted(pids, key=lambda n: (n != "broker", n == "controller", n))
    for name in order:
        _stop_process(pids[name], grace_seconds)
    info["pids"] = {}
    path.write_text(json.dumps(info, indent=2) + "\n")
    return stopped


def cluster_running(directory: Path) -> bool:
    """Whether a process of the cluster started from ``directory`` is still alive."""
    path = directory / CLUSTER_FILE
    return path.exists() and _any_alive(json.loads(path.read_text()).get("pids", {}))


def read_cluster_info(directory: Path) -> dict[str, Any]:
    path = directory / CLUSTER_FILE
    if not path.exists():
        raise LocalClusterError(f"no {CLUSTER_FILE} in {directory}")
    return json.loads(path.read_text())


# ---- internals ---------------------------------------------------------------------------------------------


def _security(spec: LocalClusterSpec) -> dict[str, Any]:
    """The ``[tls]`` and ``[auth]`` tables every role gets. Auth's secrets are made once per directory (the
    admin's password readable only by its owner) and reused when the cluster restarts."""
    out: dict[str, Any] = {}
    if spec.tls_certfile or spec.tls_keyfile or spec.tls_ca_file:
        out["tls"] = {k: str(Path(v).resolve()) for k, v in (("certfile", spec.tls_certfile),
                                                            ("keyfile", spec.tls_keyfile),
                                                            ("ca_file", spec.tls_ca_file)) if v}
    if spec.auth:
        saved = spec.dir / "conf" / AUTH_FILE
        if saved.exists():
            secrets_doc = json.loads(saved.read_text())
        else:
            password = secrets.token_urlsafe(18)
            secrets_doc = {"internal_token": secrets.token_urlsafe(32), "admin_password_hash": hash_password(password)}
            _write_private(spec.dir / "conf" / ADMIN_PASSWORD_FILE, password + "\n")
            _write_private(saved, json.dumps(secrets_doc) + "\n")
        out["auth"] = {"enabled": True, "internal_token": secrets_doc["internal_token"],
                       "principals": [{"name": "admin", "password": secrets_doc["admin_password_hash"],
                                       "admin": True}]}
    return out


def _write_private(path: Path, text: str) -> None:
    """Write a file only its owner can read (mode 600 even if it existed with another; never through a link)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with os.fdopen(fd, "w") as f:
        os.fchmod(f.fileno(), 0o600)
        f.write(text)


def _plan_roles(spec: LocalClusterSpec) -> list[_Role]:
    common = {"cluster": spec.cluster, "metadata": spec.metadata_uri, "host": spec.host, **_security(spec)}
    roles = [_Role("controller", "controller", 0, {**common, "deep_store": spec.deep_store_uri})]
    # the servers share this machine's cores: each queries with its share (unless overridden below)
    threads = {"query_threads": max(1, (os.cpu_count() or 1) // spec.servers)} if spec.servers > 1 else {}
    for i in range(spec.servers):
        data_dir = str(spec.dir.resolve() / "data" / f"server-{i}")
        roles.append(_Role(f"server-{i}", "server", 0, {**common, "deep_store": spec.deep_store_uri, "data_dir": data_dir,
                                                        **threads}))
    roles.append(_Role("broker", "broker", 0, dict(common)))
    # A restart reuses each role's port: a server's instance id (Server_<host>_<port>) is how the ideal state
    # names it, so the same port means it takes back its segments.
    previous = _previous_ports(spec.dir)
    fresh = iter(_free_ports(spec.host, len(roles)))
    for role in roles:
        role.port = previous.get(role.name) or next(fresh)
        role.config["port"] = role.port
        for dotted, value in spec.overrides.get(role.kind, {}).items():
            target = role.config
            *parents, leaf = dotted.split(".")
            for part in parents:
                target = target.setdefault(part, {})
            target[leaf] = value
    return roles


def _launch(spec: LocalClusterSpec, role: _Role) -> subprocess.Popen[bytes]:
    conf = spec.dir / "conf" / f"{role.name}.toml"
    _write_private(conf, _to_toml(role.config))
    log = open(spec.dir / "logs" / f"{role.name}.log", "ab")
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "cuvee", role.kind, "--config", str(conf)],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={**os.environ, "PYTHONUNBUFFERED": "1"},
        )
    finally:
        log.close()


def _wait_healthy(spec: LocalClusterSpec, role: _Role) -> None:
    deadline = time.monotonic() + spec.start_timeout_seconds
    assert role.process is not None
    while time.monotonic() < deadline:
        if role.process.poll() is not None:
            raise LocalClusterError(
                f"{role.name} exited with code {role.process.returncode} while starting; see {spec.dir / 'logs' / (role.name + '.log')}:\n"
                + _tail(spec.dir / "logs" / f"{role.name}.log")
            )
        try:
            if httpx.get(f"{role.url}/health", timeout=1.0, verify=spec.verify()).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)  # polling the health endpoint until the deadline
    raise LocalClusterError(f"{role.name} did not become healthy within {spec.start_timeout_seconds:.0f} s")


def _wait_servers_registered(spec: LocalClusterSpec, roles: list[_Role]) -> None:
    controller = next(r for r in roles if r.kind == "controller")
    wanted = spec.servers
    deadline = time.monotonic() + spec.start_timeout_seconds
    seen = 0
    while time.monotonic() < deadline:
        try:
            instances = httpx.get(f"{controller.url}/instances", timeout=2.0, verify=spec.verify(),
                                  auth=spec.credentials()).json().get("instances", [])
            seen = sum(1 for i in instances if str(i).startswith("Server_"))
            if seen >= wanted:
                return
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.05)  # polling the controller until the deadline
    raise LocalClusterError(f"only {seen} of {wanted} servers registered within {spec.start_timeout_seconds:.0f} s")


def _cluster_info(spec: LocalClusterSpec, roles: list[_Role]) -> dict[str, Any]:
    by_kind = {r.kind: r for r in roles if r.kind != "server"}
    servers = [r for r in roles if r.kind == "server"]
    return {
        "controller": by_kind["controller"].url,
        "broker": by_kind["broker"].url,
        "servers": [r.url for r in servers],
        "streamDir": str(spec.stream_dir),
        "deepStore": spec.deep_store_uri,
        "metadata": spec.metadata_uri,
        "cluster": spec.cluster,
        "tls": spec.tls,
        "caFile": str(Path(spec.tls_ca_file).resolve()) if spec.tls_ca_file else "",
        "adminPasswordFile": str((spec.dir / "conf" / ADMIN_PASSWORD_FILE).resolve()) if spec.auth else "",
        "pids": {r.name: r.process.pid for r in roles if r.process is not None},
        "logs": {r.name: str((spec.dir / "logs" / f"{r.name}.log").resolve()) for r in roles},
    }


def _previous_ports(directory: Path) -> dict[str, int]:
    """Role name -> port of the last cluster started from ``directory`` (empty if none)."""
    path = directory / CLUSTER_FILE
    if not path.exists():
        return {}
    info = json.loads(path.read_text())
    urls = {"controller": info.get("controller"), "broker": info.get("broker")}
    urls.update({f"server-{i}": url for i, url in enumerate(info.get("servers", []))})
    return {name: int(url.rsplit(":", 1)[1]) for name, url in urls.items() if url}


def _free_ports(host: str, count: int) -> list[int]:
    """``count`` distinct free ports: all sockets stay bound until every port is picked, so none repeats."""
    sockets = [socket.socket() for _ in range(count)]
    try:
        for sock in sockets:
            sock.bind((host, 0))
        return [int(sock.getsockname()[1]) for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        waited, _ = os.waitpid(pid, os.WNOHANG)  # reap our own exited children
        return waited == 0
    except ChildProcessError:
        return True


def _any_alive(pids: dict[str, int]) -> bool:
    return any(_alive(pid) for pid in pids.values())


def _stop_process(pid: int | None, grace_seconds: float) -> None:
    if pid is None or not _alive(pid):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace_seconds
    while _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # waiting for the process to exit after SIGTERM
    if _alive(pid):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            return


def _tail(path: Path, lines: int = 20) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except OSError:
        return ""


def _to_toml(doc: dict[str, Any], prefix: str = "") -> str:
    """A tiny TOML writer for role configs: scalars, lists (of scalars or inline tables), nested tables."""
    scalars = {k: v for k, v in doc.items() if not isinstance(v, dict)}
    tables = {k: v for k, v in doc.items() if isinstance(v, dict)}
    out = [f"{key} = {_toml_value(value)}" for key, value in scalars.items()]
    for key, table in tables.items():
        name = f"{prefix}{key}"
        out.append(f"\n[{name}]")
        out.append(_to_toml(table, prefix=f"{name}."))
    return "\n".join(out) + "\n"


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):  # an inline table (a list of principals)
        return "{" + ", ".join(f"{key} = {_toml_value(v)}" for key, v in value.items()) + "}"
    return json.dumps(str(value))
