"""What a confluent-kafka error means, decided once; each face maps the meaning onto its own exception types.

librdkafka reports the same condition under several codes (a broker's UNKNOWN_TOPIC_OR_PART and the
client's own _UNKNOWN_TOPIC; NOT_LEADER and LEADER_NOT_AVAILABLE), and the faces used to keep private,
slightly different lists of them. `classify` groups codes into a `Kind`; an `ErrorMap` per face turns
a kind into that face's exception (``TopicNotFound``, ``NotifyError``, ``PublishError`` ...).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, TypeVar

from confluent_kafka import KafkaError, KafkaException


class Kind(enum.Enum):
    UNKNOWN_TOPIC = "unknown topic or partition"
    TOPIC_EXISTS = "topic already exists"
    NOT_LEADER = "no leader (yet)"
    MESSAGE_TOO_LARGE = "message too large"
    AUTH = "authentication or authorization failed"
    TIMEOUT = "timed out"
    TRANSPORT = "broker unreachable"
    CONFIG = "invalid configuration or argument"
    FATAL = "fatal client error"
    RETRIABLE = "retriable"
    OTHER = "other"


K = KafkaError
_BY_CODE: dict[int, Kind] = {
    **dict.fromkeys((K.UNKNOWN_TOPIC_OR_PART, K._UNKNOWN_TOPIC, K._UNKNOWN_PARTITION, K.UNKNOWN_TOPIC_ID),
                    Kind.UNKNOWN_TOPIC),
    K.TOPIC_ALREADY_EXISTS: Kind.TOPIC_EXISTS,
    **dict.fromkeys((K.NOT_LEADER_FOR_PARTITION, K.LEADER_NOT_AVAILABLE), Kind.NOT_LEADER),
    **dict.fromkeys((K.MSG_SIZE_TOO_LARGE, K.RECORD_LIST_TOO_LARGE), Kind.MESSAGE_TOO_LARGE),
    **dict.fromkeys((K.SASL_AUTHENTICATION_FAILED, K._AUTHENTICATION, K.ILLEGAL_SASL_STATE,
                     K.UNSUPPORTED_SASL_MECHANISM, K.TOPIC_AUTHORIZATION_FAILED, K.GROUP_AUTHORIZATION_FAILED,
                     K.CLUSTER_AUTHORIZATION_FAILED, K.TRANSACTIONAL_ID_AUTHORIZATION_FAILED), Kind.AUTH),
    **dict.fromkeys((K._TIMED_OUT, K.REQUEST_TIMED_OUT, K._MSG_TIMED_OUT, K._TIMED_OUT_QUEUE), Kind.TIMEOUT),
    **dict.fromkeys((K._TRANSPORT, K._ALL_BROKERS_DOWN, K._RESOLVE, K.NETWORK_EXCEPTION, K._SSL), Kind.TRANSPORT),
    **dict.fromkeys((K._INVALID_ARG, K.INVALID_CONFIG, K.INVALID_PARTITIONS, K.INVALID_REPLICATION_FACTOR,
                     K.INVALID_REPLICA_ASSIGNMENT, K.TOPIC_EXCEPTION, K.POLICY_VIOLATION), Kind.CONFIG),
}  # fmt: skip
del K

# Conditions that clear up by themselves shortly after a topic is created (or a leader moves).
_SETTLING = (Kind.NOT_LEADER, Kind.UNKNOWN_TOPIC, Kind.TIMEOUT)


@dataclass(frozen=True)
class Classified:
    kind: Kind
    message: str
    code: int | None = None
    retriable: bool = False
    fatal: bool = False

    @property
    def transient(self) -> bool:
        """Worth retrying for a few seconds: retriable, or what a just-created topic answers for a moment."""
        return self.retriable or self.kind in _SETTLING


class KafkaLayerError(Exception):
    """Raised by this layer itself (ensure_topics); carries a `Kind` so faces map it like a KafkaError."""

    kind: Kind = Kind.OTHER

    def __init__(self, message: str, kind: Kind | None = None, cause: Classified | None = None) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind
        self.cause = cause


class TopicMissing(KafkaLayerError):
    """The topic does not exist and was not created (creation off, or the broker did not auto-create it)."""

    kind = Kind.UNKNOWN_TOPIC


class TopicRefused(KafkaLayerError):
    """CreateTopics was refused; ``cause`` says why (AUTH, CONFIG ...)."""

    kind = Kind.UNKNOWN_TOPIC


class TopicNotReady(KafkaLayerError):
    """The topic exists but not every partition got a leader within the timeout."""

    kind = Kind.UNKNOWN_TOPIC


class BrokerUnreachable(KafkaLayerError):
    """No metadata or admin answer from the bootstrap servers within the timeout."""

    kind = Kind.TRANSPORT


def kafka_error_of(exc: BaseException | KafkaError | None) -> KafkaError | None:
    """The KafkaError inside a KafkaException (confluent-kafka puts it in args[0]), or the error itself."""
    if isinstance(exc, KafkaError):
        return exc
    if isinstance(exc, KafkaException) and exc.args and isinstance(exc.args[0], KafkaError):
        return exc.args[0]
    return None


def classify(err: BaseException | KafkaError | None) -> Classified:
    """Kind, text and flags of a KafkaError, a KafkaException, this layer's errors or a client-build error."""
    if isinstance(err, KafkaLayerError):
        return Classified(err.kind, str(err), None, err.cause.retriable if err.cause else False)
    ke = kafka_error_of(err)
    if ke is None:
        if err is None:
            return Classified(Kind.OTHER, "unknown error")
        if isinstance(err, (ValueError, TypeError)):  # refused by confluent-kafka before librdkafka saw it
            return Classified(Kind.CONFIG, str(err))
        if isinstance(err, TimeoutError):
            return Classified(Kind.TIMEOUT, str(err) or "timed out")
        text = str(err.args[0]) if isinstance(err, KafkaException) and err.args else str(err)
        return Classified(Kind.OTHER, text)
    code = ke.code()
    retriable, fatal = bool(ke.retriable()), bool(ke.fatal())
    kind = _BY_CODE.get(code)
    if kind is None:
        kind = Kind.FATAL if fatal else Kind.RETRIABLE if retriable else Kind.OTHER
    return Classified(kind, ke.str(), code, retriable, fatal)


ErrorFactory = Callable[[str], Exception]
T = TypeVar("T")


@dataclass(frozen=True)
class ErrorMap:
    """One face's exception per `Kind`, ``default`` for the rest: ``raise face_error(exc) from None``."""

    default: ErrorFactory
    kinds: Mapping[Kind, ErrorFactory] = field(default_factory=dict)

    def __call__(self, err: BaseException | KafkaError | None, context: str = "") -> Exception:
        c = classify(err)
        make = self.kinds.get(c.kind, self.default)
        return make(f"{context}{c.message}")


def new_client(factory: Callable[[dict[str, Any]], T], conf: Mapping[str, Any]) -> T:
    """Build a confluent-kafka client. librdkafka checks properties (names, values, TLS files) only now, so
    any refusal here is a configuration error: a `KafkaLayerError` of kind CONFIG, for the face to name."""
    try:
        return factory(dict(conf))
    except (KafkaException, ValueError, TypeError) as exc:
        c = classify(exc)
        raise KafkaLayerError(c.message, Kind.CONFIG, c) from None
