"""TLS for client connections, done here over memory BIOs rather than by asyncio's TLS transport.

Why (issue 32, measured on Python 3.11): asyncio's SSLProtocol allocates a 256 KiB read buffer per connection
and, once closed, stays in a reference cycle with its application protocol (it keeps the protocol's bound
`get_buffer`/`buffer_updated`), and on a failed handshake with the exception's traceback (CPython gh-109534);
the broker tunes its collector for throughput (`serve`: young collections every 50,000 allocations), so a
flood of handshake-and-close connections grew RSS by ~300 KB per connection (2,000 handshakes: +460 MB; a
ClientHello-then-close flood: +935 MB per 3,000). Here a connection holds an `ssl.SSLObject` and two memory
BIOs; ciphertext is received into one buffer the broker shares between connections (the event loop hands it
to one connection at a time) and plaintext is decrypted straight into the request codec's buffer.

`TlsSession` is sans-IO (bytes in, bytes out); `TlsTransport` gives the connection the asyncio.Transport
methods it uses over the raw socket transport, so the request path is the same with and without TLS.
"""

from __future__ import annotations

import asyncio
import ssl
from typing import Any

RECEIVE_BUFFER = 256 << 10  # ciphertext read at once (one TLS record is at most ~16.7 KB)


class TlsSession:
    """One server-side TLS connection without I/O: `feed` ciphertext, `handshake`, `read_into` plaintext,
    `write` plaintext; `outgoing()` is the ciphertext to send after each of them."""

    __slots__ = ("_in", "_out", "established", "obj")

    def __init__(self, context: ssl.SSLContext) -> None:
        self._in = ssl.MemoryBIO()
        self._out = ssl.MemoryBIO()
        self.obj = context.wrap_bio(self._in, self._out, server_side=True)
        self.established = False

    def feed(self, data: Any) -> None:
        self._in.write(data)

    def handshake(self) -> bool:
        """Advance the handshake: True once done; ssl.SSLError when it failed (the alert is in `outgoing`)."""
        try:
            self.obj.do_handshake()
        except ssl.SSLWantReadError:
            return False
        self.established = True
        return True

    def read_into(self, buffer: memoryview) -> int | None:
        """Decrypt into `buffer`: the byte count, 0 when more ciphertext is needed, None at the peer's
        close_notify. ssl.SSLError when the stream is damaged."""
        try:
            n = self.obj.read(len(buffer), buffer)
        except ssl.SSLWantReadError:
            return 0
        except ssl.SSLZeroReturnError:
            return None
        # CPython's _ssl answers the peer's close_notify with 0 bytes rather than SSLZeroReturnError (more
        # ciphertext needed is SSLWantReadError, and the buffer is never empty): 0 is the end.
        return n if n else None

    def write(self, data: Any) -> None:
        self.obj.write(data)

    def close_notify(self) -> None:
        try:
            self.obj.unwrap()
        except (ssl.SSLError, ValueError):  # not established, or the peer is gone: nothing more to say
            pass

    @property
    def buffered(self) -> int:
        """Ciphertext received and not yet decrypted, plus plaintext decrypted and not yet read."""
        return self._in.pending + self.obj.pending()

    def outgoing(self) -> bytes:
        return self._out.read()


class TlsTransport(asyncio.Transport):
    """The established TLS stream as the transport a `ClientConnection` writes to: writes are encrypted
    and handed to the socket transport; flow control, closing and addresses are the socket transport's."""

    def __init__(self, raw: asyncio.Transport, session: TlsSession, on_resume: Any) -> None:
        super().__init__()
        self._raw = raw
        self._session = session
        self._on_resume = on_resume  # decrypts what arrived while reading was paused

    def write(self, data: Any) -> None:
        if self._raw.is_closing():
            return
        self._session.write(data)
        self._raw.write(self._session.outgoing())

    def writelines(self, list_of_data: Any) -> None:
        for data in list_of_data:
            self.write(data)

    def can_write_eof(self) -> bool:
        return False

    def get_write_buffer_size(self) -> int:
        return self._raw.get_write_buffer_size()

    def get_write_buffer_limits(self) -> tuple[int, int]:
        return self._raw.get_write_buffer_limits()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        self._raw.set_write_buffer_limits(high, low)

    def pause_reading(self) -> None:
        self._raw.pause_reading()

    def resume_reading(self) -> None:
        self._raw.resume_reading()
        self._on_resume()

    def is_reading(self) -> bool:
        return self._raw.is_reading()

    def is_closing(self) -> bool:
        return self._raw.is_closing()

    def close(self) -> None:
        if self._raw.is_closing():
            return
        self._session.close_notify()
        self._raw.write(self._session.outgoing())
        self._raw.close()  # after what is buffered has gone out

    def abort(self) -> None:
        self._raw.abort()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        obj = self._session.obj
        if name == "ssl_object":
            return obj
        if name == "peercert":
            return obj.getpeercert()
        if name == "cipher":
            return obj.cipher()
        if name == "sslcontext":
            return obj.context
        return self._raw.get_extra_info(name, default)

    def get_protocol(self) -> Any:
        return self._raw.get_protocol()

    def set_protocol(self, protocol: Any) -> None:
        raise RuntimeError("a TLS client connection keeps its protocol")
