"""oslo.messaging-style notifications on Kafka (or the embedded broker), for any Python service.

`Notifier` sends, `NotificationListener` dispatches to endpoints; listener pools are consumer
groups. `logbroker.notify.oslo_driver` plugs the same machinery into oslo.messaging itself.
"""

from logbroker.notify.consumer import AT_LEAST_ONCE, AT_MOST_ONCE, Incoming, NotificationConsumer
from logbroker.notify.listener import NotificationFilter, NotificationListener, NotificationResult, Target
from logbroker.notify.notifier import PRIORITIES, Notifier
from logbroker.notify.transport import (
    InvalidTransportURL,
    KafkaOptions,
    NotifyError,
    Transport,
    get_transport,
    parse_url,
    stop_embedded,
)

HANDLED = NotificationResult.HANDLED
REQUEUE = NotificationResult.REQUEUE

__all__ = [
    "AT_LEAST_ONCE",
    "AT_MOST_ONCE",
    "HANDLED",
    "PRIORITIES",
    "REQUEUE",
    "Incoming",
    "InvalidTransportURL",
    "KafkaOptions",
    "NotificationConsumer",
    "NotificationFilter",
    "NotificationListener",
    "NotificationResult",
    "Notifier",
    "NotifyError",
    "Target",
    "Transport",
    "get_transport",
    "parse_url",
    "stop_embedded",
]
