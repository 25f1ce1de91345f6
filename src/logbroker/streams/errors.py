"""Errors of `logbroker.streams`: one base class so callers can catch the layer."""

from __future__ import annotations


class StreamsError(Exception):
    """Anything `logbroker.streams` refuses or the broker reports."""


class StreamsConfigError(StreamsError, ValueError):
    """A refused configuration; the message names the offending key (``streams.cache_size``)."""


class SerializationError(StreamsError, ValueError):
    """An event could not be serialised; raised by publish() before anything is sent."""


class UnknownNamespaceError(StreamsError, KeyError):
    """No implicit-subscription handler factory is registered for the namespace."""


class TokenExpiredError(StreamsError):
    """A rewind token points before the topic's retention (its low watermark): those events are gone."""


class PublishError(StreamsError):
    """The broker refused or failed to acknowledge a publish."""
