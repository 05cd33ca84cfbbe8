"""CUVEE_FAULTS arms a controller process's fault points for multi-process failure tests."""

from __future__ import annotations

import pytest

from cuvee.controller import faults


@pytest.fixture(autouse=True)
def _clean() -> None:
    faults.reset()
    yield
    faults.reset()


def test_fail_and_kill_actions_arm_the_named_points() -> None:
    armed = faults.arm_from_environment({faults.ENVIRONMENT: f"{faults.COMMIT_AFTER_STEP1}=fail, "
                                                             f"{faults.COMMIT_START_AFTER_PIN}=kill"})
    assert armed == [faults.COMMIT_AFTER_STEP1, faults.COMMIT_START_AFTER_PIN]
    assert faults.COMMIT_AFTER_STEP1 in faults.FAULTS
    assert faults.HOOKS[faults.COMMIT_START_AFTER_PIN] is faults._kill_self
    with pytest.raises(faults.FaultInjected):
        faults.fault(faults.COMMIT_AFTER_STEP1)
    faults.fault(faults.COMMIT_AFTER_STEP1)  # once only


@pytest.mark.parametrize(("spec", "error"), [
    ("commit.nowhere=kill", "unknown fault point 'commit.nowhere'"),
    (f"{faults.COMMIT_AFTER_STEP2}=explode", "must be 'kill' or 'fail'"),
    (f"{faults.COMMIT_AFTER_STEP2}", "must be 'kill' or 'fail'"),
])
def test_mistakes_are_refused(spec: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        faults.arm_from_environment({faults.ENVIRONMENT: spec})


def test_nothing_set_arms_nothing() -> None:
    assert faults.arm_from_environment({}) == []
    assert not faults.FAULTS and not faults.HOOKS
