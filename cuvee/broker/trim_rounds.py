"""The broker's second round for a GROUP BY whose servers trimmed their groups (``cuvee.query.exact_trim``).

The first round is the query as always. Only when more than one server answered and some server cut its groups by a
ranking that is not exact does ``exact_trim.decide`` run over their answers; when it asks for more, each server it
names is sent its first request again (same half of a hybrid table, same segments but those another replica
answered for it) with either the keys of the groups wanted (``GroupLimits.wanted``: their partials, none cut) or the
trim off (``minServerGroupTrimSize`` 0; the ``numGroupsLimit`` still bounds it). Replies then:

- a wanted-groups answer adds its rows to the merge (the server did not send those groups before, so no group is
  counted twice); its statistics add nothing (its rows were scanned and counted in the first round) but its errors;
- an untrimmed answer replaces that server's first one, statistics included;
- once every second-round server has answered, the answer is exact: ``groupsTrimmed`` is cleared (a cut by
  ``numGroupsLimit`` is still reported as ``numGroupsLimitReached``, and a server that cut by that limit alone is
  not asked untrimmed again: it would cut the same).

Each group's partial from a server comes from one round only. On an append-only realtime table rows that arrive
between the two rounds may be in a candidate's second-round partial and not in the first round's groups (an answer
as fresh as its second round, as any query's is as fresh as its scan), and none is counted twice. On an **upsert**
table a row may change group between the rounds (a newer version of its key with another group value): its old
version counted in the first round's groups and its new one in a wanted group's partial would count it twice. So
on an upsert table a server asked again is always asked untrimmed, and its second answer replaces its whole first
one (a key's versions all live on the one server that holds its partition, so each server's answer is of one
moment).

The upfront half of the rule (a ranking the broker cannot bound is not trimmed at all on several servers) is the
handler's, when it builds the first round's requests (``untrimmed_first``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from cuvee.broker.scatter import ServerCall, ServerReply
from cuvee.protocol.query import ServerQueryStats
from cuvee.query.exact_trim import Decision, decide
from cuvee.query.execute import PastDeadlineError
from cuvee.query.group_trim import GroupTrim

log = logging.getLogger(__name__)

Ask = Callable[[list[ServerCall]], Awaitable[list[ServerReply]]]


def needs_exactness(trim: GroupTrim | None) -> bool:
    """Whether a plan's trim, if servers cut, can change its answer (a ranking on partials, not by keys)."""
    return trim is not None and trim.rows is not None and not trim.exact


def untrimmed_first(trim: GroupTrim | None, servers: int) -> bool:
    """Whether the first round goes untrimmed: several servers, and a ranking the bounds cannot use (AVG, an
    expression, a key first…), so that a trim could only be undone by a second round of every group anyway."""
    return needs_exactness(trim) and trim is not None and trim.bound is None and servers > 1


def _cut(reply: ServerReply) -> bool:
    stats = reply.stats
    return reply.table is not None and stats is not None and (stats.groupsTrimmed or stats.numGroupsLimitReached)


async def exact_groups(trim: GroupTrim | None, calls: Sequence[ServerCall], replies: list[ServerReply],
                       remaining_ms: Callable[[], int], ask: Ask, *,
                       upsert: bool = False) -> tuple[list[ServerReply], int]:
    """``replies`` (one per call) made exact by a second round when the first one's cuts may have changed the
    answer; and how many servers were asked again (0 on the common path: nothing cut, or one server).
    ``remaining_ms``: the query's time left (the bounding stops there, the first round's answer then standing, still
    reported as ``groupsTrimmed``); ``upsert``: an upsert table's, whose servers are asked again untrimmed only."""
    if not needs_exactness(trim) or not any(_cut(r) for r in replies) or \
            sum(1 for r in replies if r.table is not None) < 2:
        return replies, 0
    assert trim is not None and trim.rows is not None
    try:
        decision = await asyncio.to_thread(decide, trim.bound, trim.rows, [r.table for r in replies],
                                           [_cut(r) for r in replies], time.monotonic() + remaining_ms() / 1000)
    except PastDeadlineError:
        log.info("bounding the trimmed groups took the query's time left; answering from the first round")
        return replies, 0
    except Exception:  # noqa: BLE001 - a bug here must cost the exactness (still reported), never the query
        log.warning("bounding the trimmed groups failed; answering from the first round", exc_info=True)
        return replies, 0
    if upsert and decision.wanted:  # a row that changed group between the rounds would be counted in both
        decision = Decision(untrimmed=tuple(sorted({*decision.wanted, *decision.untrimmed})))
    left_ms = remaining_ms()  # after the bounding, which took some of it
    again: list[tuple[int, ServerCall]] = []
    for i, keys in decision.wanted.items():
        again.append((i, _with_groups(_own(calls, replies, i), left_ms, wanted=keys)))
    for i in decision.untrimmed:
        stats = replies[i].stats
        if stats is not None and stats.groupsTrimmed:  # a cut by numGroupsLimit alone would be the same again
            again.append((i, _with_groups(_own(calls, replies, i), left_ms, min_trim_size=0)))
    second = await ask([call for _, call in again]) if again else []
    out = list(replies)
    added: list[ServerReply] = []
    for (i, _), reply in zip(again, second):
        if i in decision.wanted:
            added.append(_errors_only(reply))
        else:
            out[i] = reply
    whole = all(r.table is not None and r.stats is not None and not r.stats.missingSegments
                and not r.stats.exceptions for r in second)
    if whole and (again or decision.complete):
        out = [dataclasses.replace(r, stats=dataclasses.replace(r.stats, groupsTrimmed=False))
               if r.stats is not None and r.stats.groupsTrimmed else r for r in out]
    return out + added, len(again)


def _own(calls: Sequence[ServerCall], replies: Sequence[ServerReply], i: int) -> ServerCall:
    """Call ``i`` without the segments another call answered (a replica asked for those its server no longer
    held, ``BrokerHandler._ask_again``): asked again for them, the server would report them missing again."""
    elsewhere = {segment for j, (call, reply) in enumerate(zip(calls, replies)) if j != i and reply.stats is not None
                 for segment in call.request.segments if segment not in reply.stats.missingSegments}
    request = calls[i].request
    if not elsewhere.intersection(request.segments):
        return calls[i]
    segments = tuple(s for s in request.segments if s not in elsewhere)
    return dataclasses.replace(calls[i], request=dataclasses.replace(request, segments=segments))


def _with_groups(call: ServerCall, remaining_ms: int, **changes: object) -> ServerCall:
    request = call.request
    assert request.groups is not None
    groups = dataclasses.replace(request.groups, **changes)  # type: ignore[arg-type]
    return dataclasses.replace(call, request=dataclasses.replace(request, groups=groups, timeout_ms=remaining_ms))


def _errors_only(reply: ServerReply) -> ServerReply:
    """A wanted-groups answer: its rows, and of its statistics only what went wrong (its rows were counted in the
    first round)."""
    if reply.stats is None:
        return reply
    return dataclasses.replace(reply, stats=ServerQueryStats(missingSegments=reply.stats.missingSegments,
                                                             exceptions=reply.stats.exceptions))
