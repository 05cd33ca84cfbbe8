"""Which server answers for which segment of one query: pure, from the external view alone.

The rule (the seed's "prefer ONLINE, at most one CONSUMING segment per partition"), per stream partition, walking
the partition's segments by sequence:

- a segment ONLINE on some available replica is always routed, to one of its ONLINE replicas;
- the first segment that is ONLINE nowhere is routed to one of its CONSUMING replicas; if it has none it is
  *unavailable* (reported to the user, Pinot's error 305);
- every later segment that is ONLINE nowhere is *held back* (normally the next consuming segment, created by a
  commit before the previous one is ONLINE anywhere) until that first one goes ONLINE.

So a query never reads a committed row twice (a segment's rows are in one replica's copy, and the consuming
segment of a partition ends where the next one starts), and never misses a committed row (committed segments
are routed whenever any replica serves them). Segments whose names are not LLC names (batch-pushed) stand alone.

Pauseless tables (``hold_back=False``) start segment N+1 consuming when N's commit *starts*, so a partition has two
CONSUMING segments for the whole commit. Holding N+1 back would hide its fresh rows for that long, so there every
segment ONLINE nowhere is routed to one of its CONSUMING replicas. That double-counts nothing: N's end offset is
fixed before N+1 exists and N+1 starts there, and a server starting N+1 caps its copy of N at that offset (a
replica that had consumed past it serves only the rows below it: ``ConsumingSegment.cap``), so what N and N+1
serve never overlaps. The cost, with replicas > 1:
the replica read for N may still be catching up to N's end offset, so a query can briefly miss some of N's
not-yet-committed rows while it sees N+1's (never a committed row, never a row twice). A later segment ONLINE
nowhere with no CONSUMING replica either is still held back, not unavailable (a next segment whose consumers are
not up yet must not turn into a 305); only the first such segment of a partition is unavailable, as above. A
consuming segment is read only from a replica that also holds its successor, if any server holds the successor:
that is where the segment has been capped (``_capped``); if none of its replicas does yet, it is read from any
replica and the consuming segments after it are held back for that query.

Committed segments' replicas are chosen round-robin by the request number: segment ``i`` (in name order) of
request ``r`` goes to candidate ``(r + i) % n``, which spreads each query's segments evenly over the replicas and
alternates between queries. A consuming segment is always read from the same replica (a stable hash of its name),
because replicas consume at different speeds: alternating would make fresh rows appear and vanish between
queries. Only *available* instances count (live, and registered with an address).

An upsert table's partition stays on the replica it was last read from (``sticky``: the caller's memory of
``RoutingTable.replicas``) while that replica serves every segment routed for the partition; only then is it
chosen afresh (the replica serving most of them, ties by a stable hash of the partition, never by request). Its
server reads the partition whole, consuming segments included, and replicas are at different points of the
stream: a replica reports a new consuming segment CONSUMING before it has read a row of it (it first waits until
the previous segment is served committed there). A choice made afresh from every external view moved a partition
as replicas reported their transitions, from the replica that had read a key's only version to one that had not:
the key vanished from the next query. Moving only when the replica stops serving a segment moves a partition
away from one that failed or lost a segment. A newest consuming segment the replica does not list yet does not
move it: the external view lags the servers, and a replica listed mid-commit may already read that segment (its
server reads it unlisted) further than the replica that lists it, which may not have read a row of it yet.
"""

from __future__ import annotations

import functools
import zlib
from collections import Counter
from collections.abc import Mapping, Set
from dataclasses import dataclass, field

from cuvee.cluster.records import SegmentState
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName

Assignment = Mapping[str, Mapping[str, SegmentState]]


@dataclass(frozen=True)
class RoutingTable:
    """One query's routing: ``servers`` maps an instance to the segments it is asked for (sorted)."""

    servers: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    consuming: frozenset[str] = frozenset()  # routed segments read from a CONSUMING replica
    unavailable: tuple[str, ...] = ()  # a partition's first segment ONLINE nowhere, if no CONSUMING replica either
    held_back: tuple[str, ...] = ()  # later segments ONLINE nowhere (pauseless: only those not CONSUMING either)
    replicas: Mapping[str, str] = field(default_factory=dict)  # upsert: partition group -> the replica reading it

    @property
    def num_segments(self) -> int:
        return sum(len(s) for s in self.servers.values())

    def segments_of(self, instance: str) -> tuple[str, ...]:
        return self.servers.get(instance, ())


@dataclass(frozen=True)
class _Choice:
    segment: str
    candidates: tuple[str, ...]
    consuming: bool


@functools.lru_cache(maxsize=1 << 16)  # every query routes every segment: parsing the names was ~4% of a broker's CPU
def _partition_key(segment: str) -> tuple[str, int, int]:
    """(group, sequence, 0): LLC segments group by table and partition; other names each form their own group."""
    try:
        name = LLCSegmentName.parse(segment)
    except InvalidSegmentNameError:
        return (f"\x00{segment}", 0, 0)
    return (f"{name.table}\x00{name.partition}", name.sequence, 0)


UNLISTED_GRACE_MS = 120_000  # how long an upsert partition waits on its replica for its newest segment's listing


def route(view: Assignment, available: Set[str], request_number: int = 0, *, hold_back: bool = True,
          strict: bool = False, upsert: bool = False, sticky: Mapping[str, str] | None = None,
          now_ms: int | None = None) -> RoutingTable:
    """Route one query over the external view ``view`` ({segment: {instance: state}}). ``hold_back=False`` for
    pauseless tables: every CONSUMING segment ONLINE nowhere is read, not just a partition's first. ``strict``
    (upsert tables, ``instanceSelectorType: strictReplicaGroup``): all routed segments of a stream partition are
    read from one replica, because each replica decides alone which doc of a key is valid and only one replica's
    decisions are consistent with each other (``_one_replica_per_partition``). ``upsert``: the chosen replica
    reads its own copy of a segment mid-commit, even one still CONSUMING there (its server reads the partition
    whole, consistently); a strict table without upsert reads only the copies routing chose. ``sticky`` (upsert):
    the replica each partition group was last read from (``RoutingTable.replicas`` of earlier queries);
    ``now_ms``: the wall clock, which bounds how long a partition waits for its replica to list its newest segment
    (``UNLISTED_GRACE_MS`` from the segment's creation minute; None: no bound, for tests of the rule alone)."""
    groups: dict[str, list[tuple[int, str]]] = {}
    for segment in view:
        group, sequence, _ = _partition_key(segment)
        groups.setdefault(group, []).append((sequence, segment))
    choices: list[_Choice] = []
    unavailable: list[str] = []
    held_back: list[str] = []
    for members in groups.values():
        blocked = False  # an earlier segment of this partition is ONLINE nowhere
        stopped = False  # an earlier consuming segment was read from an uncapped replica: read nothing after it
        ordered = [segment for _, segment in sorted(members)]
        for position, segment in enumerate(ordered):
            replicas = view[segment]
            online = _replicas_in(replicas, SegmentState.ONLINE, available)
            if online:
                choices.append(_Choice(segment, online, consuming=False))
                continue
            consuming = _replicas_in(replicas, SegmentState.CONSUMING, available)
            if consuming and not stopped and not (blocked and hold_back):
                if not hold_back and position + 1 < len(ordered):
                    capped = _capped(consuming, view[ordered[position + 1]], available)
                    stopped = not capped  # nobody holding the successor holds this one: read it, not what follows
                    consuming = capped or consuming
                choices.append(_Choice(segment, consuming, consuming=True))
            elif blocked:
                held_back.append(segment)
            else:
                unavailable.append(segment)
            blocked = True
    replicas: dict[str, str] = {}
    if strict:
        choices, split, later, replicas = _one_replica_per_partition(choices, view, available, request_number,
                                                                     upsert, sticky or {}, now_ms)
        unavailable += split
        held_back += later
    servers: dict[str, list[str]] = {}
    for index, choice in enumerate(sorted(choices, key=lambda c: c.segment)):
        # Committed segments are identical on every replica: rotate them per request to balance load. A consuming
        # segment's replicas differ in progress, so every query reads it from the same replica (spread across
        # partitions by a stable hash): a client's successive queries never see fresh rows disappear.
        turn = zlib.crc32(choice.segment.encode()) if choice.consuming else request_number + index
        instance = choice.candidates[turn % len(choice.candidates)]
        servers.setdefault(instance, []).append(choice.segment)
    return RoutingTable(
        servers={inst: tuple(sorted(segs)) for inst, segs in sorted(servers.items())},
        consuming=frozenset(c.segment for c in choices if c.consuming),
        unavailable=tuple(sorted(unavailable)),
        held_back=tuple(sorted(held_back)),
        replicas=replicas,
    )


def _one_replica_per_partition(choices: list[_Choice], view: Assignment, available: Set[str], request_number: int,
                               upsert: bool, sticky: Mapping[str, str], now_ms: int | None = None
                               ) -> tuple[list[_Choice], list[str], list[str], dict[str, str]]:
    """Each partition's choices narrowed to one instance: one that serves all of them, else the one serving most,
    the segments it does not serve then unavailable (mixing replicas could show two versions of a key, or none).
    For an upsert table a segment mid-commit (ONLINE on one replica, still CONSUMING on another) is read from
    whichever the partition's replica is (ONLINE or CONSUMING there): that server's own copy is consistent with its
    other segments; otherwise only the candidates routing chose count (an ONLINE segment is never read from a
    lagging consuming copy: committed rows are never missed). A strict partition with a consuming segment is read
    from the same replica every query (a stable hash, as route() does for consuming segments); one of committed
    segments only rotates between queries. An upsert partition stays on its ``sticky`` replica while that one
    serves all of it, and is otherwise chosen by the same stable hash, never rotated: its server also reads
    consuming segments the external view does not list yet, so it stays there while only the partition's newest
    consuming segments are not listed on it yet (``_newest_consuming_not_listed``: those are held back). Returns
    (choices, unavailable segments, held-back segments, the replica of each upsert partition)."""
    groups: dict[str, list[_Choice]] = {}
    for choice in choices:
        groups.setdefault(_partition_key(choice.segment)[0], []).append(choice)
    out: list[_Choice] = []
    unavailable: list[str] = []
    held_back: list[str] = []
    replicas: dict[str, str] = {}
    for group, members in groups.items():
        if upsert:
            serving = {m.segment: {i: s for i, s in view[m.segment].items()
                                   if i in available and s in (SegmentState.ONLINE, SegmentState.CONSUMING)}
                       for m in members}
        else:
            state_of = {True: SegmentState.CONSUMING, False: SegmentState.ONLINE}
            serving = {m.segment: {i: state_of[m.consuming] for i in m.candidates} for m in members}
        instance = sticky.get(group) if upsert else None
        later = _newest_consuming_not_listed(members, serving, view, instance, now_ms) if instance is not None else []
        if instance is None or any(instance not in replicas_of for s, replicas_of in serving.items()
                                   if s not in later):
            counts = Counter(i for replicas_of in serving.values() for i in replicas_of)
            most = max(counts.values())
            ordered = sorted(i for i, count in counts.items() if count == most)
            spread = zlib.crc32(group.encode())
            turn = spread if upsert or any(m.consuming for m in members) else request_number + spread
            instance = ordered[turn % len(ordered)]
            later = []  # a replica chosen afresh holds nothing back
        if upsert:
            replicas[group] = instance
        for m in members:
            state = serving[m.segment].get(instance)
            if m.segment in later:
                held_back.append(m.segment)  # its server reads it when it has it (the partition whole)
            elif state is None:
                unavailable.append(m.segment)
            else:
                out.append(_Choice(m.segment, (instance,), state is SegmentState.CONSUMING))
    return out, unavailable, held_back, replicas


def _newest_consuming_not_listed(members: list[_Choice], serving: Mapping[str, Mapping[str, SegmentState]],
                                 view: Assignment, instance: str, now_ms: int | None = None) -> list[str]:
    """An upsert partition's newest segments, CONSUMING elsewhere, that its ``sticky`` replica does not list at all
    yet while it serves every older one: that replica is not behind, its report is (a new consuming segment is
    listed once the previous one's commit finished there, and its server reads the partition whole, unlisted
    consuming segments included). Moving the partition for them would go to a replica that lists the segment
    but may not have read it yet: a key's newest version, seen a query before, would vanish. Empty when the
    replica misses any other segment (then the partition moves) or lists the segment in another state (ERROR),
    and once a segment is older than ``UNLISTED_GRACE_MS`` (by ``now_ms``): a replica that does not list it by then
    is stuck (its transitions queued behind downloads, a failing start), not late to report, and reading it
    would hide that segment's rows with no error while another replica serves them."""
    ordered = sorted(members, key=lambda m: _partition_key(m.segment)[1])
    later: list[str] = []
    for m in reversed(ordered):
        if instance in serving[m.segment]:
            break
        if not m.consuming or instance in view[m.segment] or _older_than_grace(m.segment, now_ms):
            return []
        later.append(m.segment)
    return [] if len(later) == len(ordered) else later  # a replica missing an older one moves (the caller's rule)


def _older_than_grace(segment: str, now_ms: int | None) -> bool:
    if now_ms is None:
        return False
    try:
        created = LLCSegmentName.parse(segment).created_ms
    except InvalidSegmentNameError:
        return True
    return now_ms - created > UNLISTED_GRACE_MS


def _capped(candidates: tuple[str, ...], successor: Mapping[str, SegmentState],
            available: Set[str]) -> tuple[str, ...]:
    """The replicas of a consuming segment that also hold its successor (pauseless): a server caps a segment where
    the next one starts when it takes the next one up, so only those never serve a row the successor holds too.
    All candidates when no available server holds the successor yet (nothing to overlap with)."""
    holders = set(_replicas_in(successor, SegmentState.CONSUMING, available))
    holders |= set(_replicas_in(successor, SegmentState.ONLINE, available))
    if not holders:
        return candidates
    return tuple(c for c in candidates if c in holders)


def _replicas_in(replicas: Mapping[str, SegmentState], state: SegmentState, available: Set[str]) -> tuple[str, ...]:
    return tuple(sorted(inst for inst, s in replicas.items() if s is state and inst in available))
