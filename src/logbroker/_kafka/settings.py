"""Connection and security settings, turned into librdkafka configuration in one place.

Each face keeps its own option names (``mq.kafka.sasl``, oslo's ``ssl_cafile``, ``streams.security_protocol``)
and maps them onto `KafkaSettings`; `librdkafka_config` is then the only code that knows librdkafka's
property names, so the faces cannot disagree on what a setting means. Kafka's client properties (a
``--command-config`` file: ``sasl.jaas.config``, PEM trust/key stores) come in through `from_properties`, and
`java_client_properties` writes the same settings back in the Java client's names (Spark's connector).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
SECURITY_PROTOCOLS: tuple[str, ...] = get_args(SecurityProtocol)
SASL_MECHANISMS: tuple[str, ...] = get_args(SaslMechanism)


def implied_protocol(sasl: bool, ssl: bool) -> SecurityProtocol:
    """The protocol that credentials and/or TLS settings imply when none is named (mq's rule)."""
    if sasl:
        return "SASL_SSL" if ssl else "SASL_PLAINTEXT"
    return "SSL" if ssl else "PLAINTEXT"


@dataclass(frozen=True)
class KafkaSettings:
    """Where the brokers are and how to authenticate: what every client of one face shares.

    SASL settings apply only with a ``SASL_*`` protocol and TLS files only with ``*SSL``, so a face may
    fill them unconditionally. Empty strings count as unset (oslo's options use ``""``). ``extra`` is
    added last: a face's own tuning (reconnect backoff, connect timeout) or a user's pass-through.
    """

    bootstrap_servers: str
    security_protocol: SecurityProtocol = "PLAINTEXT"
    sasl_mechanism: SaslMechanism = "PLAIN"
    sasl_username: str | None = None
    sasl_password: str | None = field(default=None, repr=False)
    ssl_ca: str | None = None
    ssl_cert: str | None = None
    ssl_key: str | None = None
    ssl_key_password: str | None = field(default=None, repr=False)
    client_id: str | None = None
    extra: Mapping[str, Any] = field(default_factory=dict)
    ssl_check_hostname: bool = True  # Kafka's ssl.endpoint.identification.algorithm=https (its default)

    def __post_init__(self) -> None:
        if not self.bootstrap_servers:
            raise ValueError("bootstrap_servers is empty")
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, not {self.security_protocol!r}"
            )
        if self.sasl_mechanism not in SASL_MECHANISMS:
            raise ValueError(f"sasl_mechanism must be one of {', '.join(SASL_MECHANISMS)}, not {self.sasl_mechanism!r}")

    @property
    def uses_sasl(self) -> bool:
        return self.security_protocol.startswith("SASL")

    @property
    def uses_ssl(self) -> bool:
        return self.security_protocol.endswith("SSL")


# librdkafka properties only one side of a client reads (its CONFIGURATION.md scope C or P; aliases included).
# ``extra`` is shared by every client of a face, so a consumer tuning passed there would reach its producers and
# admin clients, each logging a CONFWARN that it ignores it; tests/test_kafka_layer.py holds the table to
# librdkafka's own warnings.
CONSUMER_ONLY = frozenset({
    "group.id", "group.instance.id", "group.protocol", "group.protocol.type", "group.remote.assignor",
    "partition.assignment.strategy", "session.timeout.ms", "heartbeat.interval.ms", "coordinator.query.interval.ms",
    "max.poll.interval.ms", "enable.auto.commit", "auto.commit.interval.ms", "enable.auto.offset.store",
    "queued.min.messages", "queued.max.messages.kbytes", "fetch.wait.max.ms", "fetch.queue.backoff.ms",
    "fetch.message.max.bytes", "max.partition.fetch.bytes", "fetch.max.bytes", "fetch.min.bytes",
    "fetch.error.backoff.ms", "isolation.level", "enable.partition.eof", "check.crcs", "auto.offset.reset",
    "consume.callback.max.messages",
})  # fmt: skip
PRODUCER_ONLY = frozenset({
    "transactional.id", "transaction.timeout.ms", "enable.idempotence", "enable.gapless.guarantee",
    "queue.buffering.max.messages", "queue.buffering.max.kbytes", "queue.buffering.max.ms", "linger.ms",
    "message.send.max.retries", "retries", "queue.buffering.backpressure.threshold", "compression.codec",
    "compression.type", "compression.level", "batch.num.messages", "batch.size", "delivery.report.only.error",
    "sticky.partitioning.linger.ms", "request.required.acks", "acks", "request.timeout.ms", "message.timeout.ms",
    "delivery.timeout.ms", "partitioner",
})  # fmt: skip
Role = Literal["producer", "consumer", "admin"]
_NOT_READ_BY: dict[str, frozenset[str]] = {"producer": CONSUMER_ONLY, "admin": CONSUMER_ONLY, "consumer": PRODUCER_ONLY}


def librdkafka_config(settings: KafkaSettings, role: Role | None = None, **overrides: Any) -> dict[str, Any]:
    """The librdkafka properties of ``settings`` (plus ``overrides``, e.g. ``group.id``). With a ``role``, what
    ``extra`` holds for the other side of the clients is left out (``overrides`` are the caller's own and stay)."""
    s = settings
    conf: dict[str, Any] = {"bootstrap.servers": s.bootstrap_servers, "security.protocol": s.security_protocol}
    if s.client_id:
        conf["client.id"] = s.client_id
    if s.uses_sasl:
        conf["sasl.mechanisms"] = s.sasl_mechanism
        if s.sasl_username is not None:
            conf["sasl.username"] = s.sasl_username
            conf["sasl.password"] = s.sasl_password or ""
    if s.uses_ssl:
        for name, value in (("ssl.ca.location", s.ssl_ca), ("ssl.certificate.location", s.ssl_cert),
                            ("ssl.key.location", s.ssl_key), ("ssl.key.password", s.ssl_key_password)):  # fmt: skip
            if value:
                conf[name] = str(value)
        if not s.ssl_check_hostname:  # librdkafka checks the host name by default (https, as Kafka)
            conf["ssl.endpoint.identification.algorithm"] = "none"
    if role is None:
        conf.update(s.extra)
    else:
        skip = _NOT_READ_BY[role]
        conf.update((k, v) for k, v in s.extra.items() if k not in skip)
    conf.update(overrides)
    return conf


def as_config(target: KafkaSettings | Mapping[str, Any], role: Role | None = None) -> dict[str, Any]:
    """Accept settings or a ready librdkafka dict (the layer's functions take either)."""
    return librdkafka_config(target, role) if isinstance(target, KafkaSettings) else dict(target)


# ------------------------------------------------------------------------ Kafka's client properties


class SecurityConfigError(ValueError):
    """Client properties that cannot be used; the message names the property."""


_JAAS_MODULES = {
    "org.apache.kafka.common.security.plain.PlainLoginModule": "PLAIN",
    "org.apache.kafka.common.security.scram.ScramLoginModule": "SCRAM",
}
_JAAS_ENTRY = re.compile(r"\s*([\w.$]+)\s+(required|requisite|sufficient|optional)\b(.*?);?\s*$", re.S)
_JAAS_OPTION = re.compile(r'\s*([\w.\-]+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|([^\s;"]+))', re.S)
# Java-only settings with no librdkafka counterpart that change nothing for a PEM set-up: accepted, not passed on.
_JAVA_ONLY = frozenset({
    "ssl.truststore.type", "ssl.keystore.type", "ssl.protocol", "ssl.enabled.protocols", "ssl.keymanager.algorithm",
    "ssl.trustmanager.algorithm", "ssl.secure.random.implementation", "ssl.provider", "ssl.engine.factory.class",
    "sasl.login.class", "sasl.client.callback.handler.class", "sasl.login.callback.handler.class",
    "sasl.login.refresh.window.factor", "sasl.login.refresh.window.jitter", "sasl.login.refresh.min.period.seconds",
    "sasl.login.refresh.buffer.seconds", "request.timeout.ms", "default.api.timeout.ms", "retry.backoff.max.ms",
})  # fmt: skip


def read_properties(path: str | os.PathLike[str]) -> dict[str, str]:
    """A Java properties file (`key=value`, `key: value`, comments, escapes, continued lines), as Kafka's
    ``--command-config`` reads it. UTF-8, with Java's ISO-8859-1 as the fallback."""
    import javaproperties

    raw = Path(path).read_bytes()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        text = raw.decode("latin-1")
    return dict(javaproperties.loads(text))


def parse_jaas(text: str, key: str = "sasl.jaas.config") -> tuple[str, dict[str, str]]:
    """Kafka's one-entry JAAS text (`Module required name="value" ...;`) -> (mechanism family, options).

    The family is PLAIN or SCRAM (the module says which); quoted values take Java's backslash escapes."""
    m = _JAAS_ENTRY.fullmatch(text.strip())
    if m is None:
        raise SecurityConfigError(f'{key}: expected \'LoginModule required username="..." password="...";\'')
    module = m[1]
    if module not in _JAAS_MODULES:
        known = ", ".join(_JAAS_MODULES)
        raise SecurityConfigError(f"{key}: login module {module} is not supported (use one of {known})")
    rest, options = m[3], {}
    pos = 0
    while rest[pos:].strip():
        om = _JAAS_OPTION.match(rest, pos)
        if om is None:
            raise SecurityConfigError(f"{key}: cannot read the options after {module} near {rest[pos:].strip()[:20]!r}")
        value = om[3] if om[2] is None else re.sub(r"\\(.)", lambda e: {"n": "\n", "t": "\t"}.get(e[1], e[1]), om[2])
        options[om[1]] = value
        pos = om.end()
    return _JAAS_MODULES[module], options


def jaas_config(mechanism: str, username: str, password: str) -> str:
    """The `sasl.jaas.config` a Java client needs for ``mechanism`` (quotes and backslashes escaped)."""
    module = next(m for m, family in _JAAS_MODULES.items() if mechanism.startswith(family))

    def q(v: str) -> str:
        return '"' + v.replace("\\", "\\\\").replace('"', '\\"') + '"'

    return f"{module} required username={q(username)} password={q(password)};"


def _pem_only(props: Mapping[str, str], key: str) -> None:
    kind = str(props.get(key, "PEM")).strip().upper()
    if kind != "PEM":
        raise SecurityConfigError(f"{key}: only PEM files are supported, got {props[key]!r} (convert with openssl)")


def from_properties(props: Mapping[str, str], bootstrap_servers: str | None = None, **overrides: Any) -> KafkaSettings:
    """Kafka client properties (Java names as in a ``--command-config`` file, or librdkafka's) -> settings.

    Understood: security.protocol, sasl.mechanism(s), sasl.jaas.config (PLAIN/SCRAM login modules),
    sasl.username/password, ssl.truststore.location (PEM) or ssl.ca.location, ssl.keystore.location (PEM:
    key and chain in one file) or ssl.certificate.location + ssl.key.location, ssl.key.password,
    ssl.endpoint.identification.algorithm, client.id, bootstrap.servers. Java-only settings that change
    nothing for PEM files are accepted and dropped; any other key is passed to librdkafka as it is (which
    names it if unknown). ``overrides`` (KafkaSettings fields, None meaning "not given") win."""
    p = {str(k).strip(): str(v).strip() for k, v in props.items()}
    extra: dict[str, Any] = {}
    kw: dict[str, Any] = {}
    for key in ("ssl.truststore.type", "ssl.keystore.type"):
        _pem_only(p, key)
    if "security.protocol" in p:
        proto = p["security.protocol"].upper()
        if proto not in SECURITY_PROTOCOLS:
            raise SecurityConfigError(
                f"security.protocol: must be one of {', '.join(SECURITY_PROTOCOLS)}, got {p['security.protocol']!r}"
            )
        kw["security_protocol"] = proto
    mech = p.get("sasl.mechanism") or p.get("sasl.mechanisms")
    if mech:
        if mech.upper() not in SASL_MECHANISMS:
            raise SecurityConfigError(f"sasl.mechanism: must be one of {', '.join(SASL_MECHANISMS)}, got {mech!r}")
        kw["sasl_mechanism"] = mech.upper()
    if p.get("sasl.jaas.config"):
        family, options = parse_jaas(p["sasl.jaas.config"])
        if mech and not mech.upper().startswith(family):
            raise SecurityConfigError(f"sasl.jaas.config: a {family} login module does not fit sasl.mechanism={mech}")
        if family == "SCRAM" and not mech:
            raise SecurityConfigError("sasl.mechanism: SCRAM-SHA-256 or SCRAM-SHA-512 is needed with ScramLoginModule")
        kw.setdefault("sasl_mechanism", "PLAIN")
        if "username" not in options or "password" not in options:
            raise SecurityConfigError("sasl.jaas.config: needs both username and password")
        kw["sasl_username"], kw["sasl_password"] = options["username"], options["password"]
    for key, name in (("sasl.username", "sasl_username"), ("sasl.password", "sasl_password")):
        if key in p:
            kw[name] = p[key]
    if p.get("ssl.truststore.location"):
        kw["ssl_ca"] = p["ssl.truststore.location"]
    if p.get("ssl.ca.location"):
        kw["ssl_ca"] = p["ssl.ca.location"]
    if p.get("ssl.keystore.location"):
        kw["ssl_cert"] = kw["ssl_key"] = p["ssl.keystore.location"]  # one PEM file: key and chain
    for key, name in (("ssl.certificate.location", "ssl_cert"), ("ssl.key.location", "ssl_key"),
                      ("ssl.key.password", "ssl_key_password"), ("client.id", "client_id")):  # fmt: skip
        if p.get(key):
            kw[name] = p[key]
    if "ssl.endpoint.identification.algorithm" in p:
        algo = p["ssl.endpoint.identification.algorithm"].lower()
        if algo not in ("", "none", "https"):
            raise SecurityConfigError(f"ssl.endpoint.identification.algorithm: must be https or empty, got {algo!r}")
        kw["ssl_check_hostname"] = algo == "https"
    for key in ("ssl.truststore.password", "ssl.keystore.password"):
        if p.get(key):
            raise SecurityConfigError(f"{key}: PEM stores have no store password (the key's is ssl.key.password)")
    handled = {
        "security.protocol", "sasl.mechanism", "sasl.mechanisms", "sasl.jaas.config", "sasl.username", "sasl.password",
        "ssl.truststore.location", "ssl.ca.location", "ssl.keystore.location", "ssl.certificate.location",
        "ssl.key.location", "ssl.key.password", "client.id", "ssl.endpoint.identification.algorithm",
        "bootstrap.servers", "ssl.truststore.password", "ssl.keystore.password",
    }  # fmt: skip
    for key, value in p.items():
        if key not in handled and key not in _JAVA_ONLY:
            extra[key] = value
    if extra:
        kw["extra"] = extra
    kw.update({k: v for k, v in overrides.items() if v is not None})
    if kw.get("security_protocol") is None:  # what the credentials and files given imply (mq's rule)
        sasl = kw.get("sasl_username") is not None or mech is not None or "sasl_mechanism" in kw
        ssl = any(kw.get(k) for k in ("ssl_ca", "ssl_cert")) or "ssl.truststore.type" in p
        kw["security_protocol"] = implied_protocol(sasl, ssl)
    servers = bootstrap_servers or p.get("bootstrap.servers")
    if not servers:
        raise SecurityConfigError("bootstrap.servers: not given")
    try:
        return KafkaSettings(servers, **kw)
    except ValueError as exc:
        raise SecurityConfigError(str(exc)) from None


def java_client_properties(settings: KafkaSettings) -> dict[str, str]:
    """The security settings in the Java client's property names (for Spark's `kafka.*` options): PEM trust
    and key stores, a JAAS entry for PLAIN/SCRAM. A key and certificate in one file become a PEM keystore;
    separate files are given inline (`ssl.keystore.key` / `ssl.keystore.certificate.chain`), as Java reads
    no separate key file. Client ids and librdkafka pass-through settings are not carried over."""
    s = settings
    props: dict[str, str] = {"security.protocol": s.security_protocol}
    if s.uses_sasl:
        props["sasl.mechanism"] = s.sasl_mechanism
        if s.sasl_username is not None:
            props["sasl.jaas.config"] = jaas_config(s.sasl_mechanism, s.sasl_username, s.sasl_password or "")
    if s.uses_ssl:
        if s.ssl_ca:
            props["ssl.truststore.type"] = "PEM"
            props["ssl.truststore.location"] = str(s.ssl_ca)
        if s.ssl_cert and s.ssl_key:
            props["ssl.keystore.type"] = "PEM"
            if os.path.abspath(s.ssl_cert) == os.path.abspath(s.ssl_key):
                props["ssl.keystore.location"] = str(s.ssl_cert)
            else:
                props["ssl.keystore.certificate.chain"] = Path(s.ssl_cert).read_text()
                props["ssl.keystore.key"] = Path(s.ssl_key).read_text()
        if s.ssl_key_password:
            props["ssl.key.password"] = s.ssl_key_password
        if not s.ssl_check_hostname:
            props["ssl.endpoint.identification.algorithm"] = ""
    return props
