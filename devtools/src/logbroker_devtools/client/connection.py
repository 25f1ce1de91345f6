"""`Connection.do(request)` over one socket, with versions negotiated by ApiVersions; `KafkaClient`
adds the few admin and data operations the CLI needs. Works against any Kafka-compatible broker.

Security follows Kafka's client: TLS first (``SSL``/``SASL_SSL``: the CA bundle, an optional client
certificate, host name checked unless turned off), then ApiVersions, then for ``SASL_*`` SaslHandshake v1
and SaslAuthenticate carrying the PLAIN token or the SCRAM exchange (scramp's client), as the Java client's
SaslClientAuthenticator does. A refused login is `AuthenticationFailed` with the broker's message."""

from __future__ import annotations

import itertools
import socket
import ssl
import struct
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from logbroker.config import parse_host_port
from logbroker.protocol import ApiKey, ApiSpec, api
from logbroker.protocol.errors import ErrorCode
from logbroker.protocol.messages import decode_response, encode_request
from logbroker.protocol.records import Compression, NewRecord, Record, build_batch, consumable_records

_I32 = struct.Struct(">i")
ApiVersionsRequest = api(ApiKey.ApiVersions).request
AlterScramRequest = api(ApiKey.AlterUserScramCredentials).request
CreateTopicsRequest = api(ApiKey.CreateTopics).request
DescribeScramRequest = api(ApiKey.DescribeUserScramCredentials).request
DeleteTopicsRequest = api(ApiKey.DeleteTopics).request
DescribeConfigsRequest = api(ApiKey.DescribeConfigs).request
DescribeLogDirsRequest = api(ApiKey.DescribeLogDirs).request
FindCoordinatorRequest = api(ApiKey.FindCoordinator).request
OffsetDeleteRequest = api(ApiKey.OffsetDelete).request
FetchRequest = api(ApiKey.Fetch).request
ListOffsetsRequest = api(ApiKey.ListOffsets).request
MetadataRequest = api(ApiKey.Metadata).request
ProduceRequest = api(ApiKey.Produce).request
SaslHandshakeRequest = api(ApiKey.SaslHandshake).request
SaslAuthenticateRequest = api(ApiKey.SaslAuthenticate).request

if TYPE_CHECKING:
    from logbroker._kafka.settings import KafkaSettings


class BrokerError(Exception):
    def __init__(self, code: int, message: str | None = None, context: str = "") -> None:
        try:
            name = ErrorCode(code).name
        except ValueError:
            name = f"error {code}"
        text = f"{context}: {name}" if context else name
        if message:
            text += f" ({message})"
        super().__init__(text)
        self.code = code
        self.name = name


class AuthenticationFailed(BrokerError):
    """The broker refused the SASL login (or the mechanism): its error code and message, never the password."""


class TlsError(ConnectionError):
    """The TLS handshake or a TLS setting failed (unknown CA, host name mismatch, no client certificate...)."""


def tls_context(settings: KafkaSettings) -> ssl.SSLContext:
    """The client TLS context of ``settings``: its CA bundle (else the system's), its client certificate and
    key (one PEM file may hold both), TLS 1.2 and newer, the host name checked unless turned off."""
    try:
        ctx = ssl.create_default_context(cafile=settings.ssl_ca or None)
        ctx.minimum_version = ssl.TLSVersion.TLSv1_2
        ctx.check_hostname = settings.ssl_check_hostname
        if settings.ssl_cert:
            ctx.load_cert_chain(settings.ssl_cert, settings.ssl_key or None, password=settings.ssl_key_password or None)
    except ssl.SSLError as exc:
        what = "client certificate/key" if "PEM" in str(exc) or "KEY" in str(exc).upper() else "TLS settings"
        raise TlsError(f"cannot load the {what}: {exc.reason or exc} (wrong ssl.key.password?)") from None
    except OSError as exc:
        raise TlsError(f"cannot read {exc.filename}: {exc.strerror}") from None
    return ctx


def check(code: int, message: str | None = None, context: str = "") -> None:
    if code:
        raise BrokerError(code, message, context)


# The versions this client fills in correctly, where older than the codec's newest: no topic-id versions
# of Produce/Fetch (KIP-516), and the ListOffsets/Metadata/offset versions it was written and tested for.
_CLIENT_MAX_VERSION = {0: 11, 1: 12, 2: 8, 3: 12, 8: 9, 9: 9, 19: 7, 20: 6, 32: 4}
# Versions the client never sends (Produce/Fetch before magic v2 batches, and versions it was not tested in).
_CLIENT_MIN_VERSION = {0: 3, 1: 4, 2: 1, 19: 2, 20: 1, 32: 1}


def _spec_for(request_cls: Any) -> ApiSpec:
    found = api(request_cls.API_KEY)
    hi = min(_CLIENT_MAX_VERSION.get(found.key, found.codec_max_version), found.codec_max_version)
    return ApiSpec(found, _CLIENT_MIN_VERSION.get(found.key, 0), hi)


class Connection:
    """One blocking connection. Not thread-safe; requests are sent and answered one at a time.

    With ``ssl_context`` the socket is TLS; with ``sasl`` (mechanism, username, password) the connection logs
    in right after ApiVersions."""

    def __init__(
        self,
        host: str,
        port: int,
        client_id: str = "logbroker",
        timeout: float = 30.0,
        ssl_context: ssl.SSLContext | None = None,
        sasl: tuple[str, str, str] | None = None,
        ssl_client_cert: bool = False,
    ) -> None:
        self.host, self.port = host, port
        self.client_id = client_id
        self.timeout = timeout
        self.ssl_context, self.sasl, self.ssl_client_cert = ssl_context, sasl, ssl_client_cert
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._ids = itertools.count(1)
        self.versions: dict[int, tuple[int, int]] = {}
        try:
            if ssl_context is not None:
                self.sock = ssl_context.wrap_socket(self.sock, server_hostname=host)
            self._negotiate()
            if sasl is not None:
                self._authenticate(*sasl)
        except ssl.SSLError as exc:
            self.close()
            raise TlsError(f"TLS with {host}:{port} failed: {_tls_reason(exc, ssl_client_cert)}") from None
        except BaseException:
            self.close()
            raise

    def _authenticate(self, mechanism: str, username: str, password: str) -> None:
        """SaslHandshake v1 then SaslAuthenticate: one PLAIN token, or SCRAM's two rounds (the server's final
        message is checked, so a broker that does not know the password cannot pretend it does)."""
        hs = self.do(SaslHandshakeRequest(mechanism=mechanism), 1)
        if hs.error_code:
            offered = ", ".join(hs.mechanisms or []) or "none"
            raise AuthenticationFailed(hs.error_code, f"the broker offers {offered}", f"SASL {mechanism}")
        v = self.version_for(SaslAuthenticateRequest)

        def step(token: bytes) -> bytes:
            resp = self.do(SaslAuthenticateRequest(auth_bytes=token), v)
            if resp.error_code:
                raise AuthenticationFailed(resp.error_code, resp.error_message, f"SASL {mechanism} login as {username}")
            return bytes(resp.auth_bytes or b"")

        if mechanism == "PLAIN":
            step(b"\0" + username.encode() + b"\0" + password.encode())
            return
        from scramp import ScramClient, ScramException

        scram = ScramClient([mechanism], username, password)
        try:
            scram.set_server_first(step(scram.get_client_first().encode()).decode())
            scram.set_server_final(step(scram.get_client_final().encode()).decode())
        except ScramException as exc:
            raise AuthenticationFailed(
                int(ErrorCode.SASL_AUTHENTICATION_FAILED), str(exc), f"SASL {mechanism}"
            ) from None

    def _negotiate(self) -> None:
        resp = self.do(ApiVersionsRequest(client_software_name="logbroker", client_software_version="0.1"), 3)
        if resp.error_code == ErrorCode.UNSUPPORTED_VERSION:
            resp = self.do(ApiVersionsRequest(), 0)
        check(resp.error_code, context="ApiVersions")
        self.versions = {k.api_key: (k.min_version, k.max_version) for k in resp.api_keys}

    def version_for(self, request_cls: Any) -> int:
        key = request_cls.API_KEY
        ours = _spec_for(request_cls)
        lo, hi = self.versions.get(key, (0, -1))
        v = min(hi, ours.max_version, request_cls.max_version)
        if v < max(lo, ours.min_version):
            raise BrokerError(int(ErrorCode.UNSUPPORTED_VERSION), f"broker does not support {request_cls.name}")
        return v

    def send(self, request: Any, version: int | None = None) -> tuple[int, int, ApiSpec]:
        spec = _spec_for(type(request)[None] if hasattr(type(request), "_class_version") else type(request))
        v = self.version_for(type(request)) if version is None else version
        cid = next(self._ids)
        self.sock.sendall(encode_request(spec, v, cid, self.client_id, request))
        return cid, v, spec

    def receive(self, spec: ApiSpec, version: int, cid: int) -> Any:
        size = _I32.unpack(self._recv_exact(4))[0]
        got, resp = decode_response(spec, version, self._recv_exact(size))
        if got != cid:
            raise ConnectionError(f"correlation id {got} does not match request {cid}")
        return resp

    def do(self, request: Any, version: int | None = None) -> Any:
        cid, v, spec = self.send(request, version)
        return self.receive(spec, v, cid)

    def _recv_exact(self, n: int) -> bytes:
        buf = bytearray()
        while len(buf) < n:
            chunk = self.sock.recv(min(n - len(buf), 1 << 20))
            if not chunk:
                raise ConnectionError(f"{self.host}:{self.port} closed the connection{self._closed_hint()}")
            buf += chunk
        return bytes(buf)

    def _closed_hint(self) -> str:
        """What a broker closing at once most likely wanted: the security the connection did not offer (Kafka
        closes without a word on a protocol mismatch; a TLS server may not say that it wants a certificate)."""
        missing = [] if self.ssl_context else ["TLS"]
        if not self.sasl:
            missing.append("SASL")
        if self.ssl_context and not self.ssl_client_cert:
            missing.append("a client certificate")
        return f" (does it need {' or '.join(missing)}? see --command-config)" if missing else ""

    def close(self) -> None:
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self) -> Connection:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _tls_reason(exc: ssl.SSLError, sent_cert: bool) -> str:
    if isinstance(exc, ssl.SSLCertVerificationError):
        return f"the broker's certificate was not accepted: {exc.verify_message} (ssl.truststore.location / --ssl-ca)"
    reason = exc.reason or str(exc)
    # Java's TLS 1.3 answers a missing certificate with bad_certificate; others with certificate_required.
    if "CERTIFICATE_REQUIRED" in reason.upper() or (not sent_cert and "BAD_CERTIFICATE" in reason.upper()):
        return f"the broker requires a client certificate ({reason}; ssl.keystore.location / --ssl-cert, --ssl-key)"
    if reason in ("UNKNOWN_CA", "TLSV1_ALERT_UNKNOWN_CA", "SSLV3_ALERT_BAD_CERTIFICATE"):
        return f"the broker refused the client certificate ({reason})"
    return reason


def fetch_request(
    topic: str,
    partition: int,
    offset: int,
    max_wait_ms: int = 500,
    max_bytes: int = 1 << 20,
    min_bytes: int = 1,
    read_committed: bool = False,
) -> FetchRequest:
    """A plain (sessionless) fetch of one partition."""
    F = FetchRequest.FetchTopic
    part = F.FetchPartition(
        partition=partition,
        current_leader_epoch=-1,
        fetch_offset=offset,
        log_start_offset=-1,
        partition_max_bytes=max_bytes,
    )
    return FetchRequest(
        replica_id=-1,
        max_wait_ms=max_wait_ms,
        min_bytes=min_bytes,
        max_bytes=max_bytes,
        isolation_level=1 if read_committed else 0,
        session_id=0,
        session_epoch=-1,
        topics=[F(topic=topic, partitions=[part])],
        forgotten_topics_data=[],
        rack_id="",
    )


def parse_bootstrap(bootstrap: str) -> tuple[str, int]:
    """The first HOST:PORT of a comma-separated bootstrap list; no host means 127.0.0.1."""
    first = bootstrap.split(",")[0].strip()
    if first.startswith(":"):
        first = "127.0.0.1" + first
    return parse_host_port(first, "bootstrap")


@dataclass(frozen=True)
class LogDir:
    """One log dir of one broker, as DescribeLogDirs reports it (sizes of the current replicas only)."""

    broker: int
    path: str
    error: int
    total_bytes: int | None  # None: the broker answers an older version (before v4) or does not know
    usable_bytes: int | None
    sizes: dict[tuple[str, int], int]


@dataclass
class TopicInfo:
    name: str
    partitions: int
    topic_id: str
    internal: bool
    error: int = 0


class KafkaClient:
    """Admin and data operations over a `Connection` to one broker (the embedded broker's whole cluster;
    for multi-broker clusters the CLI talks to the bootstrap broker, which suffices for admin calls)."""

    def __init__(
        self,
        bootstrap: str,
        client_id: str = "logbroker-cli",
        timeout: float = 30.0,
        security: KafkaSettings | None = None,
    ) -> None:
        """``security``: TLS and SASL as `KafkaSettings` say (its bootstrap is not used; ``bootstrap`` is)."""
        host, port = parse_bootstrap(bootstrap)
        self._ssl = tls_context(security) if security is not None and security.uses_ssl else None
        self._ssl_cert = bool(self._ssl and security and security.ssl_cert)
        self._sasl = None
        if security is not None and security.uses_sasl:
            if security.sasl_username is None:
                raise AuthenticationFailed(int(ErrorCode.SASL_AUTHENTICATION_FAILED), "no SASL username given", "SASL")
            self._sasl = (security.sasl_mechanism, security.sasl_username, security.sasl_password or "")
        self.conn = self._connect(host, port, client_id, timeout)
        self._leaders: dict[tuple[str, int], Connection] = {}
        self._nodes: dict[tuple[str, int], Connection] = {}

    def close(self) -> None:
        for c in {id(c): c for c in [*self._leaders.values(), *self._nodes.values()]}.values():
            if c is not self.conn:
                c.close()
        self.conn.close()

    def node_connection(self, host: str, port: int) -> Connection:
        """A connection to the broker at host:port, shared with every other user of that broker."""
        if (host, port) == (self.conn.host, self.conn.port):
            return self.conn
        c = self._nodes.get((host, port))
        if c is None:
            c = next((x for x in self._leaders.values() if (x.host, x.port) == (host, port)), None)
            c = c or self._connect(host, port, self.conn.client_id, self.conn.timeout)
            self._nodes[(host, port)] = c
        return c

    def _connect(self, host: str, port: int, client_id: str, timeout: float) -> Connection:
        return Connection(
            host, port, client_id, timeout, ssl_context=self._ssl, sasl=self._sasl, ssl_client_cert=self._ssl_cert
        )

    def __enter__(self) -> KafkaClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ metadata and admin

    def metadata(self, topics: Sequence[str] | None = None, auto_create: bool = False) -> Any:
        req = MetadataRequest(
            topics=None if topics is None else [MetadataRequest.MetadataRequestTopic(name=t) for t in topics],
            allow_auto_topic_creation=auto_create,
            include_topic_authorized_operations=False,
        )
        return self.conn.do(req)

    def list_topics(self) -> list[TopicInfo]:
        md = self.metadata(None)
        return sorted(
            (
                TopicInfo(t.name, len(t.partitions), str(t.topic_id), bool(t.is_internal), t.error_code)
                for t in md.topics
            ),
            key=lambda t: t.name,
        )

    def describe_topic(self, name: str) -> Any:
        md = self.metadata([name])
        t = md.topics[0]
        check(t.error_code, context=f"topic {name}")
        return t

    def leader(self, topic: str, partition: int, auto_create: bool = False) -> Connection:
        key = (topic, partition)
        conn = self._leaders.get(key)
        if conn is not None:
            return conn
        md = self.metadata([topic], auto_create=auto_create)
        brokers = {b.node_id: (b.host, b.port) for b in md.brokers}
        for t in md.topics:
            check(t.error_code, context=f"topic {topic}")
            for p in t.partitions:
                host, port = brokers[p.leader_id]
                self._leaders[(topic, p.partition_index)] = self.node_connection(host, port)
        if key not in self._leaders:
            raise BrokerError(int(ErrorCode.UNKNOWN_TOPIC_OR_PARTITION), context=f"{topic}-{partition}")
        return self._leaders[key]

    def create_topic(
        self,
        name: str,
        partitions: int = 1,
        replication: int = 1,
        configs: dict[str, str] | None = None,
        timeout_ms: int = 30000,
    ) -> None:
        T = CreateTopicsRequest.CreatableTopic
        req = CreateTopicsRequest(
            topics=[
                T(
                    name=name,
                    num_partitions=partitions,
                    replication_factor=replication,
                    assignments=[],
                    configs=[T.CreatableTopicConfig(name=k, value=v) for k, v in (configs or {}).items()],
                )
            ],
            timeout_ms=timeout_ms,
            validate_only=False,
        )
        r = self.conn.do(req).topics[0]
        check(r.error_code, r.error_message, f"create topic {name}")

    def scram_users(self, names: Sequence[str] | None = None) -> dict[str, list[tuple[int, int]]]:
        """User -> [(mechanism code 1=SHA-256/2=SHA-512, iterations)]; every user when `names` is None."""
        users = None if names is None else [DescribeScramRequest.UserName(name=n) for n in names]
        resp = self.conn.do(DescribeScramRequest(users=users))
        check(resp.error_code, resp.error_message, "describe SCRAM users")
        out = {}
        for r in resp.results:
            check(r.error_code, r.error_message, f"user {r.user}")
            out[r.user] = sorted((i.mechanism, i.iterations) for i in r.credential_infos)
        return out

    def alter_scram_users(
        self, deletions: Sequence[tuple[str, int]] = (), upsertions: Sequence[tuple[str, int, int, bytes, bytes]] = ()
    ) -> None:
        """Delete (user, mechanism) and upsert (user, mechanism, iterations, salt, salted password) credentials;
        raises BrokerError naming the first user refused."""
        A = AlterScramRequest
        req = A(
            deletions=[A.ScramCredentialDeletion(name=u, mechanism=m) for u, m in deletions],
            upsertions=[
                A.ScramCredentialUpsertion(name=u, mechanism=m, iterations=i, salt=s, salted_password=p)
                for u, m, i, s, p in upsertions
            ],
        )
        for r in self.conn.do(req).results:
            check(r.error_code, r.error_message, f"user {r.user}")

    def delete_topic(self, name: str, timeout_ms: int = 30000) -> None:
        v = self.conn.version_for(DeleteTopicsRequest)
        if v >= 6:
            req = DeleteTopicsRequest(topics=[DeleteTopicsRequest.DeleteTopicState(name=name)], timeout_ms=timeout_ms)
        else:
            req = DeleteTopicsRequest(topic_names=[name], timeout_ms=timeout_ms)
        r = self.conn.do(req, v).responses[0]
        check(r.error_code, r.error_message, f"delete topic {name}")

    def describe_configs(self, name: str) -> dict[str, tuple[str | None, int]]:
        R = DescribeConfigsRequest
        req = R(
            resources=[R.DescribeConfigsResource(resource_type=2, resource_name=name, configuration_keys=None)],
            include_synonyms=False,
            include_documentation=False,
        )
        res = self.conn.do(req).results[0]
        check(res.error_code, res.error_message, f"describe configs of {name}")
        return {c.name: (c.value, c.config_source) for c in res.configs}

    def log_dirs(self, topics: Mapping[str, Sequence[int]] | None = None) -> list[LogDir]:
        """Every broker's log dirs with the size of each partition replica they hold (all partitions, or the
        named ones). A broker that does not serve DescribeLogDirs raises BrokerError UNSUPPORTED_VERSION."""
        R = DescribeLogDirsRequest
        req = R(topics=None if topics is None else [
            R.DescribableLogDirTopic(topic=t, partitions=list(ps)) for t, ps in topics.items()
        ])  # fmt: skip
        out: list[LogDir] = []
        for b in sorted(self.metadata([]).brokers, key=lambda b: b.node_id):
            resp = self.node_connection(b.host, b.port).do(req)
            check(getattr(resp, "error_code", 0), context=f"describe log dirs of broker {b.node_id}")
            for d in resp.results:
                sizes = {
                    (t.name, p.partition_index): p.partition_size
                    for t in d.topics
                    for p in t.partitions
                    if not p.is_future_key
                }
                total, usable = getattr(d, "total_bytes", -1), getattr(d, "usable_bytes", -1)
                out.append(LogDir(b.node_id, d.log_dir, d.error_code, None if total < 0 else total,
                                  None if usable < 0 else usable, sizes))  # fmt: skip
        return out

    def coordinator(self, group: str) -> Connection:
        """A connection to the group's coordinator (FindCoordinator, retried while it is being elected)."""
        deadline = time.monotonic() + self.conn.timeout
        while True:
            fc = self.conn.do(FindCoordinatorRequest(key=group, key_type=0), 3)
            if fc.error_code not in (ErrorCode.COORDINATOR_NOT_AVAILABLE, ErrorCode.COORDINATOR_LOAD_IN_PROGRESS):
                check(fc.error_code, fc.error_message, f"coordinator of group {group}")
                return self.node_connection(fc.host, fc.port)
            if time.monotonic() > deadline:
                check(fc.error_code, fc.error_message, f"coordinator of group {group}")
            time.sleep(0.2)

    def delete_group_offsets(self, group: str, partitions: Iterable[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """OffsetDelete: the error code per partition (a top-level error raises, as kafka-consumer-groups
        --delete-offsets reports it)."""
        by_topic: dict[str, list[int]] = {}
        for t, p in partitions:
            by_topic.setdefault(t, []).append(p)
        req = OffsetDeleteRequest(
            group_id=group,
            topics=[
                OffsetDeleteRequest.OffsetDeleteRequestTopic(
                    name=t, partitions=[OffsetDeleteRequest.OffsetDeleteRequestTopic.OffsetDeleteRequestPartition(
                        partition_index=p) for p in ps])
                for t, ps in by_topic.items()
            ],
        )  # fmt: skip
        resp = self.coordinator(group).do(req, 0)
        check(resp.error_code, context=f"group {group}")
        return {(t.name, p.partition_index): p.error_code for t in resp.topics for p in t.partitions}

    def partition_sizes(self, topic: str) -> dict[int, int]:
        """Bytes on disk of each partition's leader replica (partitions a broker did not report are absent)."""
        md = self.metadata([topic])
        t = md.topics[0]
        check(t.error_code, context=f"topic {topic}")
        leaders = {p.partition_index: p.leader_id for p in t.partitions}
        sizes: dict[int, int] = {}
        for d in self.log_dirs({topic: sorted(leaders)}):
            for (name, p), size in d.sizes.items():
                if name == topic and leaders.get(p) == d.broker:
                    sizes[p] = size
        return sizes

    def list_offset(self, topic: str, partition: int, timestamp: int, read_committed: bool = False) -> int:
        """The offset for `timestamp` (-1 latest: the last stable offset when read_committed; -2 earliest)."""
        R = ListOffsetsRequest
        req = R(
            replica_id=-1,
            isolation_level=1 if read_committed else 0,
            topics=[
                R.ListOffsetsTopic(
                    name=topic,
                    partitions=[
                        R.ListOffsetsTopic.ListOffsetsPartition(
                            partition_index=partition, current_leader_epoch=-1, timestamp=timestamp
                        )
                    ],
                )
            ],
        )
        p = self.leader(topic, partition).do(req).topics[0].partitions[0]
        check(p.error_code, context=f"list offsets {topic}-{partition}")
        return p.offset

    def partition_count(self, topic: str, auto_create: bool = False) -> int:
        """How many partitions ``topic`` has (created first by a broker that auto-creates, if asked)."""
        t = self.metadata([topic], auto_create=auto_create).topics[0]
        check(t.error_code, context=f"topic {topic}")
        return len(t.partitions)

    def partitions_of(self, topics: Sequence[str]) -> dict[str, list[int]]:
        """Partition ids of each topic; raises BrokerError for a topic the broker does not know."""
        if not topics:
            return {}
        md = self.metadata(list(topics))
        out = {}
        for t in md.topics:
            check(t.error_code, context=f"topic {t.name}")
            out[t.name] = sorted(p.partition_index for p in t.partitions)
        return out

    def list_offsets(
        self, partitions: Iterable[tuple[str, int]], timestamp: int, strict: bool = True
    ) -> dict[tuple[str, int], int]:
        """ListOffsets for many partitions, one request per leader. `timestamp` is -1 (latest), -2
        (earliest) or a time in ms (offset -1 when no record is that recent). With strict=False a partition
        the broker answers with an error is left out of the result instead of raising."""
        wanted = sorted(set(partitions))
        if not wanted:
            return {}
        by_conn: dict[int, tuple[Connection, list[tuple[str, int]]]] = {}
        for tp in wanted:
            try:
                conn = self.leader(*tp)
            except BrokerError:
                if strict:
                    raise
                continue
            by_conn.setdefault(id(conn), (conn, []))[1].append(tp)
        R = ListOffsetsRequest
        out: dict[tuple[str, int], int] = {}
        for conn, tps in by_conn.values():
            topics: dict[str, list[int]] = {}
            for t, p in tps:
                topics.setdefault(t, []).append(p)
            req = R(
                replica_id=-1,
                isolation_level=0,
                topics=[
                    R.ListOffsetsTopic(
                        name=t,
                        partitions=[
                            R.ListOffsetsTopic.ListOffsetsPartition(
                                partition_index=p, current_leader_epoch=-1, timestamp=timestamp
                            )
                            for p in ps
                        ],
                    )
                    for t, ps in topics.items()
                ],
            )
            for tr in conn.do(req).topics:
                for pr in tr.partitions:
                    if pr.error_code:
                        if strict:
                            check(pr.error_code, context=f"list offsets {tr.name}-{pr.partition_index}")
                        continue
                    out[(tr.name, pr.partition_index)] = pr.offset
        return out

    # ------------------------------------------------------------------ data

    def produce(
        self,
        topic: str,
        partition: int,
        records: Sequence[NewRecord],
        compression: int = Compression.NONE,
        acks: int = -1,
        timeout_ms: int = 30000,
    ) -> int:
        """Send one batch; returns its base offset (-1 for acks=0)."""
        batch = build_batch(records, compression=compression)
        P = ProduceRequest.TopicProduceData
        req = ProduceRequest(
            transactional_id=None,
            acks=acks,
            timeout_ms=timeout_ms,
            topic_data=[P(name=topic, partition_data=[P.PartitionProduceData(index=partition, records=batch)])],
        )
        conn = self.leader(topic, partition, auto_create=True)
        if acks == 0:
            conn.send(req)
            return -1
        p = conn.do(req).responses[0].partition_responses[0]
        check(p.error_code, p.error_message, f"produce to {topic}-{partition}")
        return p.base_offset

    def fetch(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_wait_ms: int = 500,
        max_bytes: int = 1 << 20,
        read_committed: bool = False,
    ) -> tuple[list[Record], int]:
        """Records at or after `offset` and the high watermark (the last stable offset when read_committed:
        records of aborted transactions are left out, and reads stop at open ones)."""
        recs, end, _next = self.fetch_next(topic, partition, offset, max_wait_ms, max_bytes, read_committed)
        return recs, end

    def fetch_next(
        self,
        topic: str,
        partition: int,
        offset: int,
        max_wait_ms: int = 500,
        max_bytes: int = 1 << 20,
        read_committed: bool = False,
    ) -> tuple[list[Record], int, int]:
        """As `fetch`, plus the offset to fetch next: past transaction markers and skipped aborted records
        too, which a position taken from the last record would stop short of."""
        req = fetch_request(topic, partition, offset, max_wait_ms, max_bytes, read_committed=read_committed)
        p = self.leader(topic, partition).do(req).responses[0].partitions[0]
        check(p.error_code, context=f"fetch {topic}-{partition}@{offset}")
        aborted = [(a.producer_id, a.first_offset) for a in p.aborted_transactions or ()] if read_committed else None
        recs, after = consumable_records(p.records or b"", aborted)
        end = p.last_stable_offset if read_committed and p.last_stable_offset >= 0 else p.high_watermark
        return [r for r in recs if r.offset >= offset], end, max(after, offset)

    def consume(
        self, topic: str, partition: int, offset: int, count: int | None = None, idle_timeout: float = 2.0
    ) -> Iterator[Record]:
        """Yield records from `offset` until `count` records or no new data for `idle_timeout` seconds."""
        seen = 0
        last_data = time.monotonic()
        while count is None or seen < count:
            recs, _hwm = self.fetch(topic, partition, offset)
            if recs:
                last_data = time.monotonic()
            elif time.monotonic() - last_data > idle_timeout:
                return
            for r in recs:
                yield r
                seen += 1
                offset = r.offset + 1
                if count is not None and seen >= count:
                    return
