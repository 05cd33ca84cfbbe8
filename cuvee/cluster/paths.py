"""Where each piece of cluster state lives in the metadata store (DESIGN.md section 3).

This is the only module that spells metadata paths; every other module asks ``ClusterPaths`` for them, so the
layout can change in one place. ``table`` always means the name with its type (``events_REALTIME``), the key Pinot
uses, so a hybrid table's OFFLINE and REALTIME halves never share a node.
"""

from __future__ import annotations

import zlib

from dataclasses import dataclass

from cuvee.errors import UserError

ROOT = "/cuvee"


def check_name(kind: str, name: str) -> str:
    """A name becomes one path segment: refuse what would change the path's shape."""
    if not isinstance(name, str) or not name or name in (".", "..") or "/" in name or "\x00" in name:
        raise UserError(f"invalid {kind} name {name!r}: it must be non-empty and contain no '/'")
    return name


@dataclass(frozen=True)
class ClusterPaths:
    """The metadata paths of one cluster, ``/cuvee/<cluster>/...``."""

    cluster: str

    def __post_init__(self) -> None:
        check_name("cluster", self.cluster)

    @property
    def root(self) -> str:
        return f"{ROOT}/{self.cluster}"

    # ---- instances and liveness -----------------------------------------------------------------------------

    @property
    def instances(self) -> str:
        return f"{self.root}/instances"

    def instance(self, instance_id: str) -> str:
        return f"{self.instances}/{check_name('instance', instance_id)}"

    @property
    def live_instances(self) -> str:
        return f"{self.root}/live"

    def live(self, instance_id: str) -> str:
        """Ephemeral: present while the instance's session is."""
        return f"{self.live_instances}/{check_name('instance', instance_id)}"

    @property
    def leader(self) -> str:
        """The controller leader election node."""
        return f"{self.root}/leader"

    # ---- schemas and table configs ----------------------------------------------------------------------

    @property
    def schemas(self) -> str:
        return f"{self.root}/schemas"

    def schema(self, name: str) -> str:
        return f"{self.schemas}/{check_name('schema', name)}"

    def schema_versions(self, name: str) -> str:
        """Every version of schema ``name`` ever written, one immutable child each (``cuvee.cluster.schemas``)."""
        return f"{self.root}/schemaversions/{check_name('schema', name)}"

    def schema_version(self, name: str, version: int) -> str:
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ValueError(f"a schema version is a non-negative integer, got {version!r}")
        return f"{self.schema_versions(name)}/{version}"

    def served_schema(self, table: str) -> str:
        """The schema version the table's segments are served under, written by the controller at creation and at
        each reload (``ServedSchemaVersion``)."""
        return f"{self.root}/servedschema/{check_name('table', table)}"

    @property
    def tables(self) -> str:
        return f"{self.root}/tables"

    def table(self, table: str) -> str:
        return f"{self.tables}/{check_name('table', table)}"

    # ---- segments and their assignment --------------------------------------------------------------------

    def segments(self, table: str) -> str:
        return f"{self.root}/segments/{check_name('table', table)}"

    def segment(self, table: str, segment: str) -> str:
        return f"{self.segments(table)}/{check_name('segment', segment)}"

    def ideal_state(self, table: str) -> str:
        return f"{self.root}/idealstate/{check_name('table', table)}"

    def current_states(self, instance_id: str) -> str:
        return f"{self.root}/currentstate/{check_name('instance', instance_id)}"

    def current_state(self, instance_id: str, table: str) -> str:
        return f"{self.current_states(instance_id)}/{check_name('table', table)}"

    def external_view(self, table: str) -> str:
        return f"{self.root}/externalview/{check_name('table', table)}"

    # ---- batch data: lineage, time boundary, deletions waiting for their grace period --------------------

    def mixed_partitions(self, table: str) -> str:
        """A partitioned REALTIME table's consuming segments holding rows of other partitions
        (``cuvee.pruning.stream_partitions.MixedPartitions``): servers add, brokers watch."""
        return f"{self.root}/mixedpartitions/{check_name('table', table)}"

    def lineage(self, table: str) -> str:
        """The table's segment lineage entries (one versioned node)."""
        return f"{self.root}/lineage/{check_name('table', table)}"

    # ---- auth ------------------------------------------------------------------------------------------------

    @property
    def principals(self) -> str:
        """Principals managed over REST (``cuvee.auth.stored``), one node each, secrets hashed."""
        return f"{self.root}/principals"

    def principal(self, name: str) -> str:
        return f"{self.principals}/{check_name('principal', name)}"

    def stories(self, table: str) -> str:
        """The table's segment stories (``cuvee.story``)."""
        return f"{self.root}/stories/{check_name('table', table)}"

    def story(self, table: str, segment: str) -> str:
        """One segment's story: what every role did to it, in time order, bounded."""
        return f"{self.stories(table)}/{check_name('segment', segment)}"

    def jobs(self, table: str) -> str:
        """The table's recent controller jobs (reloads, force commits), ``ControllerJobs``."""
        return f"{self.root}/jobs/{check_name('table', table)}"

    @property
    def all_jobs(self) -> str:
        return f"{self.root}/jobs"

    def time_boundary(self, raw_table: str) -> str:
        """A hybrid table's explicit time boundary (``POST /tables/{t}/timeBoundary``), keyed by the raw name."""
        return f"{self.root}/timeboundary/{check_name('table', raw_table)}"

    def rebalance(self, table: str) -> str:
        """The table's last rebalance job and its progress (written by the leader that runs it)."""
        return f"{self.root}/rebalance/{check_name('table', table)}"

    def tasks(self, table: str) -> str:
        """A table's maintenance tasks (MergeRollupTask, …): their watermarks and runs, one node per task type."""
        return f"{self.root}/tasks/{check_name('table', table)}"

    def task(self, table: str, task_type: str) -> str:
        return f"{self.tasks(table)}/{check_name('task type', task_type)}"

    @property
    def pending_deletions(self) -> str:
        return f"{self.root}/deletions"

    def pending_deletion(self, table: str, segment: str, download_uri: str) -> str:
        """A deleted (or superseded) segment archive, deleted for good once its grace period has passed. One node per
        object: a segment pushed again under its name and later deleted leaves two archives to delete."""
        digest = zlib.crc32(download_uri.encode()) & 0xFFFFFFFF
        return f"{self.pending_deletions}/{check_name('table', table)}__{check_name('segment', segment)}__{digest:08x}"

