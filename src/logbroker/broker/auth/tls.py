"""TLS for SSL and SASL_SSL listeners: the server context from Kafka's PEM keystore and truststore settings, and
the principal of a client certificate (Kafka's `ssl.principal.mapping.rules`).

Kafka's PEM stores are what this takes: `ssl.keystore.location` is one file with the private key (PKCS#8,
encrypted with `ssl.key.password` or not) and the certificate chain, `ssl.truststore.location` a bundle of CA
certificates. TLS 1.2 is the oldest version offered.
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

ANONYMOUS = "User:ANONYMOUS"
_VERSIONS = {"TLSv1.2": ssl.TLSVersion.TLSv1_2, "TLSv1.3": ssl.TLSVersion.TLSv1_3}
_CLIENT_AUTH = {"none": ssl.CERT_NONE, "requested": ssl.CERT_OPTIONAL, "required": ssl.CERT_REQUIRED}


class TlsConfigError(ValueError):
    """The listener's TLS settings cannot make a server context (the message says which file and why)."""


def server_context(
    keystore: Path,
    key_password: str | None,
    truststore: Path | None,
    client_auth: str,
    enabled_protocols: str = "TLSv1.2,TLSv1.3",
) -> ssl.SSLContext:
    """A server-side context: the broker's key and chain, the CAs client certificates must chain to, and
    whether a client certificate is asked for (requested) or needed (required)."""
    versions = sorted(_VERSIONS[p.strip()] for p in enabled_protocols.split(",") if p.strip())
    if not versions:
        raise TlsConfigError("ssl_enabled_protocols offers no TLS version")
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version, ctx.maximum_version = versions[0], versions[-1]
    try:
        ctx.load_cert_chain(str(keystore), password=key_password or None)
    except FileNotFoundError:
        raise TlsConfigError(f"ssl_keystore_location {keystore}: no such file") from None
    except ssl.SSLError as exc:
        raise TlsConfigError(
            f"ssl_keystore_location {keystore}: not a PEM private key and certificate chain"
            f"{' (or ssl_key_password is wrong)' if key_password else ''}: {exc.reason or exc}"
        ) from None
    mode = _CLIENT_AUTH[client_auth.lower()]
    if mode != ssl.CERT_NONE:
        if truststore is None:
            raise TlsConfigError(f"ssl_client_auth={client_auth} needs ssl_truststore_location (the CAs to trust)")
        try:
            ctx.load_verify_locations(cafile=str(truststore))
        except FileNotFoundError:
            raise TlsConfigError(f"ssl_truststore_location {truststore}: no such file") from None
        except ssl.SSLError as exc:
            raise TlsConfigError(f"ssl_truststore_location {truststore}: not PEM certificates: {exc}") from None
    ctx.verify_mode = mode
    return ctx


def subject_of(der: bytes) -> str:
    """A certificate's subject as an RFC 2253 distinguished name (what Java's X500Principal.getName gives:
    the last RDN first)."""
    from cryptography import x509

    return x509.load_der_x509_certificate(der).subject.rfc4514_string()


# ----------------------------------------------------------------------------- ssl.principal.mapping.rules

_RULE = re.compile(r"\s*(?:RULE:((?:\\/|[^/])*)/((?:\\/|[^/])*)/([LU]?)|(DEFAULT))\s*(?:,|$)")


@dataclass(frozen=True, slots=True)
class _Rule:
    pattern: re.Pattern[str] | None  # None: DEFAULT (the whole name)
    replacement: str = ""
    case: str = ""

    def apply(self, dn: str) -> str | None:
        if self.pattern is None:
            return dn
        m = self.pattern.fullmatch(dn)
        if m is None:
            return None
        out = m.expand(self.replacement)
        return out.lower() if self.case == "L" else out.upper() if self.case == "U" else out


class PrincipalMapper:
    """Kafka's SslPrincipalMapper: the first rule whose pattern matches the whole name gives the user name
    (`$n` group references, an optional /L or /U); DEFAULT is the name itself; no matching rule refuses."""

    def __init__(self, rules: str = "DEFAULT") -> None:
        self.rules: list[_Rule] = []
        text = rules.strip() or "DEFAULT"
        pos = 0
        while pos < len(text):
            m = _RULE.match(text, pos)
            if m is None or m.end() == pos:
                raise ValueError(f"ssl_principal_mapping_rules: invalid rule at {text[pos:]!r}")
            pos = m.end()
            if m[4]:
                self.rules.append(_Rule(None))
                continue
            try:
                pattern = re.compile(m[1].replace("\\/", "/"))
            except re.error as exc:
                raise ValueError(f"ssl_principal_mapping_rules: bad pattern {m[1]!r}: {exc}") from None
            replacement = re.sub(r"\$(\d+)", r"\\g<\1>", m[2].replace("\\/", "/"))
            self.rules.append(_Rule(pattern, replacement, m[3]))

    def name(self, dn: str) -> str:
        for rule in self.rules:
            out = rule.apply(dn)
            if out is not None:
                return out
        raise LookupError(f"No rules apply to {dn}, rules {self.rules}")


def certificate_principal(ssl_object: ssl.SSLObject | None, mapper: PrincipalMapper) -> str:
    """The principal of a TLS connection: User:<mapped subject> with a client certificate, else ANONYMOUS."""
    der = ssl_object.getpeercert(binary_form=True) if ssl_object is not None else None
    if not der:
        return ANONYMOUS
    return f"User:{mapper.name(subject_of(der))}"


def listener_context_factory(get: Callable[[str], object]) -> tuple[ssl.SSLContext, PrincipalMapper]:
    """The context and principal mapper of one listener, from its settings (`get(key)` gives a listener's
    effective value of a BrokerSettings field)."""
    keystore = get("ssl_keystore_location")
    truststore = get("ssl_truststore_location")
    ctx = server_context(
        Path(str(keystore)),
        get("ssl_key_password"),  # type: ignore[arg-type]
        Path(str(truststore)) if truststore else None,
        str(get("ssl_client_auth")),
        str(get("ssl_enabled_protocols")),
    )
    return ctx, PrincipalMapper(str(get("ssl_principal_mapping_rules")))
