"""DeleteTopics (20): by name (v1-5) or by name or topic id (v6), refusing what Kafka refuses up front.

Authorization is Kafka's controller's (ControllerApis.deleteTopics): DELETE on the cluster allows every
topic; otherwise a topic needs DELETE, and what is answered depends on DESCRIBE, so that a client learns
nothing about topics it may not see: by name, without DESCRIBE, TOPIC_AUTHORIZATION_FAILED whether the topic
exists or not; with DESCRIBE but not DELETE, unknown names are UNKNOWN_TOPIC_OR_PARTITION and known ones
TOPIC_AUTHORIZATION_FAILED. By id, an unknown id is UNKNOWN_TOPIC_ID; a known one not deletable is
TOPIC_AUTHORIZATION_FAILED, with its name only if the principal may DESCRIBE it.
"""

from __future__ import annotations

import uuid
from collections import Counter
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol import ErrorCode as E

from ..auth.acls import CLUSTER_NAME, AclOperation, ResourceType
from ..context import BrokerContext
from ..dispatch import handles
from ..seams import TopicError

API = api(ApiKey.DeleteTopics)
R = API.response
TR = R.DeletableTopicResult
ZERO_UUID = uuid.UUID(int=0)
_UNKNOWN_NAME = "This server does not host this topic-partition."


@handles(ApiKey.DeleteTopics, 0, 6, kafka4_min=1)
def handle(ctx: BrokerContext, req: Request) -> R:
    body = req.body
    wanted = [(t.name, t.topic_id) for t in body.topics] if req.version >= 6 else [(n, None) for n in body.topic_names]
    refused, valid = _validate(wanted)
    if valid and body.timeout_ms <= 0:
        # Kafka hands the valid part to its controller with this deadline, which has passed before the
        # controller runs it: the whole request fails, every entry as sent, nothing deleted.
        return R(
            throttle_time_ms=0,
            responses=[TR(name=n, topic_id=i, error_code=E.REQUEST_TIMED_OUT, error_message=None) for n, i in wanted],
        )
    results = list(refused)
    everything = ctx.access.authorize(req, AclOperation.DELETE, ResourceType.CLUSTER, CLUSTER_NAME)
    for name, topic_id in valid:
        if name is None:
            assert topic_id is not None
            by_id = ctx.topics.by_id(topic_id)
            if by_id is None:
                results.append(
                    TR(
                        name=None,
                        topic_id=topic_id,
                        error_code=E.UNKNOWN_TOPIC_ID,
                        error_message="This server does not host this topic ID.",
                    )
                )
                continue
            name = by_id.name
            if not everything and not ctx.access.authorize(req, AclOperation.DELETE, ResourceType.TOPIC, name):
                seen = ctx.access.authorize(req, AclOperation.DESCRIBE, ResourceType.TOPIC, name)
                results.append(_denied(name if seen else None, topic_id))
                continue
        elif not everything and _name_denied(ctx, req, name):
            results.append(_denied(name, ZERO_UUID))
            continue
        try:
            if not ctx.settings.delete_topic_enable:
                raise TopicError(E.TOPIC_DELETION_DISABLED, "topic deletion is disabled on this broker")
            meta = ctx.topics.get(name)
            if meta is not None and meta.internal:
                raise TopicError(E.INVALID_REQUEST, f"internal topic {name!r} cannot be deleted")
            meta = ctx.topics.delete(name)
            results.append(TR(name=name, topic_id=uuid.UUID(meta.topic_id), error_code=0, error_message=None))
        except TopicError as exc:
            # Kafka's controller answers an unknown name with the error's own message.
            message = _UNKNOWN_NAME if exc.error == E.UNKNOWN_TOPIC_OR_PARTITION else str(exc)
            results.append(TR(name=name, topic_id=topic_id or ZERO_UUID, error_code=exc.error, error_message=message))
    return R(throttle_time_ms=0, responses=results)


def _validate(wanted: list[tuple[str | None, uuid.UUID | None]]) -> tuple[list[Any], list[tuple[str | None, Any]]]:
    """(results for the entries Kafka refuses before deleting anything, the entries left to delete).

    As Kafka: a name or id given more than once is one INVALID_REQUEST result and is not deleted; a v6
    entry must name its topic by name or by id, not both and not neither. (A zero UUID reads as None.)
    """
    names = Counter(n for n, i in wanted if n is not None and i is None)
    ids = Counter(i for n, i in wanted if i is not None and n is None)
    refused, valid, reported = [], [], set()
    for name, topic_id in wanted:
        if name is not None and topic_id is not None:
            refused.append(_invalid(name, topic_id, "give the topic's name or its id, not both"))
        elif name is None and topic_id is None:
            refused.append(_invalid(None, None, "neither a topic name nor a topic id was given"))
        elif name is not None and names[name] > 1:
            if ("name", name) not in reported:
                reported.add(("name", name))
                refused.append(_invalid(name, None, "the topic name appears more than once"))
        elif topic_id is not None and ids[topic_id] > 1:
            if ("id", topic_id) not in reported:
                reported.add(("id", topic_id))
                refused.append(_invalid(None, topic_id, "the topic id appears more than once"))
        else:
            valid.append((name, topic_id))
    return refused, valid


def _name_denied(ctx: BrokerContext, req: Request, name: str) -> bool:
    """A topic named without DELETE: refused, unless the principal may DESCRIBE it and it does not exist
    (then it is answered as unknown)."""
    if ctx.access.authorize(req, AclOperation.DELETE, ResourceType.TOPIC, name):
        return False
    return ctx.topics.get(name) is not None or not ctx.access.authorize(
        req, AclOperation.DESCRIBE, ResourceType.TOPIC, name
    )


def _denied(name: str | None, topic_id: uuid.UUID) -> Any:
    return TR(name=name, topic_id=topic_id, error_code=E.TOPIC_AUTHORIZATION_FAILED,
              error_message="Topic authorization failed.")  # fmt: skip


def _invalid(name: str | None, topic_id: uuid.UUID | None, message: str) -> Any:
    return TR(name=name, topic_id=topic_id, error_code=E.INVALID_REQUEST, error_message=message)
