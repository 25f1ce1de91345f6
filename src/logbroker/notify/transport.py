"""Transport URLs and the `[oslo_messaging_kafka]` options, mapped onto librdkafka settings.

One place decides how an oslo-style URL and option set become confluent-kafka configuration, so the
Notifier, the listener and the oslo.messaging driver cannot disagree (oslo's own driver did, on
vhosts).
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from logbroker._kafka import ErrorMap, KafkaSettings
from logbroker.addresses import parse_host_port
from logbroker.embedded import EmbeddedLease, acquire_embedded

LOG = logging.getLogger(__name__)

DEFAULT_PORT = 9092
CODECS = ("none", "gzip", "snappy", "lz4", "zstd")
SECURITY_PROTOCOLS = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")
SASL_MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")


class InvalidTransportURL(ValueError):
    """A transport URL that cannot be used; the message names the offending part."""


class NotifyError(RuntimeError):
    """A notification could not be delivered (after its retries) or the broker is unreachable."""


# Every Kafka failure is a NotifyError to callers (oslo has no finer classes); the shared layer still decides
# what is transient.
notify_error = ErrorMap(NotifyError)


@dataclass(frozen=True)
class KafkaOptions:
    """oslo.messaging's `[oslo_messaging_kafka]` options, same names, defaults and meaning."""

    kafka_max_fetch_bytes: int = 1024 * 1024
    kafka_consumer_timeout: float = 1.0
    consumer_group: str = "oslo_messaging_consumer"
    enable_auto_commit: bool = False
    max_poll_records: int = 500
    producer_batch_timeout: float = 0.0
    producer_batch_size: int = 16384
    compression_codec: str = "none"
    security_protocol: str = "PLAINTEXT"
    sasl_mechanism: str = "PLAIN"
    ssl_cafile: str = ""
    ssl_client_cert_file: str = ""
    ssl_client_key_file: str = ""
    ssl_client_key_password: str = ""
    # Not oslo options: bounded waits that oslo leaves to librdkafka's 5-minute defaults.
    send_timeout: float = 10.0
    connect_timeout: float = 10.0
    extra: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.compression_codec not in CODECS:
            raise ValueError(f"compression_codec must be one of {', '.join(CODECS)}, not {self.compression_codec!r}")
        if self.security_protocol not in SECURITY_PROTOCOLS:
            raise ValueError(
                f"security_protocol must be one of {', '.join(SECURITY_PROTOCOLS)}, not {self.security_protocol!r}"
            )
        if self.sasl_mechanism not in SASL_MECHANISMS:
            raise ValueError(f"sasl_mechanism must be one of {', '.join(SASL_MECHANISMS)}, not {self.sasl_mechanism!r}")
        for name in ("kafka_max_fetch_bytes", "max_poll_records", "producer_batch_size"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1")
        for name in ("kafka_consumer_timeout", "send_timeout", "connect_timeout"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        if self.producer_batch_timeout < 0:
            raise ValueError("producer_batch_timeout must be >= 0")

    @classmethod
    def from_any(cls, value: KafkaOptions | dict[str, Any] | None, base: KafkaOptions | None = None) -> KafkaOptions:
        """Accept options as a dict (unknown keys are refused by name) over `base`."""
        base = base or cls()
        if value is None:
            return base
        if isinstance(value, KafkaOptions):
            return value
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(value) - known)
        if unknown:
            raise ValueError(f"unknown driver option(s): {', '.join(unknown)}")
        return replace(base, **value)


@dataclass(frozen=True)
class Transport:
    """A parsed transport: Kafka hosts with credentials and vhost, or an embedded broker directory."""

    hosts: tuple[tuple[str, int], ...] = ()
    username: str | None = None
    password: str | None = None
    virtual_host: str | None = None
    embedded_path: Path | None = None
    options: KafkaOptions = field(default_factory=KafkaOptions)

    @property
    def bootstrap(self) -> str:
        if self.embedded_path is not None:
            return _embedded_bootstrap(self.embedded_path)
        return ",".join(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.hosts)

    def topic(self, topic: str, priority: str | None = None) -> str:
        """`<topic>.<priority>[.<vhost>]`: the one naming rule for both sending and listening."""
        return ".".join(part for part in (topic, priority, self.virtual_host) if part)

    def kafka_settings(self, opts: KafkaOptions | None = None) -> KafkaSettings:
        """oslo's option names on the shared layer's settings; credentials come from the URL."""
        o = opts or self.options
        return KafkaSettings(
            self.bootstrap,
            o.security_protocol,  # type: ignore[arg-type]  # checked by KafkaOptions
            sasl_mechanism=o.sasl_mechanism,  # type: ignore[arg-type]
            sasl_username=self.username,
            sasl_password=self.password,
            ssl_ca=o.ssl_cafile,
            ssl_cert=o.ssl_client_cert_file,
            ssl_key=o.ssl_client_key_file,
            ssl_key_password=o.ssl_client_key_password,
            extra={"socket.connection.setup.timeout.ms": int(o.connect_timeout * 1000), **o.extra},
        )

    def producer_overrides(self, opts: KafkaOptions | None = None) -> dict[str, Any]:
        """oslo's producer options as librdkafka properties (``kafka_extra`` still wins)."""
        o = opts or self.options
        return {
            "linger.ms": o.producer_batch_timeout * 1000,
            "batch.num.messages": o.producer_batch_size,
            "compression.codec": o.compression_codec,
            "acks": "all",
            "message.timeout.ms": int(o.send_timeout * 1000),
            **o.extra,
        }

    def consumer_overrides(self, group: str | None, opts: KafkaOptions | None = None) -> dict[str, Any]:
        o = opts or self.options
        return {
            "group.id": group or o.consumer_group,
            "max.partition.fetch.bytes": o.kafka_max_fetch_bytes,
            "enable.auto.commit": o.enable_auto_commit,
            "auto.offset.reset": "latest",
            "enable.partition.eof": False,
            **o.extra,
        }


def _split_host(entry: str, url: str) -> tuple[str | None, str | None, str, int]:
    user = password = None
    if "@" in entry:
        cred, entry = entry.rsplit("@", 1)
        user, _, pw = cred.partition(":")
        user = unquote(user) or None
        password = unquote(pw) if _ else None
    try:
        host, port = parse_host_port(entry, f"host in {url!r}", default_port=DEFAULT_PORT)
    except ValueError as exc:
        raise InvalidTransportURL(str(exc)) from None
    if not host:
        raise InvalidTransportURL(f"host in {url!r} is empty")
    return user, password, host, port


def parse_url(url: str, options: KafkaOptions | dict[str, Any] | None = None) -> Transport:
    """`kafka://user:pass@h1:p1,h2:p2/vhost` or `embedded:///path/to/data` (`logbroker://` = `kafka://`)."""
    opts = KafkaOptions.from_any(options)
    if not isinstance(url, str) or "://" not in url:
        raise InvalidTransportURL(f"transport URL {url!r} has no scheme (expected kafka:// or embedded://)")
    scheme, rest = url.split("://", 1)
    scheme = scheme.lower()
    if scheme == "embedded":
        netloc, _, path = rest.partition("/")
        if netloc:
            raise InvalidTransportURL(f"embedded URL {url!r} takes no host ({netloc!r}); use embedded:///path")
        if not path:
            raise InvalidTransportURL(f"embedded URL {url!r} has no data directory path")
        return Transport(embedded_path=Path("/" + unquote(path)), options=opts)
    if scheme not in ("kafka", "logbroker"):
        raise InvalidTransportURL(f"scheme {scheme!r} of {url!r} is not supported (kafka, logbroker, embedded)")
    rest = rest.split("?", 1)[0]
    netloc, _, vhost = rest.partition("/")
    if not netloc:
        raise InvalidTransportURL(f"transport URL {url!r} has no host")
    hosts: list[tuple[str, int]] = []
    username = password = None
    for i, entry in enumerate(netloc.split(",")):
        if not entry:
            raise InvalidTransportURL(f"host list of {url!r} has an empty entry")
        user, pw, host, port = _split_host(entry, url)
        if i == 0:
            username, password = user, pw
        elif user is not None and (user, pw) != (username, password):
            LOG.warning("transport URL has different credentials per host; using those of the first host")
        hosts.append((host, port))
    return Transport(tuple(hosts), username, password, unquote(vhost) or None, None, opts)


def get_transport(url: str | Transport, options: KafkaOptions | dict[str, Any] | None = None) -> Transport:
    if isinstance(url, Transport):
        return url if options is None else replace(url, options=KafkaOptions.from_any(options, url.options))
    return parse_url(url, options)


# `embedded://` URLs hold one lease per data directory on the process-wide registry (shared with mq), from
# first use until stop_embedded() or interpreter exit: a transport is a value that carries no close(), and
# notifiers and listeners come and go on the same URL without restarting the broker in between.
_embedded_lock = threading.Lock()
_embedded: dict[Path, EmbeddedLease] = {}


def _embedded_bootstrap(path: Path) -> str:
    key = path.resolve()
    with _embedded_lock:
        lease = _embedded.get(key)
        if lease is None or lease.released or not lease.broker.running:
            if lease is not None:
                lease.release()
            lease = _embedded[key] = acquire_embedded(key)
        return lease.bootstrap


def stop_embedded() -> None:
    """Let go of every embedded broker that `embedded://` URLs started; each stops unless another user of
    its data directory (an mq Client) still holds it (tests, process exit)."""
    with _embedded_lock:
        leases = list(_embedded.values())
        _embedded.clear()
    for lease in leases:
        lease.release()
