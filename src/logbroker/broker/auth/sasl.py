"""Server sides of the SASL mechanisms Kafka clients use: PLAIN and SCRAM-SHA-256/512 (RFC 5802/7677).

Sans-IO: a mechanism takes the client's tokens (what SaslAuthenticate carries, or a v0 raw frame) and
returns the server's, and ends with the authenticated user name. The SCRAM exchange itself is scramp's
(the established implementation); what is Kafka's here is the credential (salt, stored key, server key,
iterations: never the password, which Kafka's AlterUserScramCredentials does not send either, only a salted
password), the iteration bounds and the messages: a failure says only what Kafka says, since the client is
not yet authenticated. A `SaslFailure` means: answer SASL_AUTHENTICATION_FAILED with its message, then
close the connection.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from scramp import ScramException, ScramMechanism

SCRAM_MECHANISMS = {"SCRAM-SHA-256": hashlib.sha256, "SCRAM-SHA-512": hashlib.sha512}
MECHANISMS = ("PLAIN", *SCRAM_MECHANISMS, "OAUTHBEARER")
# Kafka's ScramMechanism bounds for both hashes; AlterUserScramCredentials refuses counts outside them.
MIN_ITERATIONS, MAX_ITERATIONS = 4096, 16384


class SaslFailure(Exception):
    """Authentication failed. `str(exc)` is what the client may be told (Kafka passes on only the messages
    of its SaslAuthenticationException; every other failure gets the generic one); `detail` is for the log."""

    def __init__(self, message: str, detail: str = "") -> None:
        super().__init__(message)
        self.detail = detail or message


def _invalid(mechanism: str, detail: str) -> SaslFailure:
    return SaslFailure(
        f"Authentication failed during authentication due to invalid credentials with SASL mechanism {mechanism}",
        detail,
    )


@dataclass(frozen=True, slots=True)
class ScramCredential:
    """What a broker keeps of a SCRAM user: enough to check a proof, not enough to make one."""

    mechanism: str
    salt: bytes
    stored_key: bytes
    server_key: bytes
    iterations: int

    @classmethod
    def from_salted_password(
        cls, mechanism: str, salt: bytes, salted_password: bytes, iterations: int
    ) -> ScramCredential:
        """From what AlterUserScramCredentials carries (RFC 5802: ClientKey, StoredKey, ServerKey)."""
        hf = SCRAM_MECHANISMS[mechanism]
        client_key = hmac.new(salted_password, b"Client Key", hf).digest()
        server_key = hmac.new(salted_password, b"Server Key", hf).digest()
        return cls(mechanism, salt, hf(client_key).digest(), server_key, iterations)

    @classmethod
    def from_password(cls, mechanism: str, password: str, iterations: int = MIN_ITERATIONS) -> ScramCredential:
        """For `logbroker users add`: salted and iterated here, the password itself is not kept."""
        salt, stored, server, i = ScramMechanism(mechanism).make_auth_info(password, iteration_count=iterations)
        return cls(mechanism, salt, stored, server, i)

    def to_json(self) -> dict[str, Any]:
        b64 = base64.b64encode
        return {
            "mechanism": self.mechanism,
            "salt": b64(self.salt).decode(),
            "stored_key": b64(self.stored_key).decode(),
            "server_key": b64(self.server_key).decode(),
            "iterations": self.iterations,
        }

    @classmethod
    def from_json(cls, v: dict[str, Any]) -> ScramCredential:
        d = base64.b64decode
        return cls(v["mechanism"], d(v["salt"]), d(v["stored_key"]), d(v["server_key"]), int(v["iterations"]))


class Mechanism(Protocol):
    name: str
    user: str | None  # set once the exchange has succeeded

    def step(self, token: bytes) -> bytes:
        """The server's answer to the client's next token; SaslFailure when authentication fails."""
        ...

    @property
    def complete(self) -> bool: ...


class PlainServer:
    """SASL/PLAIN (RFC 4616): one token, authzid NUL user NUL password; Kafka's checks and messages."""

    name = "PLAIN"

    def __init__(self, check: Callable[[str, str], bool]) -> None:
        self._check = check
        self.user: str | None = None
        self._done = False

    @property
    def complete(self) -> bool:
        return self._done

    def step(self, token: bytes) -> bytes:
        if self._done:
            raise _invalid(self.name, "a SASL token after authentication completed")
        self._done = True
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise _invalid(self.name, "Invalid SASL/PLAIN response: not UTF-8") from None
        parts = text.split("\0")
        if len(parts) != 3:
            raise _invalid(self.name, f"Invalid SASL/PLAIN response: expected 3 tokens, got {len(parts)}")
        authz, user, password = parts
        if not user:
            raise _invalid(self.name, "Authentication failed: username not specified")
        if not password:
            raise _invalid(self.name, "Authentication failed: password not specified")
        if not self._check(user, password):
            raise SaslFailure("Authentication failed: Invalid username or password")
        if authz and authz != user:
            raise SaslFailure(
                "Authentication failed: Client requested an authorization id that is different from username"
            )
        self.user = user
        return b""


class ScramServer:
    """SCRAM-SHA-256/512 without channel binding (Kafka offers none): two client tokens, two answers."""

    def __init__(self, mechanism: str, lookup: Callable[[str], ScramCredential | None]) -> None:
        if mechanism not in SCRAM_MECHANISMS:
            raise ValueError(f"unknown SCRAM mechanism {mechanism}")
        self.name = mechanism
        self._lookup = lookup
        self._server = ScramMechanism(mechanism).make_server(self._auth_info)
        self._stage = 0
        self._user: str | None = None
        self.user: str | None = None

    @property
    def complete(self) -> bool:
        return self._stage == 2

    def _auth_info(self, name: str) -> tuple[bytes, bytes, bytes, int]:
        user = _unescape(name)
        cred = self._lookup(user)
        if cred is None or cred.mechanism != self.name:
            # Kafka: an unknown user fails at the first message, with the generic answer.
            raise _invalid(self.name, f"Authentication failed: Invalid user credentials (user {user!r})")
        if cred.iterations < MIN_ITERATIONS:
            raise _invalid(self.name, f"Iterations {cred.iterations} is less than the minimum {MIN_ITERATIONS}")
        self._user = user
        return cred.salt, cred.stored_key, cred.server_key, cred.iterations

    def step(self, token: bytes) -> bytes:
        try:
            text = token.decode("utf-8")
        except UnicodeDecodeError:
            raise _invalid(self.name, "a SCRAM message that is not UTF-8") from None
        try:
            if self._stage == 0:
                authz = _authzid(text)
                self._server.set_client_first(text)
                if authz and authz != self._user:
                    raise SaslFailure(
                        "Authentication failed: Client requested an authorization id that is different from username"
                    )
                self._stage = 1
                return self._server.get_server_first().encode()
            if self._stage == 1:
                self._server.set_client_final(text)
                answer = self._server.get_server_final().encode()
                self._stage = 2
                self.user = self._user
                return answer
        except ScramException as exc:
            raise _invalid(self.name, f"SCRAM exchange refused: {exc}") from exc
        except SaslFailure:
            raise
        except (ValueError, KeyError, IndexError, TypeError) as exc:  # malformed messages scramp did not expect
            raise _invalid(self.name, f"malformed SCRAM message: {exc}") from exc
        raise _invalid(self.name, "a SASL token after authentication completed")


def _authzid(client_first: str) -> str:
    """The authorization id of a gs2 header ("n,a=alice,..."), or ""."""
    parts = client_first.split(",", 2)
    return _unescape(parts[1][2:]) if len(parts) > 1 and parts[1].startswith("a=") else ""


def _unescape(name: str) -> str:
    """RFC 5802 saslname: "=2C" is a comma and "=3D" an equals sign."""
    return name.replace("=2C", ",").replace("=3D", "=")


def new_mechanism(
    name: str, plain_check: Callable[[str, str], bool], scram_lookup: Callable[[str], ScramCredential | None]
) -> Mechanism:
    """The server side of `name` (one of MECHANISMS); ValueError for another."""
    if name == "PLAIN":
        return PlainServer(plain_check)
    if name in SCRAM_MECHANISMS:
        return ScramServer(name, scram_lookup)
    raise ValueError(f"unsupported SASL mechanism {name}")
