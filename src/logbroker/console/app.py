"""The console's ASGI application (Starlette): pages rendered on the server, forms posted back.

Sessions live on the server (a random cookie names one; the cookie is HttpOnly and SameSite=Strict, and
Secure over TLS); on a SASL cluster each session logs in and holds admin clients that act as its principal.
Every form that changes something carries the session's CSRF token and is refused when the token is wrong
or the request comes from another origin. Handlers are plain functions run on Starlette's thread pool,
since the admin clients block.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from logbroker import __version__
from logbroker.console import charts
from logbroker.console import records as rec
from logbroker.console.cluster import Cluster, ConsoleError
from logbroker.console.options import ConsoleOptions
from logbroker.console.sampler import Sampler, from_admin, local_source, scrape

log = logging.getLogger("logbroker.console")
HERE = Path(__file__).parent
COOKIE = "logbroker_console"
IDLE_SESSION = 30 * 60.0
MAX_SESSIONS = 10_000  # past it the least recently seen goes: a client that never keeps its cookie costs no memory
MECHANISMS = ("SCRAM-SHA-512", "SCRAM-SHA-256", "PLAIN")
STRATEGIES = ("earliest", "latest", "datetime", "offset", "shift")

CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; object-src 'none'; "
       "base-uri 'none'; form-action 'self'; frame-ancestors 'none'")  # fmt: skip


@dataclass
class Session:
    sid: str
    csrf: str
    cluster: Cluster | None = None
    user: str | None = None
    flash: list[tuple[str, str]] = field(default_factory=list)
    seen: float = field(default_factory=time.monotonic)


class Console:
    """The state behind the application: options, sessions, the shared cluster (no login), the sampler."""

    def __init__(self, options: ConsoleOptions) -> None:
        self.options = options
        self.sessions: dict[str, Session] = {}
        self._lock = threading.Lock()
        self._shared: Cluster | None = None
        self._last: Cluster | None = None  # the most recent principal's clients: what the sampler asks
        self.templates = Jinja2Templates(directory=str(HERE / "templates"))
        env = self.templates.env
        env.globals.update(version=__version__, human=charts.human, when=_when, options=options, quote=quote)
        env.filters["q"] = lambda v: quote(str(v), safe="")
        self.sampler = Sampler(options.sample_seconds, self._totals_source(), lambda: self._last)

    def _totals_source(self) -> Callable[[], dict[str, float] | None]:
        o = self.options
        if o.local is not None:
            return local_source(o.local)
        if o.metrics_url:
            return lambda: scrape(o.metrics_url)  # type: ignore[arg-type]
        return lambda: from_admin(self._last) if self._last is not None else None

    @property
    def source(self) -> str:
        o = self.options
        return "local" if o.local is not None else "metrics" if o.metrics_url else "admin"

    def start(self) -> None:
        self.sampler.start()

    def stop(self) -> None:
        self.sampler.stop()
        with self._lock:
            for s in self.sessions.values():
                if s.cluster is not None and s.cluster is not self._shared:
                    s.cluster.close()
            self.sessions.clear()
            if self._shared is not None:
                self._shared.close()

    # ------------------------------------------------------------------------------ sessions

    def session(self, request: Request) -> tuple[Session, bool]:
        """The request's session (a new one when it has none): (session, is_new)."""
        sid = request.cookies.get(COOKIE, "")
        now = time.monotonic()
        with self._lock:
            for old in [s for s in self.sessions.values() if now - s.seen > IDLE_SESSION]:
                self._drop(old)
            s = self.sessions.get(sid)
            if s is not None:
                s.seen = now
                return s, False
            if len(self.sessions) >= MAX_SESSIONS:
                self._drop(min(self.sessions.values(), key=lambda x: x.seen))
            s = Session(secrets.token_urlsafe(32), secrets.token_urlsafe(32))
            self.sessions[s.sid] = s
            return s, True

    def _drop(self, s: Session) -> None:
        self.sessions.pop(s.sid, None)
        if s.cluster is not None and s.cluster is not self._shared:
            if self._last is s.cluster:
                self._last = None
            s.cluster.close()

    def cluster(self, s: Session) -> Cluster | None:
        """The session's clients: its login's, or (no SASL) the console's shared ones."""
        if self.options.needs_login:
            if s.cluster is not None:
                self._last = s.cluster
            return s.cluster
        with self._lock:
            if self._shared is None:
                o = self.options
                self._shared = Cluster(o.bootstrap, o.security, o.timeout)
            s.cluster = self._last = self._shared
            return self._shared

    def login(self, s: Session, user: str, password: str, mechanism: str) -> None:
        o = self.options
        assert o.security is not None
        settings = replace(o.security, sasl_username=user, sasl_password=password, sasl_mechanism=mechanism)
        cluster = Cluster(o.bootstrap, settings, o.timeout)  # ConsoleError when refused
        with self._lock:
            old, s.cluster, s.user = s.cluster, cluster, user
            s.csrf = secrets.token_urlsafe(32)
        if old is not None:
            old.close()
        self._last = cluster

    def logout(self, s: Session) -> None:
        with self._lock:
            self._drop(s)


def _when(ms: int | float | None) -> str:
    if ms is None or ms < 0:
        return ""
    return datetime.fromtimestamp(ms / 1000, UTC).strftime("%Y-%m-%d %H:%M:%S.%f")[:-3] + "Z"


# ---------------------------------------------------------------------------------- the application


def build_app(options: ConsoleOptions) -> Starlette:
    console = Console(options)
    secure = bool(options.tls_cert)

    def respond(request: Request, s: Session, new: bool, response: Response) -> Response:
        if new:
            response.set_cookie(COOKIE, s.sid, httponly=True, samesite="strict", secure=secure, path="/")
        response.headers["Content-Security-Policy"] = CSP
        response.headers["X-Frame-Options"] = "DENY"
        response.headers["X-Content-Type-Options"] = "nosniff"
        response.headers["Referrer-Policy"] = "same-origin"
        response.headers["Cache-Control"] = "no-store"
        return response

    def page(handler: Callable[..., Any], mutating: bool = False) -> Callable[[Request], Any]:
        """Session, login, CSRF and errors around one handler: ``handler(request, session, cluster)`` returns
        (template, context, status) or a Response."""

        async def endpoint(request: Request) -> Response:
            from starlette.concurrency import run_in_threadpool

            s, new = console.session(request)
            form: dict[str, str] = {}
            if request.method == "POST":
                data = await request.form()
                form = {k: v for k, v in data.items() if isinstance(v, str)}
                if not _same_origin(request) or not hmac.compare_digest(form.get("csrf", ""), s.csrf):
                    return respond(request, s, new, _error(console, request, s, ConsoleError(
                        "refused: this form did not come from this console (cross-site request or an expired "
                        "page; reload it and try again)", 403)))  # fmt: skip
            if options.needs_login and s.cluster is None:
                if request.url.path.startswith("/fragments"):
                    return respond(request, s, new, Response("login needed", 401))
                here = request.url.path + (f"?{request.url.query}" if request.url.query else "")
                target = "/login?" + urlencode({"next": here})
                return respond(request, s, new, RedirectResponse(target, 303))
            try:
                cluster = await run_in_threadpool(console.cluster, s)
                assert cluster is not None
                console.sampler.touch()
                out = await run_in_threadpool(handler, request, s, cluster, form)
            except ConsoleError as exc:
                if mutating and (back := form.get("back")) and back.startswith("/") and not back.startswith("//"):
                    s.flash.append(("error", exc.message))
                    return respond(request, s, new, RedirectResponse(back, 303))
                return respond(request, s, new, _error(console, request, s, exc))
            if isinstance(out, Response):
                return respond(request, s, new, out)
            template, context, status = out
            return respond(request, s, new, render(request, s, template, context, status))

        return endpoint

    def render(request: Request, s: Session, template: str, context: dict[str, Any], status: int = 200) -> Response:
        return console.templates.TemplateResponse(request, template, {**_base_context(console, request, s), **context},
                                                  status_code=status)  # fmt: skip

    def done(s: Session, message: str, to: str) -> Response:
        s.flash.append(("ok", message))
        return RedirectResponse(to, 303)

    # -------------------------------------------------------------------------- overview

    def overview(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        info = c.describe()
        groups = c.listed_groups()
        info["groups"] = len(groups)
        info["by_type"] = {t: sum(1 for g in groups if g.type == t) for t in sorted({g.type for g in groups})}
        versions = c.api_versions()
        return "overview.html", {"info": info, "versions": versions, "charts": overview_charts()}, 200

    def overview_charts() -> list[Any]:
        sm = console.sampler
        out = [
            charts.line_chart(
                "Throughput",
                {"produce": sm.points("produce_mbps"), "fetch": sm.points("fetch_mbps")},
                "MB/s",
                chart_id="chart-throughput",
            ),
            charts.line_chart("Records in", {"records": sm.points("records_ps")}, "/s", chart_id="chart-records"),
        ]
        if console.source != "admin":
            out.append(
                charts.line_chart("Requests", {"requests": sm.points("requests_ps")}, "/s", chart_id="chart-requests")
            )
            out.append(
                charts.line_chart(
                    "fsync latency (mean per round)", {"fsync": sm.points("fsync_ms")}, "ms", chart_id="chart-fsync"
                )
            )
        disk = {"partition logs": sm.points("log_bytes")}
        if console.source == "local":
            disk["file system used"] = sm.points("disk_used")
        out.append(charts.line_chart("Disk", disk, "B", chart_id="chart-disk"))
        return out

    def overview_fragment(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        return "fragment_charts.html", {"charts": overview_charts(), "latest": console.sampler.latest,
                                        "sample_error": console.sampler.error}, 200  # fmt: skip

    # -------------------------------------------------------------------------- topics

    def topics(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        internal = request.query_params.get("internal") == "1"
        return "topics.html", {"topics": c.topics(with_internal=internal), "internal": internal,
                               "form": form, "form_error": None}, 200  # fmt: skip

    def topic_create(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        name = form.get("name", "").strip()
        try:
            partitions = _int(form.get("partitions", "1"), "partitions")
            replication = _int(form.get("replication", "-1") or "-1", "replication factor")
            configs = _key_values(form.get("configs", ""))
            if not name:
                raise ConsoleError("a topic needs a name")
            c.create_topic(name, partitions, replication, configs)
        except ConsoleError as exc:
            return "topics.html", {"topics": c.topics(), "internal": False, "form": form,
                                   "form_error": exc.message}, exc.status  # fmt: skip
        return done(s, f"created topic {name} with {partitions} partition(s)", f"/topics/{quote(name, safe='')}")

    def topic(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        name = request.path_params["name"]
        return "topic.html", {"t": c.topic(name)}, 200

    def topic_delete(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        name = request.path_params["name"]
        if form.get("confirm") != name:
            raise ConsoleError(f"type the topic's name ({name}) to delete it")
        c.delete_topic(name)
        return done(s, f"deleted topic {name}", "/topics")

    def topic_partitions(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        name = request.path_params["name"]
        total = _int(form.get("total", ""), "partitions")
        c.add_partitions(name, total)
        return done(s, f"topic {name} now has {total} partitions", f"/topics/{quote(name, safe='')}")

    def topic_config(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        name = request.path_params["name"]
        key = form.get("key", "").strip()
        if not key:
            raise ConsoleError("which config? (a name such as retention.ms)")
        value = None if form.get("action") == "reset" else form.get("value", "")
        c.alter_config(name, key, value)
        what = f"{key} reset to its default" if value is None else f"{key} = {value}"
        return done(s, f"topic {name}: {what}", f"/topics/{quote(name, safe='')}#configs")

    # -------------------------------------------------------------------------- messages

    def messages(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        name = request.path_params["name"]
        q = request.query_params
        query = _query(q)
        page_ = rec.read(c, name, query)
        more = _continue_url(name, q, page_.next) if not page_.complete else None
        return (
            "messages.html",
            {
                "name": name,
                "q": q,
                "query": query,
                "page": page_,
                "parts": c.partitions(name),
                "more": more,
                "positions": _positions_text(page_.next),
            },
            200,
        )

    def tail(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        """The live tail's poll: records after the given positions, as rendered rows."""
        name = request.path_params["name"]
        q = request.query_params
        query = _query(q)
        query.positions = _parse_positions(q.get("positions", ""))
        query.mode = "offset"
        query.limit = 200
        page_ = rec.read(c, name, query)
        html = console.templates.get_template("_rows.html").render(rows=page_.rows, when=_when)
        return JSONResponse({"html": html, "count": len(page_.rows), "positions": _positions_text(page_.next)})

    def produce(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        name = request.path_params["name"]
        part = form.get("partition", "").strip()
        headers = [(k, v) for k, v in _key_values(form.get("headers", "")).items()]
        p, o = rec.produce(c, name, form.get("key") or None, form.get("value", ""), headers,
                           _int(part, "partition") if part else None)  # fmt: skip
        back = f"/topics/{quote(name, safe='')}/messages?" + urlencode({"partition": p, "mode": "offset", "offset": o})
        return done(s, f"produced to {name} partition {p} at offset {o}", back)

    # -------------------------------------------------------------------------- groups

    def groups(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        return "groups.html", {"groups": c.groups()}, 200

    def group(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        gid = request.query_params.get("id", "")
        console.sampler.touch(gid)
        g = c.group(gid)
        return "group.html", {"gid": gid, "g": g, "chart": lag_chart(gid), "plan": None, "reset": {}}, 200

    def lag_chart(gid: str) -> Any:
        return charts.line_chart(f"Lag of {gid}", {"lag": console.sampler.points(f"lag:{gid}")}, "records",
                                 width=700, chart_id="chart-lag")  # fmt: skip

    def group_fragment(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        gid = request.query_params.get("id", "")
        console.sampler.touch(gid)
        return HTMLResponse(str(lag_chart(gid)))

    def group_reset(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        gid = form.get("id", "")
        kind = form.get("strategy", "")
        if kind not in STRATEGIES:
            raise ConsoleError(f"strategy must be one of {', '.join(STRATEGIES)}")
        value = 0
        if kind == "datetime":
            value = _datetime_ms(form.get("value", ""))
        elif kind in ("offset", "shift"):
            value = _int(form.get("value", ""), "offset" if kind == "offset" else "shift")
        execute = form.get("execute") == "1"
        topic_ = form.get("topic", "").strip() or None
        plan = c.reset_plan(gid, topic_, kind, value, execute)
        if execute:
            failed = [e for e in plan if e.error]
            if failed:
                raise ConsoleError("; ".join(f"{e.topic}-{e.partition}: {e.error}" for e in failed))
            return done(s, f"group {gid}: {len(plan)} partition(s) reset ({kind})", f"/groups/view?id={quote(gid)}")
        g = c.group(gid)
        return "group.html", {"gid": gid, "g": g, "chart": lag_chart(gid), "plan": plan, "reset": form}, 200

    def group_delete(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        gid = form.get("id", "")
        c.delete_group(gid)
        return done(s, f"deleted group {gid}", "/groups")

    def share_group(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        gid = request.query_params.get("id", "")
        sg = c.share_group(gid)
        locks = None
        if options.local is not None:
            with contextlib.suppress(Exception):
                locks = options.local.share_locks(gid)
        return "share_group.html", {"gid": gid, "sg": sg, "locks": locks}, 200

    # -------------------------------------------------------------------------- transactions

    def transactions(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        rows = c.transactions()
        scan = request.query_params.get("scan") == "1"
        ongoing = {r.producer_id for r in rows if r.state.upper() in ("ONGOING", "PREPARE_COMMIT", "PREPARE_ABORT")}
        open_ = c.open_transactions(ongoing) if scan else None
        return "transactions.html", {"rows": rows, "open": open_, "scan": scan}, 200

    def abort(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        t, p = form.get("topic", ""), _int(form.get("partition", ""), "partition")
        c.abort(t, p, _int(form.get("producer_id", ""), "producer id"),
                _int(form.get("producer_epoch", ""), "producer epoch"),
                _int(form.get("coordinator_epoch", "-1"), "coordinator epoch"))  # fmt: skip
        return done(s, f"aborted producer {form.get('producer_id')}'s transaction on {t}-{p}", "/transactions?scan=1")

    # -------------------------------------------------------------------------- ACLs and users

    def acls(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        return "acls.html", {"acls": c.acls()}, 200

    def acl_add(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        row = {k: form.get(k, "").strip() for k in ("resource_type", "name", "pattern_type", "principal", "host",
                                                      "operation", "permission")}  # fmt: skip
        if ":" not in row["principal"]:
            raise ConsoleError(f"a principal is TYPE:NAME (User:alice), not {row['principal']!r}")
        shown = f"{row['resource_type']} {row['name']}".strip()
        if row["resource_type"] == "CLUSTER":
            row["resource_type"], row["name"] = "BROKER", "kafka-cluster"
            shown = "CLUSTER"
        c.add_acl(row)
        return done(s, f"added {row['permission']} {row['operation']} on {shown} for {row['principal']}", "/acls")

    def acl_delete(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        row = {k: form.get(k, "") for k in ("resource_type", "name", "pattern_type", "principal", "host",
                                              "operation", "permission")}  # fmt: skip
        n = c.delete_acl(row)
        return done(s, f"deleted {n} ACL(s)", "/acls")

    def users(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        return "users.html", {"users": c.users(), "mechanisms": MECHANISMS[:2]}, 200

    def user_add(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        name, password = form.get("user", "").strip(), form.get("password", "")
        mech = form.get("mechanism", "SCRAM-SHA-512")
        if not name or not password:
            raise ConsoleError("a user needs a name and a password")
        if mech not in MECHANISMS[:2]:
            raise ConsoleError("mechanism: SCRAM-SHA-256 or SCRAM-SHA-512")
        c.add_user(name, password, mech, _int(form.get("iterations", "8192") or "8192", "iterations"))
        return done(s, f"user {name}: {mech} credentials set", "/users")

    def user_delete(request: Request, s: Session, c: Cluster, form: dict[str, str]) -> Any:
        c.delete_user(form.get("user", ""), form.get("mechanism", ""))
        return done(s, f"deleted {form.get('mechanism')} credentials of {form.get('user')}", "/users")

    # -------------------------------------------------------------------------- login

    async def login(request: Request) -> Response:
        from starlette.concurrency import run_in_threadpool

        s, new = console.session(request)
        nxt = request.query_params.get("next", "/")
        if not nxt.startswith("/") or nxt.startswith("//"):
            nxt = "/"
        if not options.needs_login:
            return respond(request, s, new, RedirectResponse("/", 303))
        error, status = None, 200
        default = options.security.sasl_mechanism if options.security is not None else "SCRAM-SHA-512"
        if request.method == "POST":
            data = await request.form()
            form = {k: v for k, v in data.items() if isinstance(v, str)}
            given = form.get("next", "")
            nxt = given if given.startswith("/") and not given.startswith("//") else "/"
            if not _same_origin(request) or not hmac.compare_digest(form.get("csrf", ""), s.csrf):
                error, status = "refused: this form did not come from this console; reload it", 403
            else:
                mech = form.get("mechanism", default)
                if mech not in MECHANISMS:
                    mech = default
                try:
                    await run_in_threadpool(console.login, s, form.get("user", ""), form.get("password", ""), mech)
                    return respond(request, s, new, RedirectResponse(nxt, 303))
                except ConsoleError as exc:
                    error, status = exc.message, exc.status
                    await asyncio.sleep(0.5)  # a guessing browser waits
        return respond(request, s, new, render(request, s, "login.html", {
            "next": nxt, "error": error, "mechanisms": MECHANISMS, "default": default,
            "bootstrap": options.bootstrap}, status))  # fmt: skip

    async def logout(request: Request) -> Response:
        s, _new = console.session(request)
        data = await request.form()
        if _same_origin(request) and hmac.compare_digest(str(data.get("csrf", "")), s.csrf):
            console.logout(s)
        return RedirectResponse("/login" if options.needs_login else "/", 303)

    routes = [
        Route("/", page(overview)),
        Route("/fragments/overview", page(overview_fragment)),
        Route("/fragments/lag", page(group_fragment)),
        Route("/login", login, methods=["GET", "POST"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/topics", page(topics)),
        Route("/topics", page(topic_create, True), methods=["POST"]),
        Route("/topics/{name}", page(topic)),
        Route("/topics/{name}/delete", page(topic_delete, True), methods=["POST"]),
        Route("/topics/{name}/partitions", page(topic_partitions, True), methods=["POST"]),
        Route("/topics/{name}/config", page(topic_config, True), methods=["POST"]),
        Route("/topics/{name}/messages", page(messages)),
        Route("/topics/{name}/tail", page(tail)),
        Route("/topics/{name}/produce", page(produce, True), methods=["POST"]),
        Route("/groups", page(groups)),
        Route("/groups/view", page(group)),
        Route("/groups/reset", page(group_reset, True), methods=["POST"]),
        Route("/groups/delete", page(group_delete, True), methods=["POST"]),
        Route("/share-groups/view", page(share_group)),
        Route("/transactions", page(transactions)),
        Route("/transactions/abort", page(abort, True), methods=["POST"]),
        Route("/acls", page(acls)),
        Route("/acls", page(acl_add, True), methods=["POST"]),
        Route("/acls/delete", page(acl_delete, True), methods=["POST"]),
        Route("/users", page(users)),
        Route("/users", page(user_add, True), methods=["POST"]),
        Route("/users/delete", page(user_delete, True), methods=["POST"]),
        Mount("/static", StaticFiles(directory=str(HERE / "static")), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(_app: Starlette) -> Any:
        console.start()
        try:
            yield
        finally:
            from starlette.concurrency import run_in_threadpool

            await run_in_threadpool(console.stop)

    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.console = console
    return app


def _base_context(console: Console, request: Request, s: Session) -> dict[str, Any]:
    """What every page's template reads (base.html); the session's messages are shown once."""
    flash, s.flash = s.flash, []
    return {"request": request, "session": s, "csrf": s.csrf, "flash": flash, "user": s.user,
            "needs_login": console.options.needs_login, "source": console.source}  # fmt: skip


def _error(console: Console, request: Request, s: Session, exc: ConsoleError) -> Response:
    context = {**_base_context(console, request, s), "error": exc.message, "status": exc.status}
    return console.templates.TemplateResponse(request, "error.html", context, status_code=exc.status)


def _same_origin(request: Request) -> bool:
    """A browser names the page a form came from (Origin, else Referer): it must be this console."""
    origin = request.headers.get("origin") or request.headers.get("referer")
    if not origin:
        return True  # not a browser's cross-site form (browsers send Origin on every cross-site POST)
    host = request.headers.get("host", "")
    from urllib.parse import urlsplit

    return urlsplit(origin).netloc == host


def _int(text: str, what: str) -> int:
    try:
        return int(str(text).strip())
    except ValueError:
        raise ConsoleError(f"{what}: expected a whole number, got {text!r}") from None


def _key_values(text: str) -> dict[str, str]:
    out = {}
    for line in text.replace(",", "\n").splitlines():
        if not line.strip():
            continue
        k, sep, v = line.partition("=")
        if not sep or not k.strip():
            raise ConsoleError(f"expected name=value, got {line.strip()!r}")
        out[k.strip()] = v.strip()
    return out


def _datetime_ms(text: str) -> int:
    text = text.strip()
    if text.lstrip("-").isdigit():
        return int(text)
    try:
        when = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ConsoleError(
            f"not a date and time (ISO 8601, e.g. 2026-11-29T10:00:00Z, or epoch ms): {text!r}"
        ) from None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return int(when.timestamp() * 1000)


def _query(q: Any) -> rec.Query:
    part = q.get("partition", "all")
    parts = [] if part in ("", "all") else [_int(part, "partition")]
    mode = q.get("mode", "end")
    if mode not in ("end", "beginning", "offset", "timestamp"):
        raise ConsoleError("from: end, beginning, offset or timestamp")
    query = rec.Query(parts, mode, limit=_int(q.get("limit", "50") or "50", "limit"),
                      key=q.get("key") or None, contains=q.get("contains") or None,
                      read_committed=q.get("isolation") == "read_committed")  # fmt: skip
    if mode == "offset":
        query.offset = _int(q.get("offset", "0") or "0", "offset")
    elif mode == "timestamp":
        query.timestamp_ms = _datetime_ms(q.get("timestamp", ""))
    if q.get("positions"):
        query.positions = _parse_positions(q.get("positions", ""))
    return query


def _parse_positions(text: str) -> dict[int, int]:
    out = {}
    for item in filter(None, text.split(",")):
        p, _, o = item.partition(":")
        out[_int(p, "partition")] = _int(o, "offset")
    return out


def _positions_text(positions: dict[int, int]) -> str:
    return ",".join(f"{p}:{o}" for p, o in sorted(positions.items()))


def _continue_url(name: str, q: Any, positions: dict[int, int]) -> str:
    params = {k: v for k, v in q.items() if k != "positions"}
    params["positions"] = _positions_text(positions)
    return f"/topics/{quote(name, safe='')}/messages?{urlencode(params)}"


__all__ = ["build_app"]
