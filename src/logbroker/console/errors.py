"""The console's one error: a refused or failed action in Kafka's vocabulary."""

from __future__ import annotations


class ConsoleError(Exception):
    """A refused or failed action, as one line: Kafka's error name and message. ``status`` is the HTTP one."""

    def __init__(self, message: str, status: int = 400) -> None:
        super().__init__(message)
        self.message, self.status = message, status


def code_name(code: int) -> str:
    """Kafka's name of an error code (the number when it is not one we know)."""
    from logbroker.protocol.errors import ErrorCode

    try:
        return ErrorCode(code).name
    except ValueError:
        return str(code)
