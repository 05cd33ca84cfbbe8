"""The web console in a real headless browser (Debian's chromium driven by Playwright) against a live cluster with
auth on: log in, run a query and chart it, open the tables list and a table, use its buttons, read a segment's
story, and see that the console reads no more than its user may. Screenshots go to ``build/test-artifacts/console``
(``CUVEE_TEST_ARTIFACTS`` overrides)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from cuvee.auth.secrets import hash_password
from cuvee.testing.cluster import InProcessCluster
from cuvee.testing.waiting import wait_until

playwright_api = pytest.importorskip("playwright.sync_api", reason="playwright is a test dependency (make setup)")
from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

pytestmark = [pytest.mark.browser]

CHROMIUM = "/usr/bin/chromium"  # Debian's (scripts/install-system-deps.sh); Playwright downloads no browser
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]
TABLE = "events"
ROWS = 450
SCHEMA = {"schemaName": TABLE, "dimensionFieldSpecs": [{"name": "user", "dataType": "STRING"}],
          "metricFieldSpecs": [{"name": "amount", "dataType": "LONG"}]}
AUTH = {
    "enabled": True,
    "internal_token": "internal-token-for-console-tests-0123",
    "principals": [
        {"name": "admin", "password": hash_password("admin-pw", n=2**10), "admin": True},
        {"name": "outsider", "password": hash_password("outsider-pw", n=2**10), "tables": ["other"],
         "permissions": ["READ"]},
    ],
}
MARKUP = "<img src=x onerror=window.pwned=1>"  # a value that must show as text, never become markup


def _artifacts() -> Path:
    root = Path(os.environ.get("CUVEE_TEST_ARTIFACTS", Path(__file__).resolve().parents[2] / "build" / "test-artifacts"))
    out = root / "console"
    out.mkdir(parents=True, exist_ok=True)
    return out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[InProcessCluster]:
    roles: dict[str, Any] = {"auth": AUTH}
    with InProcessCluster(tmp_path_factory.mktemp("console"), servers=2, controller=roles, server=roles, broker=roles,
                          credentials=("admin", "admin-pw")) as cluster:
        configs = cluster.realtime_table(SCHEMA, flush_rows=100)
        rows = [{"user": f"u{i % 7}" if i else MARKUP, "amount": i} for i in range(ROWS)]
        cluster.produce(configs, rows, key_field="amount")
        wait_until(lambda: cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}") == ROWS, 60,
                   message="the rows never became queryable")
        yield cluster


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    assert Path(CHROMIUM).exists(), "chromium is missing: make system-deps installs it"
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


@pytest.fixture()
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    context.set_default_timeout(20_000)
    opened = context.new_page()
    problems: list[str] = []
    opened.on("pageerror", lambda exc: problems.append(str(exc)))
    yield opened
    context.close()
    assert not problems, f"the page raised: {problems}"


def _log_in(page: Page, cluster: InProcessCluster, user: str, password: str) -> None:
    page.goto(f"{cluster.controller_url}/")
    expect(page.locator("#login")).to_be_visible()
    page.fill("#login-user", user)
    page.fill("#login-password", password)
    page.click("#login-submit")
    expect(page.locator("#login")).to_be_hidden()
    expect(page.locator("#who")).to_have_text(f"signed in as {user}")


def test_login_query_chart_tables_table_page_actions_and_story(page: Page, cluster: InProcessCluster) -> None:
    shots = _artifacts()
    # Log in: a wrong password is refused on the form, the right one lets the page in.
    page.goto(f"{cluster.controller_url}/")
    expect(page.locator("#login")).to_be_visible()
    page.fill("#login-user", "admin")
    page.fill("#login-password", "wrong")
    page.click("#login-submit")
    expect(page.locator("#login-error")).to_have_text("Wrong user name or password.")
    page.fill("#login-password", "admin-pw")
    page.click("#login-submit")
    expect(page.locator("#login")).to_be_hidden()
    expect(page.locator("#who")).to_have_text("signed in as admin")

    # A query: the page's table holds what the broker answers; the chart draws one bar per group.
    sql = f"SELECT user, SUM(amount) AS total FROM {TABLE} GROUP BY user ORDER BY user LIMIT 100"
    expected = cluster.query(sql)["resultTable"]["rows"]
    page.fill("#sql", sql)
    page.click("#run")
    cells = page.locator("#result-table tbody tr")
    expect(cells).to_have_count(len(expected))
    shown = [[c.strip() for c in row.split("\t")] for row in cells.all_inner_texts()]
    assert [[row[0], float(row[1])] for row in shown] == [[u, float(t)] for u, t in expected]
    assert MARKUP in [row[0] for row in shown], "a value with markup must show as its text"
    assert page.evaluate("window.pwned") is None and page.locator("#result-table img").count() == 0
    page.check("#show-chart")
    expect(page.locator("#query-chart rect.series")).to_have_count(len(expected))
    expect(page.locator("#query-stats")).to_contain_text(f"{len(expected)} row(s)")
    page.screenshot(path=str(shots / "query.png"), full_page=True)

    # Bad SQL: the broker's error shows, no table.
    page.fill("#sql", f"SELEC nonsense FROM {TABLE}")
    page.click("#run")
    expect(page.locator("#query-error")).to_be_visible()
    expect(page.locator("#result-table")).to_have_count(0)

    # The tables list.
    page.click("header nav a[data-nav=tables]")
    row = page.locator(f"#tables tbody tr[data-table={TABLE}]")
    expect(row).to_contain_text("REALTIME")
    expect(row.locator(".badge")).to_have_text("HEALTHY")
    page.screenshot(path=str(shots / "tables.png"), full_page=True)

    # The table page: status per partition, consuming replicas, segments with their replicas and a size plot.
    row.locator("a").click()
    expect(page.locator("#table-name")).to_have_text(TABLE)
    expect(page.locator("#status-table tbody tr")).to_have_count(2)
    expect(page.locator("#table-health")).to_have_text("HEALTHY")
    consuming = cluster.http.get(f"{cluster.controller_url}/tables/{TABLE}/consumingSegmentsInfo").json()
    replicas = sum(len(r) for r in consuming["_segmentToConsumingInfoMap"].values())
    expect(page.locator("#consuming-table tbody tr")).to_have_count(replicas)
    committed = cluster.committed_segments(TABLE)
    wait_until(lambda: page.locator("#segment-plot circle.segment-point").count() >= len(committed), 15,
               message="the size plot does not show every committed segment")
    expect(page.locator("#table-config")).to_contain_text(f"{TABLE}_REALTIME")
    expect(page.locator("#table-schema")).to_contain_text('"amount"')
    page.screenshot(path=str(shots / "table.png"), full_page=True)

    # Pause and resume through the buttons: the controller's pause status follows, and the page shows PAUSED.
    def paused() -> bool:
        return cluster.http.get(f"{cluster.controller_url}/tables/{TABLE}/pauseStatus").json()["paused"]

    page.click("button[data-action=pauseConsumption]")
    expect(page.locator("#action-result")).to_have_text("pauseConsumption: done")
    assert paused()
    expect(page.locator("#table-health")).to_have_text("PAUSED", timeout=15_000)
    page.click("button[data-action=resumeConsumption]")
    expect(page.locator("#action-result")).to_have_text("resumeConsumption: done")
    assert not paused()
    page.click("button[data-action=repair]")
    expect(page.locator("#action-result")).to_contain_text("repair: done")

    # Force commit: every consuming segment that holds rows commits.
    before = set(cluster.committed_segments(TABLE))
    page.click("button[data-action=forceCommit]")
    expect(page.locator("#action-result")).to_have_text("forceCommit: done")
    wait_until(lambda: len(set(cluster.committed_segments(TABLE)) - before) >= 1, 30,
               message="force commit from the console committed nothing")
    assert cluster.scalar(f"SELECT COUNT(*) FROM {TABLE}") == ROWS

    # A segment's story: its election and commit in order.
    first = sorted(committed)[0]
    page.click(f"#segments-table a:text-is('{first}')")
    expect(page.locator("#segment-name")).to_have_text(first)
    wanted = ["consumingStarted", "segmentConsumed", "segmentCommitStart", "committed", "segmentCommitEnd"]
    expect(page.locator("#story-table tbody tr").first).to_be_visible()
    kinds = [row.split("\t")[3] for row in page.locator("#story-table tbody tr").all_inner_texts()]
    positions = [kinds.index(kind) for kind in wanted]
    assert positions == sorted(positions), kinds
    expect(page.locator("#segment-metadata")).to_contain_text('"status": "DONE"')
    page.screenshot(path=str(shots / "story.png"), full_page=True)


def test_the_console_reads_no_more_than_its_user_may(page: Page, cluster: InProcessCluster) -> None:
    _log_in(page, cluster, "outsider", "outsider-pw")
    page.fill("#sql", f"SELECT COUNT(*) FROM {TABLE}")
    page.click("#run")
    expect(page.locator("#query-error")).to_contain_text("180")
    expect(page.locator("#result-table")).to_have_count(0)
    page.goto(f"{cluster.controller_url}/console/#/tables/{TABLE}")
    expect(page.locator("#view .error").first).to_contain_text("no READ permission")
    # Logging out forgets the credentials: the next visit asks again.
    page.click("#logout")
    expect(page.locator("#login")).to_be_visible()
