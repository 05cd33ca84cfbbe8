"""`cuvee status`: a table's health per partition, from the controller's ``GET /tables/{t}/status``."""

from __future__ import annotations

import argparse
import time
from typing import Any

import httpx
import orjson
from rich.console import Console, Group
from rich.live import Live
from rich.markup import escape
from rich.table import Table

from cuvee.auth.client import user_headers
from cuvee.errors import UserError
from cuvee.protocol.segment_name import InvalidSegmentNameError, LLCSegmentName
from cuvee.status.config_notes import config_notes
from cuvee.status.health import replica_error

_COLOURS = {"HEALTHY": "green", "LAGGING": "yellow", "PAUSED": "cyan", "UNREACHABLE": "red", "ERROR": "red",
            "STOPPED": "red"}


def register(groups: argparse._SubParsersAction) -> None:
    parser = groups.add_parser("status", help="health, offsets and lag of a table's partitions")
    parser.add_argument("--controller", required=True, help="the controller's URL, e.g. http://localhost:9000")
    parser.add_argument("--table", help="one table (default: every realtime table)")
    parser.add_argument("--segment", help="print this segment's story instead: what every role did to it")
    parser.add_argument("--json", action="store_true", help="print the status as JSON")
    parser.add_argument("--watch", type=float, nargs="?", const=2.0, metavar="SECONDS",
                        help="refresh every SECONDS (default 2) until interrupted")
    parser.set_defaults(func=_status)


def _status(args: argparse.Namespace) -> int:
    url = args.controller.rstrip("/")
    with httpx.Client(timeout=30, headers=user_headers()) as http:
        if args.segment:
            return _story(http, url, args.segment, args.table, args.json)
        if args.json:
            print(orjson.dumps(_fetch(http, url, args.table), option=orjson.OPT_INDENT_2).decode())
            return 0
        console = Console()
        if args.watch is None:
            console.print(_render(_fetch(http, url, args.table)))
            return 0
        with Live(_render(_fetch(http, url, args.table)), console=console, refresh_per_second=4) as live:
            while True:
                time.sleep(args.watch)
                try:
                    live.update(_render(_fetch(http, url, args.table)))
                except UserError as exc:  # a leader change, a 502: say so and keep watching
                    live.update(f"[red]{exc}[/] (retrying every {args.watch:g} s)")


def _story(http: httpx.Client, url: str, segment: str, table: str | None, as_json: bool) -> int:
    if table is None:
        try:
            table = LLCSegmentName.parse(segment).table
        except InvalidSegmentNameError:
            raise UserError(f"{segment!r} is not a realtime segment name; give --table too") from None
    story = _get(http, f"{url}/segments/{table}/{segment}/story")
    if as_json:
        print(orjson.dumps(story, option=orjson.OPT_INDENT_2).decode())
        return 0
    shown = Table(title=f"story of {segment}", title_justify="left")
    for column in ("time (UTC)", "role", "instance", "what", "details"):
        shown.add_column(column)
    for event in story["events"]:
        details = ", ".join(f"{k}={v}" for k, v in event.items() if k not in ("timeMs", "role", "instance", "kind"))
        when = time.strftime("%H:%M:%S", time.gmtime(event["timeMs"] / 1000)) + f".{event['timeMs'] % 1000:03d}"
        shown.add_row(when, event.get("role", ""), event.get("instance", ""), event.get("kind", ""), details)
    Console().print(shown if story["events"] else f"{segment} has no story (yet)")
    return 0


def _get(http: httpx.Client, url: str) -> Any:
    try:
        reply = http.get(url)
    except httpx.HTTPError as exc:
        raise UserError(f"cannot reach {url}: {type(exc).__name__}") from None
    if reply.status_code != 200:
        try:
            message = reply.json().get("error", reply.text[:200])
        except ValueError:
            message = reply.text[:200]
        raise UserError(f"{url} answered {reply.status_code}: {message}")
    return reply.json()


def _fetch(http: httpx.Client, url: str, table: str | None) -> list[dict[str, Any]]:
    """One status per table; a table whose status cannot be had is an ``{"table", "problem"}`` entry."""
    names = [table] if table is not None else _get(http, f"{url}/tables").get("tables", [])
    out: list[dict[str, Any]] = []
    for name in names:
        tasks = _tasks(http, url, name)
        notes = _config_notes(http, url, name)
        try:
            out.append({**_get(http, f"{url}/tables/{name}/status"), "tasks": tasks, "configNotes": notes})
        except UserError as exc:
            if " answered 404" in str(exc) and (tasks or notes or table is None):
                if tasks or notes:  # an offline-only table: no partitions, but its tasks and its configs' notes
                    out.append({"table": name, "tasks": tasks, "configNotes": notes})
                continue
            if table is not None:
                raise
            out.append({"table": name, "problem": str(exc)})
    return out


def _config_notes(http: httpx.Client, url: str, name: str) -> list[dict[str, Any]]:
    """Keys of the table's configs Cuvee accepted without acting on them (``cuvee.status.config_notes``); empty
    when the configs cannot be had (the status says why elsewhere)."""
    try:
        tables = _get(http, f"{url}/tables/{name}")
        schema = _get(http, f"{url}/tables/{name}/schema")
    except UserError:
        return []
    return config_notes(tables if isinstance(tables, dict) else {}, schema)


def _render_notes(name: str, notes: list[dict[str, Any]]) -> Table:
    shown = Table(title=f"{escape(name)}: config keys accepted without effect", title_justify="left")
    for column in ("config", "key", "", "why"):
        shown.add_column(column)
    for note in notes:
        refused = note["support"] == "refused"
        shown.add_row(escape(note["config"]), escape(note["path"]),
                      "[red]NOT applied[/]" if refused else escape(note["support"]), escape(note["why"]))
    return shown


def _tasks(http: httpx.Client, url: str, name: str) -> dict[str, Any]:
    """The table's maintenance tasks (``GET /tasks/{t}``); empty when it has none or they cannot be had."""
    try:
        return dict(_get(http, f"{url}/tasks/{name}").get("tasks") or {})
    except UserError:
        return {}


def _render_tasks(name: str, tasks: dict[str, Any]) -> Table:
    shown = Table(title=f"{escape(name)}: maintenance tasks", title_justify="left")
    for column in ("task", "running", "last run", "took s", "segments in→out", "due windows", "watermarks", "message"):
        shown.add_column(column)
    for task_type, task in sorted(tasks.items()):
        last = task.get("lastRun") or {}
        running = task.get("running") or task.get("launched")
        status = last.get("status", "")
        colour = {"FAILED": "red", "SUCCEEDED": "green"}.get(status, "white")
        took = last.get("durationMs")
        # every value from the controller is escaped: a job's message may hold "[...]" (rich markup)
        shown.add_row(escape(task_type), "yes" if running else "",
                      f"[{colour}]{escape(status)}[/]" if status else "never",
                      f"{took / 1000:.1f}" if isinstance(took, int | float) else "",
                      escape(f"{last['segmentsIn']}→{last['segmentsOut']}") if "segmentsIn" in last else "",
                      str(len(task.get("due") or [])),
                      escape(", ".join(f"{k}={v}" for k, v in sorted((task.get("watermarks") or {}).items()))),
                      escape(str(last.get("message") or "")[:60]))
    return shown


def _render(statuses: list[dict[str, Any]]) -> Group:
    parts: list[Any] = []
    for status in statuses:
        if "problem" in status:
            parts.append(f"[red]{status['table']}: {status['problem']}[/]")
            continue
        if "partitions" not in status:  # an offline table with maintenance tasks or config notes
            if status.get("tasks"):
                parts.append(_render_tasks(status["table"], status["tasks"]))
            if status.get("configNotes"):
                parts.append(_render_notes(status["table"], status["configNotes"]))
            continue
        if status.get("streamError"):
            parts.append(f"[red]{status['table']}: the stream cannot be read ({status['streamError']}); offsets and "
                         "lag unknown[/]")
        word = status["health"]
        table = Table(title=f"{status['table']}: [{_COLOURS.get(word, 'white')}]{word}[/]"
                            + ("  (paused)" if status["paused"] else ""), title_justify="left")
        for column in ("partition", "health", "latest segment", "status", "replica", "state", "offset", "lag",
                       "delay s", "rows/s", "rows", "memory MB", "bad", "error"):
            table.add_column(column, justify="left" if column in ("latest segment", "error", "replica") else "right")
        for partition in status["partitions"]:
            latest = partition["segments"][-1] if partition["segments"] else {}
            rows = partition["consuming"] or [{}]
            for i, replica in enumerate(rows):
                first = i == 0
                delay = replica.get("delayMs")
                memory = replica.get("memoryBytes")
                health = partition["health"]
                table.add_row(
                    str(partition["partition"]) if first else "",
                    f"[{_COLOURS.get(health, 'white')}]{health}[/]" if first else "",
                    latest.get("segmentName", "") if first else "", (latest.get("status") or "") if first else "",
                    str(replica.get("server") or ""), str(replica.get("state") or ""),
                    _n(replica.get("currentOffset")), _n(replica.get("recordsLag")),
                    f"{delay / 1000:.1f}" if isinstance(delay, int | float) else "",
                    _n(replica.get("rowsPerSecond")), _n(replica.get("rowsConsumed")),
                    f"{memory / 1e6:.1f}" if isinstance(memory, int | float) else "", _n(replica.get("badRecords")),
                    escape((replica_error(replica) or "")[:90]))
        parts.append(table)
        for partition in status["partitions"]:
            for problem in partition.get("problems") or []:
                parts.append(f"[red]partition {partition['partition']}[/]: {problem}")
        if status.get("tasks"):
            parts.append(_render_tasks(status["table"], status["tasks"]))
        if status.get("configNotes"):
            parts.append(_render_notes(status["table"], status["configNotes"]))
        lost = status["dataLost"]
        if lost["offsetsSkippedByRepair"] or lost["messagesLostByConsumingReplicas"]:
            parts.append(f"[red]data lost to stream retention[/]: {lost['offsetsSkippedByRepair']} offsets skipped by "
                         f"repair, {lost['messagesLostByConsumingReplicas']} messages missing from consuming replicas")
    return Group(*parts)


def _n(value: Any) -> str:
    return "" if value is None else f"{value:,}" if isinstance(value, int) else str(value)
