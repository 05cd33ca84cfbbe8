"""What each role's routes require (default deny), who passes, secrets, config checks and the start-up warning."""

from __future__ import annotations

import logging

import pytest
from fastapi import FastAPI

from cuvee.auth.config import AuthConfig, PrincipalConfig
from cuvee.auth.layer import INTERNAL, Authenticator
from cuvee.auth.policy import Need, Permission, Principal, Role, decide, job_decision, requirement
from cuvee.auth.secrets import hash_password, hash_token, verify
from cuvee.node.http import HttpService

READER = Principal("r", tables=frozenset({"events"}), permissions=frozenset({Permission.READ}))


@pytest.mark.parametrize(("role", "method", "path", "query", "need", "permission", "table"), [
    (Role.CONTROLLER, "GET", "/health", None, Need.PUBLIC, None, None),
    (Role.CONTROLLER, "DELETE", "/tables/events", None, Need.TABLE, Permission.DELETE, "events"),
    (Role.CONTROLLER, "GET", "/tables/events_REALTIME/externalview", None, Need.TABLE, Permission.READ,
     "events_REALTIME"),
    (Role.CONTROLLER, "POST", "/tables/events/pauseConsumption", None, Need.TABLE, Permission.UPDATE, "events"),
    (Role.CONTROLLER, "POST", "/v2/segments", {"tableName": "events"}, Need.TABLE, Permission.UPDATE, "events"),
    (Role.CONTROLLER, "POST", "/segmentCommitEnd", None, Need.INTERNAL, None, None),
    (Role.CONTROLLER, "POST", "/some/new/route", None, Need.ADMIN, None, None),  # default deny
    (Role.CONTROLLER, "GET", "/", None, Need.PUBLIC, None, None),  # the console's files: the login form loads
    (Role.CONTROLLER, "GET", "/console/console.js", None, Need.PUBLIC, None, None),
    (Role.CONTROLLER, "POST", "/console/x", None, Need.ADMIN, None, None),
    (Role.CONTROLLER, "POST", "/sql", None, Need.AUTHENTICATED, None, None),  # the broker checks READ
    (Role.CONTROLLER, "POST", "/tables/events/repair", None, Need.TABLE, Permission.UPDATE, "events"),
    # a job's status: READ on the job's table, checked by the route (not on a table named like the path's word)
    (Role.CONTROLLER, "GET", "/tables/forceCommitStatus/0a-1", None, Need.JOB, None, None),
    (Role.CONTROLLER, "GET", "/segments/segmentReloadStatus/0a-1", None, Need.JOB, None, None),
    # ...but a word that is no job id is a route of a table so named (the table's handler serves it): its rule
    (Role.CONTROLLER, "GET", "/tables/forceCommitStatus/idealstate", None, Need.TABLE, Permission.READ,
     "forceCommitStatus"),
    (Role.CONTROLLER, "GET", "/segments/segmentReloadStatus/lineage", None, Need.TABLE, Permission.READ,
     "segmentReloadStatus"),
    (Role.SERVER, "POST", "/query", None, Need.INTERNAL, None, None),
    (Role.SERVER, "GET", "/tables/events_REALTIME/segments/s", None, Need.INTERNAL, None, None),
    (Role.BROKER, "POST", "/query/sql", None, Need.AUTHENTICATED, None, None),
    (Role.BROKER, "GET", "/debug/routingTable/events", None, Need.ADMIN, None, None),
])
def test_routes_map_to_what_they_require(role: Role, method: str, path: str, query: dict | None, need: Need,
                                         permission: Permission | None, table: str | None) -> None:
    got = requirement(role, method, path, query)
    assert (got.need, got.permission, got.table) == (need, permission, table)


def test_a_job_status_needs_read_on_the_jobs_table() -> None:
    status = requirement(Role.CONTROLLER, "GET", "/tables/forceCommitStatus/0a-1")
    assert decide(status, None).status == 401 and decide(status, READER).allowed  # the route checks the table
    assert job_decision(READER, "events_REALTIME").allowed and job_decision(None, "events").allowed  # auth off
    refused = job_decision(READER, "other_REALTIME")
    assert refused.status == 403 and "READ permission on table 'other'" in refused.reason
    word = Principal("w", tables=frozenset({"forceCommitStatus", "segmentReloadStatus"}))
    assert not job_decision(word, "events_REALTIME").allowed  # a table named like the path's word opens nothing
    assert job_decision(INTERNAL, "events").allowed


def test_decisions_per_principal() -> None:
    drop = requirement(Role.CONTROLLER, "DELETE", "/tables/events")
    assert decide(drop, None).status == 401
    assert decide(drop, READER).status == 403
    assert decide(drop, Principal("a", admin=True)).allowed
    read = requirement(Role.CONTROLLER, "GET", "/tables/events_OFFLINE")
    assert decide(read, READER).allowed  # granted on the raw name, whatever the type suffix
    assert not decide(requirement(Role.CONTROLLER, "GET", "/tables/other"), READER).allowed
    internal = requirement(Role.SERVER, "POST", "/query")
    assert decide(internal, INTERNAL).allowed and decide(internal, READER).status == 403
    create = requirement(Role.CONTROLLER, "POST", "/tables")
    assert create.body_key == "tableName"
    writer = Principal("w", permissions=frozenset({Permission.CREATE}))  # every table
    assert decide(create, writer, "events").allowed and decide(create, writer, None).allowed
    assert not decide(create, READER, "events").allowed and not decide(create, READER, None).allowed


def test_secrets_and_credentials() -> None:
    stored = hash_password("pw", n=2**10)
    assert verify("pw", stored) and not verify("pW", stored) and not verify("x" * 5000, stored)
    assert verify("tok", hash_token("tok")) and not verify("tok2", hash_token("tok"))
    config = AuthConfig(enabled=True, internal_token="i" * 20, principals=(
        PrincipalConfig("reader", password=stored, tables=("events",)),))
    auth = Authenticator(config)
    import base64
    basic = "Basic " + base64.b64encode(b"reader:pw").decode()
    assert auth.authenticate(basic) == PrincipalConfig("reader", password=stored, tables=("events",)).principal()
    assert auth.authenticate("Basic " + base64.b64encode(b"reader:no").decode()) is None
    assert auth.authenticate("Basic !!!") is None and auth.authenticate("Bearer " + "i" * 20) is INTERNAL
    assert auth.authenticate("Bearer wrong") is None and auth.authenticate(None) is None


def test_configs_that_cannot_work_are_refused() -> None:
    with pytest.raises(ValueError, match="internal_token"):
        AuthConfig(enabled=True, internal_token="short")
    with pytest.raises(ValueError, match="password or a token"):
        PrincipalConfig("x")
    with pytest.raises(ValueError, match="scrypt"):
        PrincipalConfig("x", password="plain-text-password")
    with pytest.raises(ValueError, match="unknown permissions"):
        PrincipalConfig("x", token=hash_token("t"), permissions=("READ", "DROP"))
    with pytest.raises(ValueError, match="unique"):
        p = PrincipalConfig("x", token=hash_token("t"))
        AuthConfig(enabled=True, internal_token="i" * 20, principals=(p, p))


def test_a_role_listening_beyond_loopback_without_auth_warns(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="cuvee.node.http"):
        HttpService(FastAPI(), "127.0.0.1", 0, name="quiet").stop()
        assert "without authentication" not in caplog.text
        HttpService(FastAPI(), "0.0.0.0", 0, name="open").stop()
    assert "open listens on 0.0.0.0" in caplog.text and "without authentication" in caplog.text


def test_failed_checks_are_cached_and_unknown_names_cost_a_check_too(monkeypatch: pytest.MonkeyPatch) -> None:
    import base64

    from cuvee.auth import layer

    stored = hash_password("pw", n=2**10)
    auth = Authenticator(AuthConfig(enabled=True, internal_token="i" * 20,
                                    principals=(PrincipalConfig("reader", password=stored),)))
    checks: list[str] = []
    real = layer.verify
    monkeypatch.setattr(layer, "verify", lambda secret, hashed: checks.append(hashed[:6]) or real(secret, hashed))
    wrong = "Basic " + base64.b64encode(b"reader:no").decode()
    assert auth.authenticate(wrong) is None and auth.authenticate(wrong) is None
    assert len(checks) == 1  # the second attempt is answered from the cache, no second scrypt
    assert auth.authenticate("Basic " + base64.b64encode(b"nobody:x").decode()) is None
    assert checks[-1] == "scrypt"  # an unknown name is checked against a decoy: it answers as slowly


def test_secrets_are_stored_in_the_format_of_their_field() -> None:
    with pytest.raises(ValueError, match="scrypt"):
        PrincipalConfig("x", password=hash_token("fast-and-unsalted"))
    with pytest.raises(ValueError, match="sha256"):
        PrincipalConfig("x", token=hash_password("t", n=2**10))
    for token in ("with a space in it!!", "ünïcödé-token-123456", " " + "i" * 20):
        with pytest.raises(ValueError, match="printable ASCII"):
            AuthConfig(enabled=True, internal_token=token)
    assert "s" * 20 not in repr(AuthConfig(enabled=True, internal_token="s" * 20))  # secrets never in a repr
