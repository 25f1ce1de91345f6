"""The SASL exchange of one connection on a SASL_PLAINTEXT or SASL_SSL listener, sans-IO.

Kafka's SaslServerAuthenticator is the spec: before authentication a connection may send ApiVersions (once)
and SaslHandshake; a v0 handshake is followed by raw token frames (KIP-43), a v1 handshake by SaslAuthenticate
requests (KIP-152). Anything else closes the connection (a request where a SaslAuthenticate is due gets its
error response first, as Kafka's handleSaslToken does). A failed authentication is answered
SASL_AUTHENTICATION_FAILED (raw tokens get no answer) and the connection is closed; an unknown mechanism gets
UNSUPPORTED_SASL_MECHANISM with the enabled list. With `connections.max.reauth.ms` the session expires: the
client re-authenticates in band (KIP-368: a new SaslHandshake on the live connection, at most once a second,
same mechanism and principal), and a connection whose session expired is closed at its next request.

The server feeds requests and raw frames in and acts on the `Outcome`; this module never touches a socket.
"""

from __future__ import annotations

import hmac
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import Enum
from pathlib import Path
from typing import Any

from logbroker.protocol import ApiKey, Request, api
from logbroker.protocol.errors import ErrorCode as E

from .oauthbearer import NAME as OAUTHBEARER
from .oauthbearer import OAuthBearerServer
from .sasl import Mechanism, SaslFailure, ScramCredential, new_mechanism

HANDSHAKE = api(ApiKey.SaslHandshake).response
AUTHENTICATE = api(ApiKey.SaslAuthenticate).response
_MIN_REAUTH_INTERVAL_S = 1.0  # Kafka: a second re-authentication within a second is not one


class Stage(Enum):
    VERSIONS_OR_HANDSHAKE = 1  # nothing received yet: ApiVersions or SaslHandshake
    HANDSHAKE = 2  # ApiVersions answered: SaslHandshake only
    AUTHENTICATE = 3  # mechanism chosen: tokens (raw, or in SaslAuthenticate)
    REAUTH_BAD_MECHANISM = 4  # a re-authentication asked for another mechanism: the next token fails it
    COMPLETE = 5
    FAILED = 6


@dataclass(slots=True)
class Outcome:
    """What the connection does with a request or token it handed in."""

    response: Any = None  # the request's answer (None: none)
    raw: bytes | None = None  # a raw token answer (v0 exchange)
    dispatch: bool = False  # not the authenticator's: run the request's handler (ApiVersions)
    close: bool = False  # close after answering (immediately, nothing more is read)
    failure: SaslFailure | None = None  # authentication failed: log it, answer after the failure delay, close
    authenticated: bool = False  # this step completed (re-)authentication


class SaslSession:
    """One connection's SASL state: the mechanism in progress, the principal once authenticated, the
    session's expiry."""

    def __init__(
        self,
        enabled: list[str],
        plain_check: Callable[[str, str], bool],
        scram_lookup: Callable[[str, str], ScramCredential | None],  # (user, mechanism)
        reauth_ms: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.enabled = enabled
        self._plain_check = plain_check
        self._scram_lookup = scram_lookup
        self.reauth_ms = reauth_ms
        self._clock = clock
        self.stage = Stage.VERSIONS_OR_HANDSHAKE
        self.raw = False  # tokens come as raw frames (v0 handshake)
        self.mechanism: Mechanism | None = None
        self.mechanism_name = ""
        self.principal: str | None = None  # set once authenticated, kept across re-authentications
        self.expires_at: float | None = None
        self._reauth_started = 0.0
        self._reauth_from: tuple[str, str] | None = None  # (mechanism, principal) being re-authenticated

    # ------------------------------------------------------------------ state

    @property
    def authenticated(self) -> bool:
        """The connection may send other requests (also while a re-authentication is going on)."""
        return self.principal is not None and self.stage is not Stage.FAILED

    @property
    def in_exchange(self) -> bool:
        """Requests and tokens belong to the authenticator, not to handlers."""
        return self.stage not in (Stage.COMPLETE, Stage.FAILED)

    def expired(self) -> bool:
        return self.expires_at is not None and self._clock() >= self.expires_at

    def may_reauthenticate(self) -> bool:
        """A SaslHandshake on an authenticated connection begins a re-authentication only when the session
        expires at all and the last one began over a second ago (otherwise its handler refuses it)."""
        now = self._clock()
        return (
            self.stage is Stage.COMPLETE
            and self.expires_at is not None
            and now - self._reauth_started >= _MIN_REAUTH_INTERVAL_S
        )

    def begin_reauthentication(self) -> None:
        assert self.principal is not None
        self._reauth_started = self._clock()
        self._reauth_from = (self.mechanism_name, self.principal)
        self.stage = Stage.HANDSHAKE
        self.mechanism = None

    # ------------------------------------------------------------------ requests

    def on_request(self, req: Request) -> Outcome:
        key = req.api_key
        if self.stage is Stage.VERSIONS_OR_HANDSHAKE and key == ApiKey.ApiVersions and self._reauth_from is None:
            self.stage = Stage.HANDSHAKE
            return Outcome(dispatch=True)
        if self.stage in (Stage.VERSIONS_OR_HANDSHAKE, Stage.HANDSHAKE):
            if key != ApiKey.SaslHandshake:
                return self._fail_silently(f"unexpected {_name(key)} request during the SASL handshake")
            return self._handshake(req)
        if self.stage is Stage.REAUTH_BAD_MECHANISM:
            return self._fail_silently(self._bad_mechanism)
        if self.stage is Stage.AUTHENTICATE and not self.raw:
            if key != ApiKey.SaslAuthenticate:
                return self._refuse_request(req)
            return self._authenticate(req)
        return self._fail_silently(f"unexpected {_name(key)} request in SASL state {self.stage.name}")

    def on_token(self, token: bytes) -> Outcome:
        """A raw token frame (after a v0 handshake): the mechanism's answer goes back raw; a failure closes the
        connection without an answer (the v0 exchange has no way to say why)."""
        if self.stage is not Stage.AUTHENTICATE or not self.raw or self.mechanism is None:
            return self._fail_silently("a raw SASL token outside a v0 exchange")
        out = Outcome()
        try:
            out.raw = self.mechanism.step(token)
            if self.mechanism.complete:
                self._complete(out)
        except SaslFailure as exc:
            self.stage = Stage.FAILED
            return Outcome(close=True, failure=exc)
        return out

    def _handshake(self, req: Request) -> Outcome:
        wanted = req.body.mechanism
        if wanted not in self.enabled:
            self.stage = Stage.FAILED
            response = HANDSHAKE(error_code=int(E.UNSUPPORTED_SASL_MECHANISM), mechanisms=list(self.enabled))
            return Outcome(response=response, failure=SaslFailure(f"Unsupported SASL mechanism {wanted}"))
        response = HANDSHAKE(error_code=0, mechanisms=list(self.enabled))
        self.raw = req.version == 0
        if self._reauth_from is not None and wanted != self._reauth_from[0]:
            self._bad_mechanism = (
                f"SASL mechanism '{wanted}' requested by client is not supported for re-authentication of "
                f"mechanism '{self._reauth_from[0]}'"
            )
            self.stage = Stage.REAUTH_BAD_MECHANISM
            return Outcome(response=response)
        if wanted == OAUTHBEARER:
            self.mechanism = OAuthBearerServer()
        else:
            self.mechanism = new_mechanism(wanted, self._plain_check, lambda user: self._scram_lookup(user, wanted))
        self.mechanism_name = wanted
        self.stage = Stage.AUTHENTICATE
        return Outcome(response=response)

    def _authenticate(self, req: Request) -> Outcome:
        assert self.mechanism is not None
        try:
            answer = self.mechanism.step(bytes(req.body.auth_bytes or b""))
            out = Outcome()
            lifetime = self._complete(out) if self.mechanism.complete else 0
        except SaslFailure as exc:
            self.stage = Stage.FAILED
            response = AUTHENTICATE(
                error_code=int(E.SASL_AUTHENTICATION_FAILED),
                error_message=str(exc),
                auth_bytes=b"",
                session_lifetime_ms=0,
            )
            return Outcome(response=response, failure=exc)
        # Kafka leaves the message at its default, "" (not null), when authentication goes on or succeeds.
        out.response = AUTHENTICATE(error_code=0, error_message="", auth_bytes=answer, session_lifetime_ms=lifetime)
        return out

    def _complete(self, out: Outcome) -> int:
        """Authentication done: the principal, checked against the one being re-authenticated; the session's
        lifetime in ms (0: no expiry)."""
        assert self.mechanism is not None and self.mechanism.user is not None
        principal = f"User:{self.mechanism.user}"
        if self._reauth_from is not None and principal != self._reauth_from[1]:
            before = self._reauth_from[1].replace(":", ".", 1)
            raise SaslFailure(
                f"Cannot change principals during re-authentication from {before}: {principal.replace(':', '.', 1)}"
            )
        self.principal = principal
        self._reauth_from = None
        self.stage = Stage.COMPLETE
        # The session lasts connections.max.reauth.ms, or less when the credential expires sooner (an
        # OAUTHBEARER token's exp), as Kafka computes it; 0 means no expiry.
        lifetime = self.reauth_ms
        token_expiry = getattr(self.mechanism, "expires_at_ms", None)
        if token_expiry is not None:
            left = max(int(token_expiry - time.time() * 1000), 0)
            lifetime = min(left, lifetime) if lifetime > 0 else left
        self.expires_at = self._clock() + lifetime / 1000 if lifetime > 0 or token_expiry is not None else None
        out.authenticated = True
        return lifetime

    def _refuse_request(self, req: Request) -> Outcome:
        """Another request where a SaslAuthenticate is due: Kafka answers it with its own error response
        (ILLEGAL_SASL_STATE where the response has a top-level error code), after the failure delay, then
        closes the connection."""
        self.stage = Stage.FAILED
        failure = SaslFailure(f"Unexpected Kafka request of type {_name(req.api_key)} during SASL authentication.")
        try:
            response = api(req.api_key).response()
            if hasattr(response, "error_code"):
                response.error_code = int(E.ILLEGAL_SASL_STATE)
        except Exception:  # a response the codec cannot make empty: close unanswered
            return Outcome(close=True, failure=failure)
        return Outcome(response=response, failure=failure)

    def _fail_silently(self, detail: str) -> Outcome:
        self.stage = Stage.FAILED
        return Outcome(close=True, failure=SaslFailure(detail))

    _bad_mechanism = ""


def _name(key: int) -> str:
    try:
        return ApiKey(key).name
    except ValueError:
        return f"key {key}"


# ----------------------------------------------------------------------------- PLAIN users


_JAAS_USER = re.compile(r'\buser_([^=\s]+)\s*=\s*"((?:[^"\\]|\\.)*)"')


def parse_plain_users(text: str) -> dict[str, str]:
    """PLAIN users from Kafka's JAAS form (`PlainLoginModule required user_alice="secret";`) or from
    `name=password` lines (`#` comments)."""
    if "LoginModule" in text:
        return {m[1]: re.sub(r"\\(.)", r"\1", m[2]) for m in _JAAS_USER.finditer(text)}
    users: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith(("#", "!")):
            continue
        name, sep, password = line.partition("=")
        if not sep or not name.strip():
            raise ValueError(f"PLAIN users: {line.split('=')[0]!r}... is not name=password")
        users[name.strip()] = password.strip()
    return users


def load_plain_users(file: Path | None, inline: str | None) -> dict[str, str]:
    users: dict[str, str] = {}
    if file is not None:
        try:
            users.update(parse_plain_users(Path(file).read_text()))
        except OSError as exc:
            raise ValueError(f"sasl_plain_users_file {file}: {exc.strerror}") from None
    if inline:
        users.update(parse_plain_users(inline))
    return users


def plain_checker(users: Mapping[str, str]) -> Callable[[str, str], bool]:
    """A PLAIN password check in constant time per candidate (no timing hint of how much matched)."""

    def check(user: str, password: str) -> bool:
        expected = users.get(user)
        ok = hmac.compare_digest((expected or "\0").encode(), password.encode())
        return expected is not None and ok

    return check
