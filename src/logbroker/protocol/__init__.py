"""Sans-IO Kafka wire protocol: framing, message codecs, record batches, error codes.

Nothing in this package performs I/O: bytes go in, typed values come out, and back. It is the only
package that imports the codec (kafka-python); other layers use `api(key)` for message types.
"""

from .apis import Api, ApiKey, ApiSpec, UnknownApi, api
from .connection import RawFrame, Request, ServerConnection
from .errors import ErrorCode, ProtocolError

__all__ = [
    "Api",
    "ApiKey",
    "ApiSpec",
    "ErrorCode",
    "ProtocolError",
    "RawFrame",
    "Request",
    "ServerConnection",
    "UnknownApi",
    "api",
]
