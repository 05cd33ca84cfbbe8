"""What the broker knows about the cluster: tables with their schemas and external views, and the servers to ask.

A background thread re-reads everything whenever a metadata-store watch fires (table list, table configs,
schemas, external views, segment lineage, time boundary overrides, instances, live instances) and at least every
``poll_seconds`` in case a watch event is missed. Readers get an immutable ``ClusterSnapshot``, swapped in whole, so one query sees one consistent picture
without locks. A query naming a table the snapshot lacks triggers a direct look-up first, so a table created a
moment ago is not reported missing (190) while the watch is still on its way.

A table's schema is the one named by ``segmentsConfig.schemaName`` if given, else the raw table name (Pinot's rule).

Each entry carries the segments its lineage hides (``cuvee.lineage.rules.hidden_segments``), read together with its
external view, so one snapshot switches from a replacement's old segments to its new ones in one step. OFFLINE
entries also carry what a hybrid table's time boundary needs (``cuvee.broker.hybrid``): the segments that should
be served (``cluster.time_boundary.expected_offline_segments``, from the ideal state), the end time and push time
of each (read once per segment name and CRC, so a segment pushed again under its name is read again), the time
column's unit and the explicit override. Expected segments no server holds are routed as unavailable (305).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Callable, Mapping, Set
from dataclasses import dataclass, field
from functools import cached_property

import orjson
import pyarrow as pa

from cuvee.broker.hybrid import QueryTarget, query_targets
from cuvee.broker.partition_replicas import PartitionReplicas
from cuvee.broker.routing import RoutingTable, route
from cuvee.broker.segment_pruning import PARTITION_PRUNER, partition_facts
from cuvee.cluster.records import ExternalView, IdealState, InstanceInfo, RecordFormatError, SegmentState
from cuvee.cluster.store import ClusterStore
from cuvee.cluster.time_boundary import (NEW_SEGMENT_GRACE_SECONDS, boundary_units, compute_time_boundary,
                                         expected_offline_segments)
from cuvee.config.string_times import column_string_times
from cuvee.errors import UserError
from cuvee.config import ConfigValidationError, DataType, Schema, TableConfig, TableType, raw_table_name
from cuvee.config.datetime_format import TimeFormatKind
from cuvee.query.functions import strftime_pattern
from cuvee.lineage.rules import hidden_segments
from cuvee.protocol.completion_http import HTTP_PORT_NAME
from cuvee.pruning import SegmentFacts
from cuvee.pruning.stream_partitions import MixedPartitions, consuming_partitions, stream_partition_count
from cuvee.query import TableInfo
from cuvee.segment.partitioning import PartitionSpec, SegmentPartitions, partition_spec
from cuvee.spi.metastore import MetadataStoreError, NoNodeError, Subscription, WatchEvent

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class TableEntry:
    """One queryable table half: its planner view, its row schema, where its segments are, and how to route them.

    ``hidden``: segments lineage forbids reading now (``cuvee.lineage.rules.hidden_segments``). OFFLINE halves also
    carry what the hybrid time boundary needs: the time column, its unit, the push frequency, each segment's end
    time and an explicit boundary if one is set."""

    name: str  # with type, e.g. events_REALTIME
    info: TableInfo
    arrow_schema: pa.Schema
    view: ExternalView
    config_version: int = -1
    schema_version: int = -1
    pauseless: bool = False  # ingestionConfig.streamIngestionConfig.pauselessConsumptionEnabled
    hidden: frozenset[str] = frozenset()
    time_column: str | None = None
    step_ms: float | None = None  # milliseconds per recorded end time (None: no boundary can be computed)
    push_frequency: str = "DAILY"
    end_times: Mapping[str, int | None] = field(default_factory=dict)
    boundary_override: int | None = None
    # OFFLINE halves read with their ideal state: the segments that should be served now (None: not known, then
    # those ONLINE in the external view), and per segment the (CRC, push time) its end time was read for
    expected: frozenset[str] | None = None
    read_for: Mapping[str, tuple[int | None, int | None]] = field(default_factory=dict)
    strict: bool = False  # one replica per partition per query: upsert tables, instanceSelectorType strictReplicaGroup
    upsert: bool = False  # an upsert table: its servers read a partition whole (see ``hold_back``)
    # Halves with a segmentPartitionConfig: the function, and each segment's partitions: from its record (OFFLINE
    # segments, committed REALTIME ones), or a consuming segment's stream partition when that is known to hold
    # it alone (``cuvee.pruning.stream_partitions``); None or missing: not known
    partition_spec: PartitionSpec | None = None
    partitions: Mapping[str, SegmentPartitions | None] = field(default_factory=dict)
    stream_partitions: int = 0  # a partitioned REALTIME table's stream partitions, as its segments' names show
    # its consuming segments' partitions as their records say (the function their replicas check them under),
    # read once per segment: a consuming segment's record names it when created and keeps it until committed
    recorded: Mapping[str, SegmentPartitions | None] = field(default_factory=dict)
    timeout_ms: int | None = None  # the table config's query.timeoutMs
    pruners: frozenset[str] = frozenset()  # routing.segmentPrunerTypes, lower case (``cuvee.broker.segment_pruning``)
    # upsert: the replica each partition was last read from, carried from entry to entry (``route``)
    replicas: PartitionReplicas = field(default_factory=PartitionReplicas, compare=False, repr=False)
    # OFFLINE halves: the time column's unit, ms (Pinot's HOURLY rule reads it); for formatted date strings, their
    # Java pattern (recorded end times are then millis)
    unit_ms: float | None = None
    date_pattern: str | None = None

    @property
    def hold_back(self) -> bool:
        """Routing's ``hold_back``: a pauseless table reads both consuming segments of a partition mid-commit, and
        so does an upsert one: a replica's newest version of a key may already be in the next consuming
        segment, its older doc invalid, so holding that segment back would hide the key."""
        return not (self.pauseless or self.upsert)

    def route(self, available: Set[str], request_number: int = 0) -> RoutingTable:
        """This table's routing for one query (``cuvee.broker.routing.route`` with the table's own rule), over the
        segments lineage lets queries read. An upsert table's partitions stay on the replicas they were last
        routed to while those serve them (``replicas``): a query never reads a partition from a replica behind
        the one the previous query read."""
        routing = route(self.visible, available, request_number, hold_back=self.hold_back, strict=self.strict,
                        upsert=self.upsert, sticky=self.replicas.get() if self.upsert else None,
                        now_ms=int(time.time() * 1000))
        self.replicas.remember(routing.replicas)
        if not self.absent:
            return routing
        return dataclasses.replace(routing, unavailable=tuple(sorted({*routing.unavailable, *self.absent})))

    @cached_property
    def pruning_facts(self) -> Mapping[str, SegmentFacts]:
        """Per segment, what broker-side pruning knows (its recorded partitions), when the table asks for partition
        pruning (``segmentPrunerTypes: ["partition"]``) and has a usable ``segmentPartitionConfig``; else empty."""
        spec = self.partition_spec
        if PARTITION_PRUNER not in self.pruners or spec is None:
            return {}
        data_type = dict(self.info.value_types).get(spec.column)
        if data_type is None:
            return {}
        return {segment: partition_facts(spec.column, data_type, held) for segment, held in self.partitions.items()
                if held is not None and held.same_function(spec)}

    @cached_property
    def consuming_names(self) -> frozenset[str]:
        """Segments the view lists ONLINE nowhere (consuming, or not yet served)."""
        return frozenset(s for s, replicas in self.view.segments.items()
                         if not any(state is SegmentState.ONLINE for state in replicas.values()))

    @cached_property
    def absent(self) -> tuple[str, ...]:
        """Expected segments the external view does not list at all (every server holding them is down)."""
        if not self.expected:
            return ()
        return tuple(sorted(self.expected - set(self.view.segments)))

    @cached_property
    def visible(self) -> Mapping[str, Mapping[str, SegmentState]]:
        """The external view without the segments lineage hides (routing stays pure and lineage-agnostic)."""
        if not self.hidden:
            return self.view.segments
        return {s: r for s, r in self.view.segments.items() if s not in self.hidden}

    @cached_property
    def time_boundary(self) -> int | None:
        """The hybrid boundary this OFFLINE half defines: the explicit one, else Pinot's rule over the end times of
        the segments that should be served (``expected``; without an ideal state, those ONLINE somewhere and not
        hidden); None when no such segment has an end time. Computed once per entry (entries are rebuilt whenever
        their view, ideal state, lineage or override changes, and every poll), not once per query. A time column
        no boundary can split (a zoned date pattern: ``step_ms`` None) has none, even with an override stored
        before the controller refused one: servers could not compare its values with it."""
        if self.time_column is None or self.step_ms is None:
            return None
        if self.boundary_override is not None:
            return self.boundary_override
        if self.expected is not None:
            served = [self.end_times.get(s) for s in self.expected]
        else:
            served = [self.end_times.get(s) for s, replicas in self.view.segments.items()
                      if s not in self.hidden and SegmentState.ONLINE in replicas.values()]
        return compute_time_boundary(served, self.step_ms, self.push_frequency, self.unit_ms)


@dataclass(frozen=True)
class ClusterSnapshot:
    tables: Mapping[str, TableEntry] = field(default_factory=dict)
    servers: Mapping[str, str] = field(default_factory=dict)  # live instance id -> base URL

    @property
    def available(self) -> frozenset[str]:
        return frozenset(self.servers)


def table_info(name_with_type: str, schema: Schema, dim_table: bool = False) -> TableInfo:
    timestamps = frozenset(f.name for f in schema.fields if f.data_type is DataType.TIMESTAMP)
    multi = frozenset(f.name for f in schema.fields if not f.single_value)
    patterns = []
    for spec in schema.fields:  # STRING date-time columns EXTRACT/DATE_TRUNC can read (UTC, fields we translate)
        fmt = spec.time_format
        if fmt is None or fmt.kind is not TimeFormatKind.SIMPLE_DATE_FORMAT or not fmt.pattern or \
                spec.data_type is not DataType.STRING:
            continue
        zoned = "tz(" in (spec.format or "") or len((spec.format or "").split("|")) > 2
        if not zoned and strftime_pattern(fmt.pattern) is not None:
            patterns.append((spec.name, fmt.pattern))
    numbers = frozenset(f.name for f in schema.fields if f.single_value and f.data_type in (
        DataType.INT, DataType.LONG, DataType.FLOAT, DataType.DOUBLE))
    key_types = tuple(_KEY_TYPES.get(schema.column(c).data_type, "") if schema.has_column(c) else ""
                      for c in schema.primary_key_columns)
    return TableInfo(name_with_type, tuple(schema.column_names), timestamps, multi, tuple(patterns), numbers,
                     dim_table=dim_table, primary_key=tuple(schema.primary_key_columns), primary_key_types=key_types,
                     value_types=tuple((f.name, f.data_type.value) for f in schema.fields if f.single_value))


# what LOOKUP converts a fact value to, to compare it with a dimension table's key (Pinot reads the value as the
# key's type; a TIMESTAMP key as its LONG millis); other key types are compared as they are
_KEY_TYPES = {DataType.INT: "INTEGER", DataType.LONG: "BIGINT", DataType.FLOAT: "FLOAT", DataType.DOUBLE: "DOUBLE",
              DataType.STRING: "VARCHAR", DataType.BOOLEAN: "BOOLEAN", DataType.TIMESTAMP: "TIMESTAMP"}


class ClusterView:
    """The broker's cached, watched view of one cluster's tables and servers."""

    def __init__(self, store: ClusterStore, *, poll_seconds: float, stop_timeout_seconds: float = 5.0,
                 new_segment_grace_seconds: float = NEW_SEGMENT_GRACE_SECONDS):
        self.store = store
        self.paths = store.paths
        self.poll_seconds = poll_seconds
        self.new_segment_grace_ms = int(new_segment_grace_seconds * 1000)
        self.stop_timeout_seconds = stop_timeout_seconds
        self._snapshot = ClusterSnapshot()
        self._refresh_lock = threading.Lock()
        self._dirty = threading.Event()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._watches: dict[str, Subscription] = {}
        self._wanted: set[str] = set()  # the paths the refresh in progress watches
        self.refreshes = 0

    # ---- lifecycle ------------------------------------------------------------------------------------------

    def start(self) -> ClusterView:
        self.refresh()
        self._thread = threading.Thread(target=self._loop, name="broker-routing", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stopped.set()
        self._dirty.set()
        if self._thread is not None:
            self._thread.join(self.stop_timeout_seconds)
            if self._thread.is_alive():
                log.warning("the routing refresher did not stop within %.1f s (a metadata store call is stuck?)",
                            self.stop_timeout_seconds)
        for subscription in self._watches.values():
            try:
                subscription.cancel()
            except MetadataStoreError:
                pass
        self._watches.clear()

    # ---- readers --------------------------------------------------------------------------------------------

    @property
    def snapshot(self) -> ClusterSnapshot:
        return self._snapshot

    def resolve(self, name: str, *, load: bool = True) -> TableInfo | None:
        """The planner's TableResolver: ``events``, ``events_REALTIME`` or another casing of either. A hybrid
        table's raw name resolves to one table named by its raw name (both halves share the schema). A name the
        snapshot lacks is read from the metadata store unless ``load`` is false."""
        entries = self._lookup(self._snapshot, name)
        if not entries and load:
            self._load_named(name)
            entries = self._lookup(self._snapshot, name)
        if not entries:
            return None
        if len(entries) == 2:
            info = entries[0].info
            return TableInfo(raw_table_name(entries[0].name), info.columns, info.timestamp_columns,
                             info.multi_value_columns, info.string_time_patterns, info.number_columns)
        return entries[0].info

    def fingerprint(self, name: str) -> tuple[TableInfo, tuple[pa.Schema, ...]] | None:
        """What a cached plan of a query naming ``name`` depends on — the planner's view and the column types of
        each half — from the current snapshot only: never reads the store (it is called on the event loop)."""
        info = self.resolve(name, load=False)
        if info is None:
            return None
        return info, tuple(entry.arrow_schema for entry in self._lookup(self._snapshot, name))

    def table(self, name_with_type: str) -> TableEntry | None:
        return self._snapshot.tables.get(name_with_type)

    def halves(self, name: str) -> tuple[TableEntry | None, TableEntry | None]:
        """The (REALTIME, OFFLINE) entries ``name`` means in the current snapshot: one of them for a name with its
        type or a table with one half, both for a hybrid table's raw name."""
        entries = self._lookup(self._snapshot, name)
        realtime = next((e for e in entries if e.name.endswith(TableType.REALTIME.suffix)), None)
        offline = next((e for e in entries if e.name.endswith(TableType.OFFLINE.suffix)), None)
        return realtime, offline

    def targets(self, name: str) -> list[QueryTarget]:
        """What a query on ``name`` (as the planner resolved it) reads (``cuvee.broker.hybrid.query_targets``)."""
        return query_targets(*self.halves(name))

    @staticmethod
    def _lookup(snapshot: ClusterSnapshot, name: str) -> list[TableEntry]:
        """The entries ``name`` means: one (a name with type, or a raw name with one half), or a hybrid table's
        REALTIME and OFFLINE halves, in that order."""
        tables = snapshot.tables
        candidates = [name] if raw_table_name(name) != name else [name + t.suffix for t in TableType]
        found = [tables[c] for c in candidates if c in tables]
        if found:
            return found
        folded = {c.lower() for c in candidates}
        return [entry for key, entry in sorted(tables.items(), key=lambda kv: not kv[0].endswith("_REALTIME"))
                if key.lower() in folded]

    # ---- refresh --------------------------------------------------------------------------------------------

    def refresh(self) -> ClusterSnapshot:
        """Re-read tables, schemas, external views and servers; keep unchanged entries; install the new snapshot."""
        with self._refresh_lock:
            self._wanted = set()
            self._watch_children(self.paths.tables)
            self._watch_children(self.paths.live_instances)
            self._watch_children(self.paths.instances)
            old = self._snapshot
            tables: dict[str, TableEntry] = {}
            for name in self.store.children(self.paths.tables):
                entry = self._read_table(name, old.tables.get(name))
                if entry is not None:
                    tables[name] = entry
            for path in set(self._watches) - self._wanted:  # tables deleted since: stop watching their nodes
                self._unwatch(path)
            self._snapshot = ClusterSnapshot(tables, self._read_servers())
            self.refreshes += 1
            return self._snapshot

    def _load_named(self, name: str) -> None:
        """A table the snapshot lacks: read just its candidates (cheap) and add what exists."""
        candidates = [name] if raw_table_name(name) != name else [name + t.suffix for t in TableType]
        with self._refresh_lock:
            found: dict[str, TableEntry] = {}
            for candidate in candidates:
                try:
                    exists = self.store.metastore.exists(self.paths.table(candidate))
                except (MetadataStoreError, ValueError):
                    continue
                if exists is not None:
                    entry = self._read_table(candidate, None)
                    if entry is not None:
                        found[candidate] = entry
            if found:
                old = self._snapshot
                self._snapshot = ClusterSnapshot({**old.tables, **found}, old.servers)

    def _read_table(self, name: str, old: TableEntry | None) -> TableEntry | None:
        """The table's entry, or None if its config or schema is missing or invalid (logged, never raised)."""
        try:
            config_node = self.store.metastore.get(self.paths.table(name))
            config = TableConfig.from_json(orjson.loads(config_node.data))
            schema_name = str(config.segments.extra.get("schemaName") or raw_table_name(name))
            schema_path = self.paths.schema(schema_name)
            self._watch(schema_path)
            self._watch(self.paths.table(name))
            schema_node = self.store.metastore.get(schema_path)
            ev_path = self.paths.external_view(name)
            self._watch(ev_path)
            view = self.store.external_view(name) or ExternalView(name)
            self._watch(self.paths.lineage(name))
            hidden = hidden_segments(self.store.lineage(name))
            override, ideal = None, None
            mixed: frozenset[str] = frozenset()
            if config.table_type is TableType.REALTIME and config.indexing.extra.get("segmentPartitionConfig"):
                self._watch(self.paths.mixed_partitions(name))
                found_mixed = self.store.find(MixedPartitions, self.paths.mixed_partitions(name))
                mixed = frozenset(found_mixed.record.segments) if found_mixed is not None else frozenset()
            if config.table_type is TableType.OFFLINE:
                self._watch(self.paths.time_boundary(config.table_name))
                override = self.store.time_boundary_override(config.table_name)
                self._watch(self.paths.ideal_state(name))
                found_ideal = self.store.ideal_state(name)
                ideal = found_ideal.record if found_ideal is not None else IdealState(name)
        except NoNodeError as exc:
            log.debug("table %s is not complete yet: %s", name, exc)
            return None
        except (ConfigValidationError, RecordFormatError, orjson.JSONDecodeError, MetadataStoreError,
                ValueError) as exc:
            log.warning("table %s cannot be routed: %s", name, exc)
            return None
        pauseless = config.ingestion.pauseless_consumption
        expected: frozenset[str] | None = None
        end_times: dict[str, int | None] = {}
        read_for: dict[str, tuple[int | None, int | None]] = {}
        partitions: dict[str, SegmentPartitions | None] = {}
        if ideal is not None:
            end_times, read_for, partitions = self._segment_times(name, ideal, old)
            pushed_at = {segment: at for segment, (_, at) in read_for.items()}
            expected = expected_offline_segments(ideal.segments, view.segments, hidden, pushed_at,
                                                 int(time.time() * 1000), self.new_segment_grace_ms)
        same = old is not None and old.config_version == config_node.version and old.schema_version == schema_node.version
        if same:
            assert old is not None
            info, arrow_schema, units, pattern, spec = (old.info, old.arrow_schema, (old.step_ms, old.unit_ms),
                                                        old.date_pattern, old.partition_spec)
        else:
            try:
                schema = Schema.from_json(orjson.loads(schema_node.data))
            except (ConfigValidationError, orjson.JSONDecodeError) as exc:
                log.warning("table %s: schema %s is invalid: %s", name, schema_name, exc)
                return None
            info, arrow_schema = table_info(name, schema, config.is_dim_table), schema.arrow_schema()
            units = boundary_units(schema, config.time_column) or (None, None)
            times = column_string_times(schema, config.time_column)
            pattern = times.pattern if times is not None else None
            try:
                spec = partition_spec(config.indexing.extra, schema)
            except UserError as exc:  # not partitioned, as far as joins go
                log.warning("table %s: segmentPartitionConfig is not usable: %s", name, exc)
                spec = None
        count = 0
        recorded: dict[str, SegmentPartitions | None] = {}
        if spec is not None and ideal is None:
            partitions, count, recorded = self._realtime_partitions(name, view, spec, mixed, old)
        return TableEntry(name, info, arrow_schema, view, config_node.version, schema_node.version, pauseless,
                          hidden, config.time_column, units[0], config.push_frequency, end_times, override,
                          expected, read_for, strict=config.is_upsert
                          or config.routing.instance_selector_type == "strictReplicaGroup", upsert=config.is_upsert,
                          partition_spec=spec, partitions=partitions if spec is not None else {},
                          stream_partitions=count, recorded=recorded,
                          timeout_ms=config.query.timeout_ms,
                          pruners=frozenset(t.lower() for t in config.routing.segment_pruner_types),
                          replicas=old.replicas if old is not None else PartitionReplicas(),
                          unit_ms=units[1], date_pattern=pattern)

    def _segment_times(self, name: str, ideal: IdealState, old: TableEntry | None
                       ) -> tuple[dict[str, int | None], dict[str, tuple[int | None, int | None]],
                                  dict[str, SegmentPartitions | None]]:
        """Each offline segment's end time (``SegmentRecord.time_max``, None when unknown), (CRC, push time) and
        partitions. Cached by name and the ideal state's CRC, whatever the end time: a refresh reads only the
        records of segments new (or pushed again with other content) since the last one, and those it could not
        read."""
        known_end = old.end_times if old is not None else {}
        known_for = old.read_for if old is not None else {}
        known_parts = old.partitions if old is not None else {}
        end_times: dict[str, int | None] = {}
        read_for: dict[str, tuple[int | None, int | None]] = {}
        partitions: dict[str, SegmentPartitions | None] = {}
        for segment in ideal.segments:
            crc = ideal.crcs.get(segment)
            if segment in known_for and known_for[segment][0] == crc:
                end_times[segment], read_for[segment] = known_end.get(segment), known_for[segment]
                partitions[segment] = known_parts.get(segment)
                continue
            try:
                found = self.store.find_segment(name, segment)
            except (RecordFormatError, MetadataStoreError, ValueError) as exc:
                log.warning("table %s: metadata of segment %s cannot be read: %s", name, segment, exc)
                end_times[segment] = None  # not cached: read again next refresh
                continue
            if found is None:
                end_times[segment] = None  # the record comes first on a push: a delete in flight; read again
                continue
            end_times[segment] = found.record.time_max
            read_for[segment] = (crc, found.record.commit_time_ms)
            partitions[segment] = found.record.partitions
        return end_times, read_for, partitions

    def _realtime_partitions(self, name: str, view: ExternalView, spec: PartitionSpec, mixed: frozenset[str],
                             old: TableEntry | None
                             ) -> tuple[dict[str, SegmentPartitions | None], int, dict[str, SegmentPartitions | None]]:
        """A partitioned REALTIME table's segments' partitions, its stream's partition count, and its consuming
        segments' recorded partitions: a committed segment's from its record (read once: a committed segment's
        rows do not change), a consuming one's by ``consuming_partitions`` from its record's (read once: the
        record keeps them until the segment is committed). The stream's partition count is carried from the last
        refresh and grown by the segments new since (it never shrinks; one too large only stops consuming segments
        from being pruned)."""
        known = old.partitions if old is not None else {}
        known_recorded = old.recorded if old is not None else {}
        recorded: dict[str, SegmentPartitions | None] = {}
        count = max(old.stream_partitions if old is not None else 0,
                    stream_partition_count(s for s in view.segments if s not in known))
        partitions: dict[str, SegmentPartitions | None] = {}
        for segment, replicas in view.segments.items():
            if segment in mixed:
                continue  # a replica saw rows of another partition in it: not known (read again once committed)
            if not any(state is SegmentState.ONLINE for state in replicas.values()):
                if segment in known_recorded:
                    recorded[segment] = known_recorded[segment]
                else:
                    try:
                        found = self.store.find_segment(name, segment)
                    except (RecordFormatError, MetadataStoreError, ValueError) as exc:
                        log.warning("table %s: metadata of segment %s cannot be read: %s", name, segment, exc)
                        continue  # not known: not pruned; read again next refresh
                    if found is None:
                        continue
                    recorded[segment] = found.record.partitions
                partitions[segment] = consuming_partitions(segment, spec, count, mixed, recorded[segment])
                continue
            if segment in known and segment not in (old.consuming_names if old is not None else ()):
                partitions[segment] = known[segment]
                continue
            try:
                found = self.store.find_segment(name, segment)
            except (RecordFormatError, MetadataStoreError, ValueError) as exc:
                log.warning("table %s: metadata of segment %s cannot be read: %s", name, segment, exc)
                continue
            if found is not None and not found.record.is_consuming:
                partitions[segment] = found.record.partitions
        return partitions, count, recorded

    def _read_servers(self) -> dict[str, str]:
        live = set(self.store.live_instance_ids())
        servers: dict[str, str] = {}
        for instance_id in sorted(live):
            try:
                found = self.store.find(InstanceInfo, self.paths.instance(instance_id))
            except (RecordFormatError, MetadataStoreError) as exc:
                log.warning("instance %s cannot be read: %s", instance_id, exc)
                continue
            if found is None or HTTP_PORT_NAME not in found.record.ports:
                continue
            url = found.record.url(HTTP_PORT_NAME)
            if url is not None:
                servers[instance_id] = url
        return servers

    # ---- watches --------------------------------------------------------------------------------------------

    def _on_event(self, _: WatchEvent) -> None:
        self._dirty.set()

    def _watch(self, path: str) -> None:
        self._subscribe(path, lambda: self.store.metastore.watch(path, self._on_event))

    def _watch_children(self, path: str) -> None:
        self._subscribe(path, lambda: self.store.metastore.watch_children(path, self._on_event))

    def _subscribe(self, path: str, make: Callable[[], Subscription]) -> None:
        self._wanted.add(path)
        if path in self._watches or self._stopped.is_set():
            return
        try:
            self._watches[path] = make()
        except NoNodeError:
            pass  # a children watch needs its node; polling covers it until the node exists
        except MetadataStoreError as exc:
            log.warning("cannot watch %s (polling instead): %s", path, exc)

    def _unwatch(self, path: str) -> None:
        subscription = self._watches.pop(path, None)
        if subscription is not None:
            try:
                subscription.cancel()
            except MetadataStoreError:
                pass

    def _loop(self) -> None:
        while not self._stopped.is_set():
            self._dirty.wait(self.poll_seconds)
            if self._stopped.is_set():
                return
            self._dirty.clear()
            try:
                self.refresh()
            except Exception:  # a store hiccup must not end routing updates; the next poll retries
                log.exception("refreshing the routing view failed")
