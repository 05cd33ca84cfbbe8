"""The force commit's ``partitions`` / ``segments`` and the resume's ``consumeFrom``, checked before anything is
sent: every name that would commit nothing is a 400 naming it."""

from __future__ import annotations

import pytest

from cuvee.controller.consumption_params import ConsumeFrom, commit_targets
from cuvee.controller.errors import BadRequest

CONSUMING = {"t__0__3__20261121T1647Z": ["s1", "s2"], "t__2__1__20261121T1647Z": ["s2", "s3"]}
PARTITIONS = [0, 1, 2]  # partition 1 committed while paused: no consuming segment


def test_all_or_the_named_partitions_or_segments() -> None:
    assert commit_targets(CONSUMING, PARTITIONS, by_partition=None, by_segment=None) == sorted(CONSUMING)
    assert commit_targets(CONSUMING, PARTITIONS, by_partition=" 2 ,", by_segment=None) == ["t__2__1__20261121T1647Z"]
    assert commit_targets(CONSUMING, PARTITIONS, by_partition=None,
                          by_segment="t__0__3__20261121T1647Z") == ["t__0__3__20261121T1647Z"]


@pytest.mark.parametrize(("partitions", "segments", "message"), [
    ("1", None, "partition(s) 1 have no consuming segment"),
    ("0,9,7", None, "the table has no partition(s) 7, 9 (its partitions: 0, 1, 2)"),
    ("-1", None, "partition '-1' is not a partition number"),
    ("\u00b2", None, "partition '\u00b2' is not a partition number"),  # isdigit() says True; int() refuses it
    ("\u0663", None, "partition '\u0663' is not a partition number"),  # an Arabic-Indic 3: int() takes it
    (" , ", None, "partitions lists nothing"),
    (None, "t__0__2__20261121T1647Z,zz", "not consuming: t__0__2__20261121T1647Z, zz"),
    (None, "a/b", "invalid segment name"),
    ("0", "t__0__3__20261121T1647Z", "not both"),
])
def test_a_name_that_commits_nothing_is_refused(partitions: str | None, segments: str | None, message: str) -> None:
    with pytest.raises(BadRequest, match=message.replace("(", r"\(").replace(")", r"\)")):
        commit_targets(CONSUMING, PARTITIONS, by_partition=partitions, by_segment=segments)


def test_consume_from_takes_pinots_values_in_any_case() -> None:
    assert ConsumeFrom.parse("Smallest") is ConsumeFrom.SMALLEST and ConsumeFrom.parse(None) is None
    with pytest.raises(BadRequest, match="consumeFrom param 'earliest' is not valid"):
        ConsumeFrom.parse("earliest")
