"""The broker's stage: answers over Arrow relations, refusals that name the bound and point to Spark, DuckDB's
wide sums as Pinot types them, and an interrupt that stops a long stage."""

from __future__ import annotations

import threading

import pyarrow as pa
import pytest

from cuvee.multistage.engine import Stage
from cuvee.query import QueryError, QueryErrorCode
from cuvee.testing.waiting import wait_until

NUMBERS = pa.table({"k": pa.array(range(3000), pa.int64()), "s": [f"row-{i:06d}" for i in range(3000)]})


def test_a_join_over_relations_and_wide_sums_as_longs() -> None:
    answer = Stage(64).run("SELECT COUNT(*) AS n, SUM(a.k) AS total FROM r a JOIN r b ON a.k = b.k", {"r": NUMBERS})
    assert answer.to_pylist() == [{"n": 3000, "total": sum(range(3000))}]
    assert answer.schema.field("total").type == pa.int64()  # DuckDB's HUGEINT sum


def test_relations_larger_than_the_bound_are_refused_before_running() -> None:
    big = pa.table({"s": ["x" * 1000] * 3000})  # ~3 MB
    with pytest.raises(QueryError) as refused:
        Stage(1).run("SELECT COUNT(*) FROM r", {"r": big})
    assert refused.value.code is QueryErrorCode.QUERY_VALIDATION
    assert "multistage_memory_mb (1)" in refused.value.message and "Spark" in refused.value.message


def test_a_stage_that_outgrows_the_bound_is_refused_in_words_not_killed() -> None:
    with pytest.raises(QueryError) as refused:  # 9M joined rows sorted with no disk to spill to
        Stage(16).run("SELECT a.s, b.s FROM r a CROSS JOIN r b ORDER BY a.s DESC, b.s", {"r": NUMBERS})
    assert refused.value.code is QueryErrorCode.QUERY_VALIDATION
    assert "multistage_memory_mb (16)" in refused.value.message and "Spark" in refused.value.message


def test_unknown_columns_are_710_and_an_interrupt_stops_the_stage() -> None:
    with pytest.raises(QueryError) as unknown:
        Stage(64).run("SELECT a.nope FROM r a", {"r": NUMBERS})
    assert unknown.value.code is QueryErrorCode.UNKNOWN_COLUMN and "nope" in unknown.value.message
    stage = Stage(256)
    failure: list[BaseException] = []

    def run() -> None:
        try:
            stage.run("SELECT COUNT(*) FROM r a, r b, r c WHERE a.k + b.k + c.k = -1", {"r": NUMBERS})
        except QueryError as exc:
            failure.append(exc)

    worker = threading.Thread(target=run)  # 27 billion combinations: minutes, unless interrupted
    worker.start()

    def stopped() -> bool:  # an interrupt before the stage starts does nothing: repeat it until it stops
        stage.interrupt()
        worker.join(0.05)
        return not worker.is_alive()

    wait_until(stopped, 10, message="the interrupted stage kept running")
    assert isinstance(failure[0], QueryError) and failure[0].code is QueryErrorCode.BROKER_TIMEOUT


def test_an_answer_larger_than_the_bound_is_refused_while_it_is_fetched_and_intervals_are_text() -> None:
    with pytest.raises(QueryError) as refused:  # ~200 MB of answer under a 16 MB bound
        Stage(16).run("SELECT repeat('x', 20000000) AS s FROM range(10)", {})
    assert refused.value.code is QueryErrorCode.QUERY_VALIDATION
    answer = Stage(16).run("SELECT INTERVAL 1 DAY AS i, TIME '10:00:00' AS t", {})
    assert answer.schema.types == [pa.string(), pa.string()] and answer.column("t").to_pylist() == ["10:00:00"]


def test_a_stage_stops_at_its_deadline_on_its_own_and_never_starts_past_it() -> None:
    """A stage whose worker starts after the broker's one interrupt (a busy pool) ran to its end (14 s) after the
    client had its 400: it now refuses to start past the deadline, and interrupts itself until it stops."""
    import time

    with pytest.raises(QueryError) as late:
        Stage(64).run("SELECT COUNT(*) FROM r", {"r": NUMBERS}, deadline=time.monotonic() - 1)
    assert late.value.code is QueryErrorCode.BROKER_TIMEOUT
    started = time.monotonic()
    with pytest.raises(QueryError) as stopped:  # minutes unless interrupted
        Stage(256).run("SELECT COUNT(*) FROM r a, r b, r c WHERE a.k + b.k + c.k = -1", {"r": NUMBERS},
                       deadline=time.monotonic() + 0.3)
    assert stopped.value.code is QueryErrorCode.BROKER_TIMEOUT and time.monotonic() - started < 10
