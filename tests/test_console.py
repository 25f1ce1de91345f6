"""The web console in a real browser (Debian's chromium driven by Playwright), on the embedded broker
(`logbroker serve --console`) and on Apache Kafka 4.4 (`logbroker console -b`): every page opens, a topic is
created through the form (and Kafka's validation error shown in it), records are produced and browsed
(offset, timestamp, search, live tail, decoded values), a group's offsets are reset after a preview, the
lag chart moves while a consumer is paused, share groups and transactions are shown (an open transaction
aborted), a SASL login acts as its principal and is refused by an ACL, and forged forms are refused.
Screenshots go to test-output/console/ (look at them)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from logbroker_devtools.testing.net import free_port
from logbroker_devtools.testing.process import BrokerProcess
from support import assert_equal, authz_target, both_targets, create_topic, eventually, kafka_peer, missing_tool, unique

pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parent.parent
SHOTS = ROOT / "test-output" / "console"
CHROMIUM_FLAGS = ["--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-sync",
                  "--disable-background-networking", "--disable-component-update"]  # fmt: skip


def chromium() -> str:
    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        missing_tool("Debian's chromium is not installed (apt-get install chromium)")
    return path


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    exe = chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing_tool("playwright is not installed (pip install playwright)")
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=exe, args=CHROMIUM_FLAGS)
        yield b
        b.close()


@pytest.fixture
def page(browser: Any) -> Iterator[Any]:
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(30_000)
    pg.on("dialog", lambda d: d.accept())  # the data-confirm questions
    yield pg
    context.close()


def shot(pg: Any, name: str) -> None:
    SHOTS.mkdir(parents=True, exist_ok=True)
    pg.screenshot(path=str(SHOTS / f"{name}.png"), full_page=True)


def wait_http(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            urllib.request.urlopen(url, timeout=2).close()
            return
        except urllib.error.HTTPError:
            return  # answering
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


class ConsoleProcess:
    """`logbroker console` pointed at a cluster, as a child process."""

    def __init__(self, bootstrap: str, *args: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = Path(os.environ.get("TMPDIR", "/tmp")) / f"console-{self.port}.log"
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen([sys.executable, "-m", "logbroker", "console", "-b", bootstrap, "--listen",
                                          f"127.0.0.1:{self.port}", *args], stdout=out, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL)  # fmt: skip
        try:
            wait_http(self.url + "/static/console.css")
        except OSError:
            self.stop()
            raise AssertionError(f"the console did not start:\n{self.log.read_text()}") from None

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()


@pytest.fixture(scope="module", params=both_targets())
def target(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    if request.param == "logbroker":
        port, metrics = free_port(), free_port()
        proc = BrokerProcess(
            tmp_path_factory.mktemp("console") / "data",
            extra_args=["--console", f"127.0.0.1:{port}", "--metrics-listen", f"127.0.0.1:{metrics}"],
        )
        proc.start()
        url = f"http://127.0.0.1:{port}"
        wait_http(url + "/static/console.css")
        yield SimpleNamespace(kind="logbroker", bootstrap=proc.bootstrap, url=url,
                              metrics=f"http://127.0.0.1:{metrics}/metrics")  # fmt: skip
        assert proc.stop() == 0, proc.log_tail()
        return
    with kafka_peer() as kafka:
        console = ConsoleProcess(kafka)
        yield SimpleNamespace(kind="kafka", bootstrap=kafka, url=console.url)
        console.stop()


def produce(bootstrap: str, topic: str, values: list[str], key: str | None = None, partition: int = 0) -> None:
    p = Producer({"bootstrap.servers": bootstrap, "linger.ms": 2})
    for v in values:
        p.produce(topic, v.encode(), key=key.encode() if key else None, partition=partition)
    assert p.flush(30) == 0


def consume_and_commit(bootstrap: str, topic: str, group: str, count: int, extra: dict[str, str] | None = None) -> None:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False, **(extra or {})})  # fmt: skip
    c.subscribe([topic])
    got = 0
    deadline = time.monotonic() + 60
    while got < count and time.monotonic() < deadline:
        got += len([m for m in c.consume(100, 0.5) if m.error() is None])
    assert got == count
    c.commit(asynchronous=False)
    c.close()


def committed(bootstrap: str, group: str, topic: str, partitions: int) -> list[int]:
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group})
    try:
        return [tp.offset for tp in c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=30)]
    finally:
        c.close()


def ok_flash(pg: Any) -> str:
    pg.wait_for_selector(".flash")
    errors = pg.locator(".flash.error")
    assert errors.count() == 0, errors.first.inner_text()
    return str(pg.locator(".flash.ok").first.inner_text())


def goto(pg: Any, url: str, status: int = 200) -> Any:
    resp = pg.goto(url)
    assert resp is not None and resp.status == status, (url, resp.status if resp else None, pg.content()[:2000])
    return resp


# --------------------------------------------------------------------------------------------- pages


def test_every_page_opens(target: SimpleNamespace, page: Any) -> None:
    topic = create_topic(target.bootstrap, unique("pages"), partitions=2)
    produce(target.bootstrap, topic, [f"v{i}" for i in range(6)], key="k")
    group = unique("pages-g")
    consume_and_commit(target.bootstrap, topic, group, 6)
    modern = unique("pages-848")  # KIP-848's protocol: listed, described and its lag shown like a classic group
    consume_and_commit(target.bootstrap, topic, modern, 6, {"group.protocol": "consumer"})
    u, k = target.url, target.kind

    goto(page, u + "/")
    assert page.inner_text("#cluster-id").strip()
    assert int(page.inner_text("#topic-count")) >= 1
    # the charts refresh themselves from the server
    page.wait_for_selector("#charts[data-updated]", state="attached", timeout=20_000)
    assert page.locator("#charts svg.chart").count() >= 3
    shot(page, f"overview-{k}")

    goto(page, u + "/topics")
    row = page.locator(f"tr[data-topic='{topic}']")
    assert row.locator("td").nth(1).inner_text() == "2"
    shot(page, f"topics-{k}")

    goto(page, u + f"/topics/{topic}")
    assert page.locator("#partitions tbody tr").count() == 2
    assert page.locator("#config-table tr[data-config='retention.ms']").count() == 1
    shot(page, f"topic-{k}")

    goto(page, u + f"/topics/{topic}/messages?partition=all&mode=beginning")
    assert page.locator("#record-rows tr.record").count() == 6
    shot(page, f"messages-{k}")

    goto(page, u + "/groups")
    assert page.locator(f"tr[data-group='{group}'] td").all_inner_texts()[1:] == ["classic", "Empty", "0", "0"]
    assert page.locator(f"tr[data-group='{modern}'] td").all_inner_texts()[1:] == ["consumer", "Empty", "0", "0"]
    goto(page, u + f"/groups/view?id={modern}")
    assert page.inner_text("#total-lag") == "0" and page.inner_text("#group-state") == "Empty"
    goto(page, u + f"/groups/view?id={group}")
    assert page.inner_text("#total-lag") == "0"
    assert page.locator("#offsets tbody tr", has_text=topic).count() == 1
    shot(page, f"group-{k}")

    for path in ("/transactions", "/transactions?scan=1", "/users"):
        goto(page, u + path)
        assert page.locator(".flash.error").count() == 0, page.content()[:2000]
    goto(page, u + "/acls")  # neither broker here has an authorizer: said so, not an error
    assert "SECURITY_DISABLED" in page.inner_text("#no-authorizer")
    goto(page, u + "/topics/no-such-topic-here", 404)
    assert "UNKNOWN_TOPIC" in page.inner_text("#error")


def test_create_a_topic_through_the_form(target: SimpleNamespace, page: Any) -> None:
    name = unique("formed")
    goto(page, target.url + "/topics")
    page.fill("#create-topic input[name=name]", name)
    page.fill("#create-topic input[name=partitions]", "3")
    page.fill("#create-topic textarea[name=configs]", "cleanup.policy=compact\nretention.ms=x1")
    page.click("#create-topic button[type=submit]")
    # Kafka's validation error, in the form, which keeps what was typed
    assert "INVALID_CONFIG" in page.inner_text("#form-error")
    assert page.input_value("#create-topic input[name=name]") == name
    shot(page, f"create-refused-{target.kind}")
    page.fill("#create-topic textarea[name=configs]", "cleanup.policy=compact")
    page.click("#create-topic button[type=submit]")
    assert f"created topic {name}" in ok_flash(page)
    assert page.locator("#partitions tbody tr").count() == 3
    assert page.locator("#config-table tr.set[data-config='cleanup.policy']").inner_text().split()[1] == "compact"

    goto(page, target.url + "/topics")
    page.fill("#create-topic input[name=name]", name)
    page.click("#create-topic button[type=submit]")
    assert "TOPIC_ALREADY_EXISTS" in page.inner_text("#form-error")

    goto(page, target.url + f"/topics/{name}")
    page.fill("#set-config input[name=key]", "retention.ms")
    page.fill("#set-config input[name=value]", "3600000")
    page.click("#set-config button[value=set]")
    assert "retention.ms = 3600000" in ok_flash(page)
    assert "3600000" in page.locator("#config-table tr[data-config='retention.ms']").inner_text()
    page.fill("#set-config input[name=key]", "retention.ms")
    page.fill("#set-config input[name=value]", "-7")
    page.click("#set-config button[value=set]")
    assert "INVALID_CONFIG" in page.inner_text(".flash.error")

    page.fill("#add-partitions input[name=total]", "5")
    page.click("#add-partitions button")
    assert "now has 5 partitions" in ok_flash(page)
    assert page.locator("#partitions tbody tr").count() == 5
    page.fill("#add-partitions input[name=total]", "2")
    page.click("#add-partitions button")
    assert "INVALID_PARTITIONS" in page.inner_text(".flash.error")

    page.fill("#delete-topic input[name=confirm]", name)
    page.click("#delete-topic button")
    assert f"deleted topic {name}" in ok_flash(page)
    assert page.locator(f"tr[data-topic='{name}']").count() == 0


def test_produce_and_browse_records(target: SimpleNamespace, page: Any) -> None:
    topic = create_topic(target.bootstrap, unique("browse"), partitions=2)
    before = int(time.time() * 1000) - 1000
    envelope = {"oslo.version": "2.0", "oslo.message": json.dumps({
        "event_type": "compute.instance.create.end", "publisher_id": "compute.host1", "priority": "INFO",
        "payload": {"id": 7}, "_context": {}})}  # fmt: skip
    produce(target.bootstrap, topic, ["plain text", json.dumps({"a": [1, 2]}), json.dumps(envelope)], key="first")
    produce(target.bootstrap, topic, [f"bulk-{i}" for i in range(40)], partition=1)

    goto(page, target.url + f"/topics/{topic}/messages")
    page.select_option("#produce-form select[name=partition]", "0")
    page.fill("#produce-form input[name=key]", "from-the-form")
    page.fill("#produce-form textarea[name=value]", '{"hello": "console"}')
    page.fill("#produce-form textarea[name=headers]", "origin=browser")
    page.click("#produce-form button")
    assert f"produced to {topic} partition 0 at offset 3" in ok_flash(page)
    row = page.locator("tr.record[data-offset='3']")
    assert "from-the-form" in row.inner_text() and '"hello": "console"' in row.inner_text()
    assert "origin=browser" in row.inner_text() and f"{topic}:0:3" in row.inner_text()  # the mq id

    goto(page, target.url + f"/topics/{topic}/messages?partition=0&mode=beginning")
    notes = page.locator("#record-rows .note").all_inner_texts()
    assert "JSON" in notes and any(n.startswith("oslo.messaging 2.0 envelope: event_type compute.instance.create.end")
                                   for n in notes)  # fmt: skip
    shot(page, f"browse-{target.kind}")

    # from a timestamp, from the end, searches (by key; a substring), and a continuation link
    goto(page, target.url + f"/topics/{topic}/messages?partition=1&mode=timestamp&timestamp={before}&limit=5")
    assert page.locator("#record-rows tr.record").count() == 5 and page.locator("#more").count() == 1
    page.click("#more")
    assert page.locator("#record-rows tr.record").first.get_attribute("data-offset") == "5"
    goto(page, target.url + f"/topics/{topic}/messages?partition=1&mode=end&limit=3")
    assert [r.get_attribute("data-offset") for r in page.locator("#record-rows tr.record").all()] == ["37", "38", "39"]
    goto(page, target.url + f"/topics/{topic}/messages?partition=all&mode=beginning&key=first")
    assert page.locator("#record-rows tr.record").count() == 3
    goto(page, target.url + f"/topics/{topic}/messages?partition=all&mode=beginning&contains=bulk-3")
    assert sorted(page.locator("#record-rows pre.value").all_inner_texts()) == ["bulk-3", *[f"bulk-3{i}" for i in
                                                                                           range(10)]]  # fmt: skip

    # the live tail shows what a client writes after it started
    goto(page, target.url + f"/topics/{topic}/messages?partition=all&mode=end&limit=2")
    page.click("#tail")
    produce(target.bootstrap, topic, ["tailed-record"], partition=1)
    page.wait_for_selector("#record-rows tr.record:has-text('tailed-record')", timeout=20_000)
    shot(page, f"tail-{target.kind}")
    page.click("#tail")


def test_reset_a_groups_offsets_after_a_preview(target: SimpleNamespace, page: Any) -> None:
    topic = create_topic(target.bootstrap, unique("reset"), partitions=2)
    for p in (0, 1):
        produce(target.bootstrap, topic, [f"r{i}" for i in range(10)], partition=p)
    group = unique("reset-g")
    consume_and_commit(target.bootstrap, topic, group, 20)
    assert committed(target.bootstrap, group, topic, 2) == [10, 10]

    goto(page, target.url + f"/groups/view?id={group}")
    page.select_option("#reset-form select[name=strategy]", "shift")
    page.fill("#reset-form input[name=value]", "-4")
    page.click("#reset-form button")
    plan = page.locator("#plan tbody tr").all_inner_texts()
    assert len(plan) == 2 and all(r.split()[2:4] == ["10", "6"] for r in plan), plan
    assert committed(target.bootstrap, group, topic, 2) == [10, 10]  # a preview changes nothing
    shot(page, f"reset-preview-{target.kind}")
    page.click("#execute-form button")
    assert "2 partition(s) reset (shift)" in ok_flash(page)
    assert committed(target.bootstrap, group, topic, 2) == [6, 6]
    assert page.inner_text("#total-lag") == "8"

    page.select_option("#reset-form select[name=strategy]", "datetime")
    page.fill("#reset-form input[name=value]", "not a time")
    page.click("#reset-form button")
    assert "not a date and time" in page.inner_text(".flash.error")


def test_the_lag_chart_moves_while_a_consumer_is_paused(target: SimpleNamespace, page: Any) -> None:
    topic = create_topic(target.bootstrap, unique("lag"))
    produce(target.bootstrap, topic, ["a"] * 5)
    group = unique("lag-g")
    c = Consumer({"bootstrap.servers": target.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                  "enable.auto.commit": False})  # fmt: skip
    try:
        c.subscribe([topic])
        got = 0
        deadline = time.monotonic() + 60
        while got < 5 and time.monotonic() < deadline:
            got += len([m for m in c.consume(10, 0.5) if m.error() is None])
        c.commit(asynchronous=False)
        c.pause(c.assignment())  # a member that stops reading: lag grows while it stays in the group

        goto(page, target.url + f"/groups/view?id={group}")
        assert page.inner_text("#group-state") == "Stable" and page.inner_text("#total-lag") == "0"

        def last() -> float:
            line = page.locator("#lag-chart polyline")
            return float(line.get_attribute("data-last") or 0) if line.count() else -1.0

        eventually(lambda: assert_equal(last(), 0.0), timeout=20)
        produce(target.bootstrap, topic, ["b"] * 30)
        eventually(lambda: assert_equal(last(), 30.0), timeout=30)
        produce(target.bootstrap, topic, ["c"] * 20)
        eventually(lambda: assert_equal(last(), 50.0), timeout=30)
        points = int(page.locator("#lag-chart polyline").get_attribute("data-points") or 0)
        assert points >= 3
        shot(page, f"lag-chart-{target.kind}")
        c.poll(0)
    finally:
        c.close()


def test_share_group_and_its_locks(target: SimpleNamespace, page: Any) -> None:
    from confluent_kafka import ShareConsumer

    topic = create_topic(target.bootstrap, unique("share"))
    group = unique("share-g")
    member = ShareConsumer({"bootstrap.servers": target.bootstrap, "group.id": group, "log_level": 3,
                            "share.acknowledgement.mode": "explicit"})  # fmt: skip
    try:
        member.subscribe([topic])
        held: list[Any] = []
        deadline = time.monotonic() + 60
        while not held and time.monotonic() < deadline:
            produce(target.bootstrap, topic, ["s"] * 3)
            held = [m for m in member.poll(0.5) or [] if m.error() is None]  # acquired, never acknowledged
        assert held
        goto(page, target.url + "/groups")
        page.click(f"tr[data-group='{group}'] a")
        assert page.locator("#members tbody tr").count() == 1
        assert page.locator("#share-partitions tbody tr", has_text=topic).count() == 1
        if target.kind == "logbroker":  # no Kafka API shows locks
            locked = page.locator("#locks tbody tr").first.locator("td").nth(4).inner_text()
            assert int(locked) == len(held)
        else:
            assert page.locator("#locks").count() == 0
        shot(page, f"share-group-{target.kind}")
    finally:
        member.close()


def test_transactions_and_aborting_an_open_one(target: SimpleNamespace, page: Any) -> None:
    from confluent_kafka import IsolationLevel
    from confluent_kafka.admin import AdminClient, OffsetSpec

    topic = create_topic(target.bootstrap, unique("txn"))
    tid = unique("console-txn")
    p = Producer({"bootstrap.servers": target.bootstrap, "transactional.id": tid, "transaction.timeout.ms": 600_000})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce(topic, b"left open", partition=0)
    assert p.flush(30) == 0

    goto(page, target.url + "/transactions")
    assert "Ongoing" in page.locator(f"tr[data-txn='{tid}']").inner_text().title()
    goto(page, target.url + "/transactions?scan=1")
    row = page.locator("#open-transactions tbody tr", has_text=f"{topic}-0")
    assert "ongoing" in row.inner_text()
    shot(page, f"transactions-{target.kind}")
    with page.expect_navigation():
        row.locator("button").click()
    assert f"transaction on {topic}-0" in ok_flash(page)

    admin = AdminClient({"bootstrap.servers": target.bootstrap})

    def stable() -> int:
        tp = TopicPartition(topic, 0)
        got = admin.list_offsets({tp: OffsetSpec.latest()}, isolation_level=IsolationLevel.READ_COMMITTED)
        return int(got[tp].result().offset)

    # the last stable offset moved past the aborted record
    eventually(lambda: assert_equal(stable() >= 1, True), timeout=30)
    p.purge()


@pytest.mark.parametrize("kind", both_targets())
def test_sasl_login_acts_as_its_principal(browser: Any, kind: str) -> None:
    if True:
        with authz_target(kind) as t:
            console = ConsoleProcess(t.sasl, "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "PLAIN")
            context = browser.new_context()
            pg = context.new_page()
            pg.on("dialog", lambda d: d.accept())
            try:
                goto(pg, console.url + "/topics")
                assert pg.url.startswith(console.url + "/login")
                pg.fill("#login input[name=user]", "bob")
                pg.fill("#login input[name=password]", "wrong")
                pg.click("#login button")
                assert "SASL_AUTHENTICATION_FAILED" in pg.inner_text("#error")
                shot(pg, f"login-refused-{kind}")
                pg.fill("#login input[name=user]", "bob")
                pg.fill("#login input[name=password]", "bob-secret")
                pg.click("#login button")
                assert pg.url == console.url + "/topics"  # back where it was going
                assert pg.inner_text("header .user") == "User:bob"
                pg.fill("#create-topic input[name=name]", "bobs-topic")
                pg.click("#create-topic button[type=submit]")
                assert "TOPIC_AUTHORIZATION_FAILED" in pg.inner_text("#form-error")
                shot(pg, f"acl-refused-{kind}")
                goto(pg, console.url + "/users", 403)
                assert "CLUSTER_AUTHORIZATION_FAILED" in pg.inner_text("#error")
                # the command line too: librdkafka aborted the process on this refusal, kafka-python reports it
                bob = ["-b", t.sasl, "--security-protocol", "SASL_PLAINTEXT", "--sasl-mechanism", "PLAIN",
                       "--sasl-username", "bob", "--sasl-password", "bob-secret"]  # fmt: skip
                for args in (["users", "list"], ["users", "list", "carol"], ["users", "delete", "carol"]):
                    r = subprocess.run([sys.executable, "-m", "logbroker", *args, *bob], capture_output=True,
                                       text=True, timeout=120)  # fmt: skip
                    assert r.returncode == 1 and "CLUSTER_AUTHORIZATION_FAILED" in r.stderr, (args, r)

                pg.click("header button.link")  # log out, in as the super user
                pg.fill("#login input[name=user]", "alice")
                pg.fill("#login input[name=password]", "alice-secret")
                pg.click("#login button")
                goto(pg, console.url + "/topics")
                pg.fill("#create-topic input[name=name]", "alices-topic")
                pg.click("#create-topic button[type=submit]")
                assert "created topic alices-topic" in ok_flash(pg)
                goto(pg, console.url + "/acls")
                pg.fill("#add-acl input[name=principal]", "User:bob")
                pg.select_option("#add-acl select[name=operation]", "CREATE")
                pg.select_option("#add-acl select[name=resource_type]", "CLUSTER")
                pg.click("#add-acl button")
                assert "added ALLOW CREATE" in ok_flash(pg)
                assert pg.locator("#acls tbody tr", has_text="User:bob").count() == 1
                with pg.expect_navigation():
                    pg.locator("#acls tbody tr", has_text="User:bob").locator("button").click()
                assert "deleted 1 ACL(s)" in ok_flash(pg)
                assert pg.locator("#acls tbody tr", has_text="User:bob").count() == 0
                goto(pg, console.url + "/users")
                pg.fill("#add-user input[name=user]", "carol")
                pg.fill("#add-user input[name=password]", "carol-secret")
                pg.click("#add-user button")
                assert "user carol: SCRAM-SHA-512 credentials set" in ok_flash(pg)
                assert pg.locator("#users tbody tr", has_text="carol").inner_text().split()[:3] == [
                    "carol", "SCRAM-SHA-512", "8192"]  # fmt: skip
                with pg.expect_navigation():
                    pg.locator("#users tbody tr", has_text="carol").locator("button").click()
                assert "deleted SCRAM-SHA-512 credentials of carol" in ok_flash(pg)
                assert pg.locator("#users tbody tr", has_text="carol").count() == 0
            finally:
                context.close()
                console.stop()


def test_forged_forms_are_refused(target: SimpleNamespace) -> None:
    if target.kind != "logbroker":
        pytest.skip("the console's own checks: one broker is enough")
    with urllib.request.urlopen(target.url + "/topics") as resp:
        cookie = resp.headers["set-cookie"]
        body = resp.read().decode()
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie.replace("Strict", "strict")
    assert "frame-ancestors 'none'" in resp.headers["content-security-policy"]
    sid = cookie.split(";")[0]
    token = body.split('name="csrf" value="')[1].split('"')[0]

    def post(data: str, **headers: str) -> int:
        req = urllib.request.Request(target.url + "/topics", data=data.encode(), method="POST",
                                     headers={"Cookie": sid, "Content-Type": "application/x-www-form-urlencoded",
                                              **headers})  # fmt: skip
        try:
            with urllib.request.urlopen(req) as r:
                return r.status
        except urllib.error.HTTPError as exc:
            return exc.code

    name = unique("forged")
    assert post(f"name={name}&partitions=1") == 403  # no token
    assert post(f"name={name}&partitions=1&csrf={token}", Origin="http://evil.example") == 403
    assert post(f"name={name}&partitions=1&csrf={token}x") == 403
    with urllib.request.urlopen(target.url + "/topics") as resp:  # nothing was created
        assert name not in resp.read().decode()
    assert post(f"name={name}&partitions=1&csrf={token}", Origin=target.url) == 200  # followed to the topic


def test_charts_from_another_logbrokers_metrics(target: SimpleNamespace, page: Any) -> None:
    """`logbroker console --metrics-url`: a broker elsewhere charted from its /metrics, requests and fsync too."""
    if target.kind != "logbroker":
        pytest.skip("a logbroker's /metrics")
    console = ConsoleProcess(target.bootstrap, "--metrics-url", target.metrics)
    try:
        goto(page, console.url + "/")
        assert "metrics from " + target.metrics in page.inner_text("footer")
        produce(target.bootstrap, create_topic(target.bootstrap, unique("scraped")), ["x" * 1000] * 200)
        page.wait_for_selector("#chart-requests polyline", state="attached", timeout=20_000)
        page.wait_for_selector("#chart-fsync polyline", state="attached", timeout=20_000)
        eventually(lambda: assert_equal(page.locator("#charts svg.chart").count(), 5), timeout=20)
    finally:
        console.stop()


def test_tls_and_the_warning_off_loopback(tmp_path: Path, broker: BrokerProcess) -> None:
    from click.testing import CliRunner

    from logbroker.cli import main
    from logbroker.console.options import ConsoleOptions
    from logbroker.console.server import ConsoleServer, plan

    assert plan(ConsoleOptions(broker.bootstrap, listen="127.0.0.1:9080"))[2] == []
    warned = plan(ConsoleOptions(broker.bootstrap, listen="0.0.0.0:9080"))[2]
    assert len(warned) == 1 and "WITHOUT TLS" in warned[0]
    assert CliRunner().invoke(main, ["certs", "init", str(tmp_path)]).exit_code == 0
    tls = ConsoleOptions(broker.bootstrap, listen="0.0.0.0:9080", tls_cert=str(tmp_path / "server.crt"),
                         tls_key=str(tmp_path / "server.key"))  # fmt: skip
    assert plan(tls)[2] == []

    import ssl

    tls.listen = f"127.0.0.1:{free_port()}"
    server = ConsoleServer(tls)
    server.start()
    try:
        assert server.url.startswith("https://127.0.0.1:")
        ctx = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        with urllib.request.urlopen(server.url, context=ctx) as resp:
            assert resp.status == 200 and "Secure" in resp.headers["set-cookie"]
            assert "cluster-id" in resp.read().decode()
        with pytest.raises(OSError):  # no clear text on the TLS port
            urllib.request.urlopen(server.url.replace("https", "http"), timeout=5)
    finally:
        server.stop()
