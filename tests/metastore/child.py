"""Child process for the multi-process metastore tests: ``python -m tests.metastore.child COMMAND URI ...``.

Commands print JSON lines on stdout so the parent can follow them.
"""

from __future__ import annotations

import json
import sys

from cuvee.metastore import open_metastore
from cuvee.spi.metastore import VersionConflictError
from tests.metastore.helpers import wait_until


def say(**fields: object) -> None:
    print(json.dumps(fields), flush=True)


def compare_and_set(uri: str, path: str, rounds: int, me: int, processes: int) -> None:
    """Each round, every process reads version r, waits at a barrier until all have read it, then CASes with r:
    all of them race on the same version, so exactly one may win."""
    with open_metastore(uri) as store:
        for round_no in range(rounds):
            wait_until(lambda: store.get(path).version == round_no, 30.0, message=f"round {round_no} starts")
            barrier = f"/barrier/{round_no}"
            store.create(f"{barrier}/{me}")
            wait_until(lambda: len(store.children(barrier)) == processes, 30.0, message=f"barrier {round_no}")
            try:
                store.set(path, f"round {round_no} won by {me}".encode(), expected_version=round_no)
                say(round=round_no, process=me, won=True)
            except VersionConflictError:
                say(round=round_no, process=me, won=False)


def hold_ephemeral(uri: str, path: str) -> None:
    """Create an ephemeral node, report, and block until killed."""
    store = open_metastore(uri)
    store.create(path, b"held", ephemeral=True)
    say(ready=True, session=store.session_id)
    sys.stdin.read()  # the parent SIGKILLs us; stdin never closes before that


def write(uri: str, path: str, data: str) -> None:
    with open_metastore(uri) as store:
        node = store.create(path, data.encode())
        node = store.set(path, (data + "!").encode(), expected_version=node.version)
        say(version=node.version)


def main(argv: list[str]) -> None:
    command, uri, *args = argv
    if command == "cas":
        compare_and_set(uri, args[0], int(args[1]), int(args[2]), int(args[3]))
    elif command == "hold-ephemeral":
        hold_ephemeral(uri, args[0])
    elif command == "write":
        write(uri, args[0], args[1])
    else:
        raise SystemExit(f"unknown command {command}")


if __name__ == "__main__":
    main(sys.argv[1:])
