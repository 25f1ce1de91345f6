"""SASL/OAUTHBEARER (RFC 7628) with Kafka's default, unsecured token validation: for development only.

Kafka's broker, given OAUTHBEARER and no validator of its own, accepts unsigned JWS tokens ("alg":"none")
and checks their claims only: an `exp` (seconds) not past, an `iat` not in the future, a string `sub` (the
principal). librdkafka (`enable.sasl.oauthbearer.unsecure.jwt`), the Java client's unsecured login module
and kafka-python's token providers make such tokens. A token that fails is answered with an RFC 7628 error
JSON, the client acknowledges with \\x01, and authentication fails with that JSON as the message, as in
Kafka's OAuthBearerSaslServer. The token's expiry bounds the session (KIP-368 re-authentication).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import time
from typing import Any

from .sasl import SaslFailure

NAME = "OAUTHBEARER"
_KEY = re.compile(r"^[A-Za-z]+$")
_VALUE = re.compile(r"^[\x21-\x7E \t\r\n]+$")
_AUTH = re.compile(r"^(\w+) +([-_~+/.a-zA-Z0-9]+=*)$")


class OAuthBearerServer:
    """One OAUTHBEARER exchange: the client's initial response, or its \\x01 after an error challenge."""

    name = NAME

    def __init__(self, clock_ms: Any = None, allowable_skew_ms: int = 0) -> None:
        self._now_ms = clock_ms or (lambda: int(time.time() * 1000))
        self._skew = allowable_skew_ms
        self.user: str | None = None
        self.expires_at_ms: int | None = None
        self._error: str | None = None
        self._done = False

    @property
    def complete(self) -> bool:
        return self._done

    def step(self, token: bytes) -> bytes:
        if self._done:
            raise SaslFailure(_generic(), "a SASL token after authentication completed")
        if token == b"\x01" and self._error is not None:
            raise SaslFailure(self._error)
        self._error = None
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise SaslFailure(_generic(), "OAUTHBEARER initial response is not UTF-8") from None
        authzid, auth, _extensions = _initial_response(text)
        claims, problem = self._validate(auth)
        if claims is None:
            # An error challenge, not yet a failure (RFC 7628 3.2.2): the client answers \x01.
            self._error = json.dumps({"status": problem}, separators=(",", ":"))
            return self._error.encode()
        principal = claims["sub"]
        if authzid and authzid != principal:
            raise SaslFailure(
                "Authentication failed: Client requested an authorization id "
                f"({authzid}) that is different from the token's principal name ({principal})"
            )
        self.user = principal
        self.expires_at_ms = int(float(claims["exp"]) * 1000)
        self._done = True
        return b""

    def _validate(self, token: str) -> tuple[dict[str, Any] | None, str]:
        """The claims of a valid unsecured JWS, or None and the RFC 6750 error status."""
        parts = token.split(".")
        if len(parts) != 3 or parts[2] != "":
            return None, "invalid_token"
        try:
            header = json.loads(_b64url(parts[0]))
            claims = json.loads(_b64url(parts[1]))
        except (ValueError, binascii.Error):
            return None, "invalid_token"
        if not isinstance(header, dict) or header.get("alg") != "none" or not isinstance(claims, dict):
            return None, "invalid_token"
        now = self._now_ms()
        exp, iat = claims.get("exp"), claims.get("iat")
        if not _number(exp) or now > float(exp) * 1000 + self._skew:
            return None, "invalid_token"
        if iat is not None and (not _number(iat) or float(iat) * 1000 > now + self._skew or iat > exp):
            return None, "invalid_token"
        if not isinstance(claims.get("sub"), str) or not claims["sub"].strip():
            return None, "invalid_token"
        return claims, ""


def _initial_response(text: str) -> tuple[str, str, dict[str, str]]:
    """(authzid, bearer token, extensions) of `n,[a=authzid],^Aauth=Bearer token^A[key=value^A]*^A`."""
    if not text.startswith("n,") or not text.endswith("\x01\x01"):
        raise SaslFailure(_generic(), "Invalid OAUTHBEARER client first message")
    gs2, _, rest = text.partition("\x01")
    fields = gs2.split(",")
    if len(fields) != 3 or fields[2] != "" or (fields[1] and not fields[1].startswith("a=")):
        raise SaslFailure(_generic(), "Invalid OAUTHBEARER client first message: gs2 header")
    authzid = fields[1][2:]
    pairs: dict[str, str] = {}
    for kv in rest[:-2].split("\x01"):
        if not kv:
            continue
        key, sep, value = kv.partition("=")
        if not sep or not _KEY.match(key) or not _VALUE.match(value):
            raise SaslFailure(_generic(), f"Invalid OAUTHBEARER key/value pair {key!r}")
        pairs[key] = value
    auth = pairs.pop("auth", None)
    if auth is None:
        raise SaslFailure(_generic(), "Invalid OAUTHBEARER client first message: 'auth' not specified")
    m = _AUTH.match(auth)
    if m is None or m[1].lower() != "bearer":
        raise SaslFailure(_generic(), "Invalid OAUTHBEARER client first message: not a bearer token")
    return authzid, m[2], pairs


def _b64url(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def _generic() -> str:
    return f"Authentication failed during authentication due to invalid credentials with SASL mechanism {NAME}"
