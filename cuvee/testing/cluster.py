"""An in-process cluster for fast tests: a controller, N servers and a broker in this Python process.

Each role runs its own HTTP service on a free port and talks to the others over HTTP and the metadata store,
exactly as separate processes do; only the process boundary is missing. Timeouts are shrunk so protocol
rounds take milliseconds. Use it as a context manager; ``check_invariants()`` asserts what must hold in any
quiescent cluster (dask's ``gen_cluster`` does the same after every test).
"""

from __future__ import annotations

import contextlib
import itertools
import ssl
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import orjson

from cuvee.node.config import config_from_dict
from cuvee.stream import open_admin, open_producer
from cuvee.testing.waiting import wait_until

# tasks: tests launch maintenance jobs themselves (a scheduled one would race them)
FAST_CONTROLLER = {"external_view_interval_seconds": 0.2, "completion": {"hold_seconds": 0.2},
                   "rebalance_settle_seconds": 1.5, "tasks": {"mode": "external", "interval_seconds": 3600}}
FAST_SERVER = {"ideal_state_poll_seconds": 0.5, "consumer": {"hold_retry_seconds": 0.05}}
FAST_BROKER = {"routing_poll_seconds": 0.5}


def _merge(base: Mapping[str, Any], extra: Mapping[str, Any] | None) -> dict[str, Any]:
    out = dict(base)
    for key, value in (extra or {}).items():
        out[key] = _merge(out[key], value) if isinstance(value, Mapping) and isinstance(out.get(key), Mapping) else value
    return out


def log_stream_configs(topic: str, stream_dir: Path, **extra: str) -> dict[str, str]:
    """Stream configs of ``topic`` in the embedded log under ``stream_dir``, read from its start."""
    return {"streamType": "log", "stream.log.topic.name": topic, "stream.log.dir": str(stream_dir),
            "stream.log.consumer.prop.auto.offset.reset": "smallest", **extra}


class InProcessCluster:
    """Start with ``with InProcessCluster(tmp_path, servers=2) as cluster: ...``."""

    def __init__(
        self,
        root: Path,
        *,
        servers: int = 2,
        metadata: str = "",
        controller: Mapping[str, Any] | None = None,
        server: Mapping[str, Any] | None = None,
        broker: Mapping[str, Any] | None = None,
        credentials: tuple[str, str] | None = None,
        verify: str | bool = True,
    ):
        """``credentials``: (name, password) the helpers send when the roles' configs turn auth on; ``verify``:
        the CA file the helpers trust when the roles serve HTTPS."""
        from cuvee.broker.broker import Broker, BrokerConfig
        from cuvee.controller import Controller, ControllerConfig

        self.root = root
        self.stream_dir = root / "stream"
        self.deep_store = (root / "deepstore").resolve().as_uri()
        (root / "deepstore").mkdir(parents=True, exist_ok=True)
        self.metadata = metadata or f"sqlite:///{(root / 'metadata.db').resolve()}"
        common = {"metadata": self.metadata}
        self.controller = Controller(
            config_from_dict(ControllerConfig, _merge({**common, "deep_store": self.deep_store}, _merge(FAST_CONTROLLER, controller)))
        )
        self._server_overrides = dict(server or {})
        self.servers = [self._new_server(i) for i in range(servers)]
        self.broker = Broker(config_from_dict(BrokerConfig, _merge(common, _merge(FAST_BROKER, broker))))
        trust = ssl.create_default_context(cafile=verify) if isinstance(verify, str) else verify
        self.http = httpx.Client(timeout=30, auth=credentials, verify=trust)
        self._started: list[Any] = []

    def _new_server(self, i: int, **extra: Any) -> Any:
        from cuvee.server.config import ServerConfig
        from cuvee.server.server import Server

        base = {"metadata": self.metadata, "deep_store": self.deep_store, "data_dir": str(self.root / f"server-{i}")}
        return Server(config_from_dict(ServerConfig, _merge(base, _merge(FAST_SERVER, {**self._server_overrides,
                                                                                       **extra}))))

    def add_server(self, **extra: Any) -> Any:
        """Start one more server (``extra``: config keys of its own, such as ``tags``) and wait until it is
        registered; it stops with the cluster."""
        server = self._new_server(len(self.servers), **extra).start()
        self.servers.append(server)
        self._started.append(server)
        wait_until(lambda: server.instance_id in self.http.get(f"{self.controller_url}/instances").json()["instances"],
                   10, message="the added server never registered")
        return server

    # ---- lifecycle ------------------------------------------------------------------------------------------

    def __enter__(self) -> InProcessCluster:
        try:
            for role in itertools.chain([self.controller], self.servers, [self.broker]):
                role.start()
                self._started.append(role)
            wait_until(lambda: self.controller.is_leader, 10, message="the controller never became leader")
            wait_until(lambda: len(self.server_instances()) >= len(self.servers), 10, message="servers never registered")
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        for role in reversed(self._started):
            role.stop()
        self._started.clear()
        self.http.close()

    # ---- what tests do --------------------------------------------------------------------------------------

    @property
    def controller_url(self) -> str:
        return self.controller.url

    @property
    def broker_url(self) -> str:
        return self.broker.url

    def server_instances(self) -> list[str]:
        ids = self.http.get(f"{self.controller_url}/instances").json()["instances"]
        return [i for i in ids if i.startswith("Server_")]

    def log_stream_configs(self, topic: str, **extra: str) -> dict[str, str]:
        return log_stream_configs(topic, self.stream_dir, **extra)

    def create_topic(self, topic: str, partitions: int) -> None:
        with open_admin(self.log_stream_configs(topic)) as admin:
            admin.create_topic(topic, partitions)

    def produce(self, stream_configs: Mapping[str, str], rows: Iterable[Mapping[str, Any]], key_field: str) -> int:
        with open_producer(stream_configs) as producer:
            n = producer.produce_many((str(row[key_field]).encode(), orjson.dumps(row)) for row in rows)
            producer.flush()
        return n

    def add_schema(self, schema: Mapping[str, Any]) -> None:
        self._ok(self.http.post(f"{self.controller_url}/schemas", json=schema))

    def add_table(self, table: Mapping[str, Any]) -> None:
        self._ok(self.http.post(f"{self.controller_url}/tables", json=table))

    def realtime_table(self, schema: Mapping[str, Any], *, partitions: int = 2, replicas: int = 2,
                       flush_rows: int = 100, **stream: str) -> dict[str, str]:
        """A topic named after the schema, the schema, and a REALTIME table on it (``stream``: more stream config
        keys, such as an auto-tuned table's desired size); returns its stream configs."""
        name = str(schema["schemaName"])
        self.create_topic(name, partitions)
        self.add_schema(schema)
        configs = self.log_stream_configs(name, **{"realtime.segment.flush.threshold.rows": str(flush_rows), **stream})
        self.add_table({"tableName": name, "tableType": "REALTIME",
                        "segmentsConfig": {"replicasPerPartition": str(replicas)},
                        "tableIndexConfig": {"streamConfigs": configs}})
        return configs

    def query(self, sql: str, **options: Any) -> dict[str, Any]:
        body: dict[str, Any] = {"sql": sql}
        if options:
            body["queryOptions"] = ";".join(f"{k}={v}" for k, v in options.items())
        return self._ok(self.http.post(f"{self.broker_url}/query/sql", json=body))

    def scalar(self, sql: str) -> Any:
        answer = self.query(sql)
        if answer.get("exceptions"):
            raise AssertionError(f"{sql!r} failed: {answer['exceptions']}")
        return answer["resultTable"]["rows"][0][0]

    def ideal_state(self, table: str) -> dict[str, dict[str, str]]:
        doc = self._ok(self.http.get(f"{self.controller_url}/tables/{table}/idealstate"))
        return doc.get("REALTIME", doc)

    def segment_metadata(self, table: str, segment: str) -> dict[str, Any]:
        return self._ok(self.http.get(f"{self.controller_url}/segments/{table}/{segment}/metadata"))

    def committed_segments(self, table: str) -> list[str]:
        return sorted(s for s, replicas in self.ideal_state(table).items()
                      if replicas and all(state == "ONLINE" for state in replicas.values()))

    def check_invariants(self, table: str, replicas: int) -> None:
        """What holds in any cluster: every segment has at most ``replicas`` replicas on distinct instances, and
        every partition has at most one CONSUMING segment."""
        ideal = self.ideal_state(table)
        consuming_per_partition: dict[str, int] = {}
        for segment, assignment in ideal.items():
            assert len(assignment) <= replicas, f"{segment} has {len(assignment)} replicas"
            if any(state == "CONSUMING" for state in assignment.values()):
                partition = segment.split("__")[1]
                consuming_per_partition[partition] = consuming_per_partition.get(partition, 0) + 1
        assert all(n <= 1 for n in consuming_per_partition.values()), consuming_per_partition

    @staticmethod
    def _ok(response: httpx.Response) -> Any:
        if response.status_code >= 400:
            raise AssertionError(f"{response.request.method} {response.request.url} -> {response.status_code}: {response.text}")
        return response.json() if response.content else None


@dataclass(frozen=True)
class Endpoints:
    """Where a running cluster's roles answer."""

    controller: str
    broker: str
    servers: tuple[str, ...]
    pids: tuple[int, ...] = ()  # the broker's and servers' processes (none when every role is in this process)


@contextlib.contextmanager
def bench_cluster(root: Path, servers: int, *, in_process: bool,
                  server: Mapping[str, Any] | None = None) -> Iterator[Endpoints]:
    """A cluster for the benches, stopped on exit: each role in a process of its own (``cuvee cluster up``: what
    a deployment pays) or, ``in_process``, every role in this one process (they share its GIL: an upper bound on
    the roles' overhead). ``server``: config keys every server gets."""
    if in_process:
        with InProcessCluster(root, servers=servers, server=server) as local:
            yield Endpoints(local.controller_url, local.broker_url, tuple(s.url for s in local.servers))
        return
    from cuvee.deploy.local import LocalClusterSpec, down, up

    info = up(LocalClusterSpec(dir=root, servers=servers, overrides={"server": dict(server or {})}))
    try:
        yield Endpoints(info["controller"], info["broker"], tuple(info["servers"]),
                        tuple(pid for name, pid in info.get("pids", {}).items() if name != "controller"))
    finally:
        down(root)
