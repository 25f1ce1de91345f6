"""What the group handlers share: Kafka's limit on the strings a group answer echoes.

A request string over 32767 bytes never gets here (the request decoder closes the connection, as Kafka's
readers do); but Kafka's writers cannot send one either, so an error message that would exceed the limit
(one quoting a 32 KiB group id) is answered as UNKNOWN_SERVER_ERROR without a message.
"""

from __future__ import annotations

import logging

from logbroker.broker.groups.model import too_long
from logbroker.protocol import ErrorCode as E

log = logging.getLogger("logbroker.broker")


def fit_message(code: int, message: str | None) -> tuple[int, str | None]:
    """An error message Kafka could send; one too long to be a Kafka string makes the answer Kafka's
    UNKNOWN_SERVER_ERROR with no message."""
    if too_long(message):
        return int(E.UNKNOWN_SERVER_ERROR), None
    return code, message


__all__ = ["fit_message"]
