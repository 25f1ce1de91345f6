"""Development keys and certificates as PEM that Apache Kafka (``ssl.keystore.type=PEM``: a PKCS#8 key, then
the certificate chain) and OpenSSL (librdkafka, Python's ``ssl``) both read: one implementation for
`logbroker certs`, the security benchmark and the tests' certificate sets.

A key with a password is encrypted as PBE-SHA1-3DES (see `_encrypt_pkcs8`), the one PKCS#8 encryption all of
them take; the PBES2 that `cryptography` writes fails in Kafka on Java 17.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import secrets
from typing import Any

__all__ = ["cert_pem", "issue", "key_pem", "new_key"]


def new_key(key_type: str) -> Any:
    from cryptography.hazmat.primitives.asymmetric import ec, rsa

    if key_type == "rsa":
        return rsa.generate_private_key(public_exponent=65537, key_size=2048)
    return ec.generate_private_key(ec.SECP256R1())


def key_pem(key: Any, password: str | None) -> bytes:
    """PKCS#8 PEM, encrypted with ``password`` as PBE-SHA1-3DES (see `_encrypt_pkcs8`)."""
    from cryptography.hazmat.primitives import serialization

    der = key.private_bytes(serialization.Encoding.DER, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    if not password:
        return _pem("PRIVATE KEY", der)
    return _pem("ENCRYPTED PRIVATE KEY", _encrypt_pkcs8(der, password))


def _pem(label: str, der: bytes) -> bytes:
    import base64

    body = base64.b64encode(der).decode()
    lines = [body[i : i + 64] for i in range(0, len(body), 64)]
    return (f"-----BEGIN {label}-----\n" + "\n".join(lines) + f"\n-----END {label}-----\n").encode()


# pbeWithSHAAnd3-KeyTripleDES-CBC (PKCS#12 PBE, RFC 7292 appendix C): the one PKCS#8 encryption that Java 17's
# PEM keystore (Kafka's, via EncryptedPrivateKeyInfo and a PBE SecretKeyFactory) and OpenSSL (librdkafka,
# Python's ssl) all read. The PBES2 (AES) that `cryptography` writes fails in Kafka on Java 17 with
# "PBES2 SecretKeyFactory not available".
_PBE_SHA1_3DES = "1.2.840.113549.1.12.1.3"
_PBE_ITERATIONS = 10_000


def _encrypt_pkcs8(der: bytes, password: str) -> bytes:
    if not password.isascii():  # Java's PBE keys take ASCII only ("Password is not ASCII")
        raise ValueError("Java (Kafka's PEM keystores) takes ASCII key passwords only")
    from cryptography.hazmat.decrepit.ciphers.algorithms import TripleDES
    from cryptography.hazmat.primitives import padding
    from cryptography.hazmat.primitives.ciphers import Cipher, modes

    salt = secrets.token_bytes(8)
    secret = password.encode("utf-16-be") + b"\0\0"  # a BMPString with its terminator, as both Java and OpenSSL
    key = _pkcs12_kdf(secret, salt, 1, _PBE_ITERATIONS, 24)
    iv = _pkcs12_kdf(secret, salt, 2, _PBE_ITERATIONS, 8)
    padder = padding.PKCS7(64).padder()
    plain = padder.update(der) + padder.finalize()
    enc = Cipher(TripleDES(key), modes.CBC(iv)).encryptor()
    data = enc.update(plain) + enc.finalize()
    params = _der(0x30, _der(0x04, salt) + _der_int(_PBE_ITERATIONS))
    algorithm = _der(0x30, _der_oid(_PBE_SHA1_3DES) + params)
    return _der(0x30, algorithm + _der(0x04, data))


def _pkcs12_kdf(password: bytes, salt: bytes, purpose: int, iterations: int, size: int) -> bytes:
    """RFC 7292 appendix B.2 with SHA-1 (u = 20, v = 64): purpose 1 derives the key, 2 the IV."""
    import hashlib

    v = 64

    def stretch(data: bytes) -> bytes:  # copies of data filling a whole number of v-byte blocks
        n = v * -(-len(data) // v)
        return (data * (n // len(data) + 1))[:n] if data else b""

    i_block = bytearray(stretch(salt) + stretch(password))
    out = b""
    while len(out) < size:
        a = bytes([purpose]) * v + bytes(i_block)
        for _ in range(iterations):
            a = hashlib.sha1(a).digest()
        out += a
        b = int.from_bytes((a * (v // len(a) + 1))[:v], "big")
        for j in range(0, len(i_block), v):
            chunk = (int.from_bytes(i_block[j : j + v], "big") + b + 1) % (1 << (8 * v))
            i_block[j : j + v] = chunk.to_bytes(v, "big")
    return out[:size]


def _der(tag: int, content: bytes) -> bytes:
    n = len(content)
    if n < 0x80:
        return bytes([tag, n]) + content
    size = (n.bit_length() + 7) // 8
    return bytes([tag, 0x80 | size]) + n.to_bytes(size, "big") + content


def _der_int(value: int) -> bytes:
    return _der(0x02, value.to_bytes(value.bit_length() // 8 + 1, "big"))


def _der_oid(dotted: str) -> bytes:
    parts = [int(p) for p in dotted.split(".")]
    body = bytearray([40 * parts[0] + parts[1]])
    for p in parts[2:]:
        chunk = [p & 0x7F]
        while p > 0x7F:
            p >>= 7
            chunk.append(0x80 | (p & 0x7F))
        body += bytes(reversed(chunk))
    return _der(0x06, bytes(body))


def cert_pem(cert: Any) -> bytes:
    from cryptography.hazmat.primitives import serialization

    return cert.public_bytes(serialization.Encoding.PEM)


def _san(host: str) -> Any:
    from cryptography import x509

    try:
        return x509.IPAddress(ipaddress.ip_address(host.strip("[]")))
    except ValueError:
        return x509.DNSName(host)


def issue(
    subject: str, key: Any, ca: tuple[Any, Any] | None, days: int, *, hosts: tuple[str, ...] = (), server: bool
) -> Any:
    """A certificate for ``key``: a CA (``ca`` None, self-signed) or a leaf signed by ``ca`` = (cert, key)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    now = dt.datetime.now(dt.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    issuer_name, issuer_key = (name, key) if ca is None else (ca[0].subject, ca[1])
    b = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - dt.timedelta(minutes=5))  # a little clock skew between hosts
        .not_valid_after(now + dt.timedelta(days=days))
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
    )
    is_ca = ca is None
    b = b.add_extension(x509.BasicConstraints(ca=is_ca, path_length=0 if is_ca else None), critical=True)
    b = b.add_extension(
        x509.KeyUsage(digital_signature=True, key_encipherment=not is_ca and _is_rsa(key), content_commitment=False,
                      data_encipherment=False, key_agreement=False, key_cert_sign=is_ca, crl_sign=is_ca,
                      encipher_only=False, decipher_only=False),
        critical=True,
    )  # fmt: skip
    if ca is not None:
        ski = ca[0].extensions.get_extension_for_class(x509.SubjectKeyIdentifier).value
        b = b.add_extension(x509.AuthorityKeyIdentifier.from_issuer_subject_key_identifier(ski), critical=False)
        # A server certificate also authenticates a broker to another broker (Kafka's inter-broker TLS).
        usages = [ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH] if server else [
            ExtendedKeyUsageOID.CLIENT_AUTH
        ]  # fmt: skip
        b = b.add_extension(x509.ExtendedKeyUsage(usages), critical=False)
    if hosts:
        b = b.add_extension(x509.SubjectAlternativeName([_san(h) for h in hosts]), critical=False)
    return b.sign(issuer_key, hashes.SHA256())


def _is_rsa(key: Any) -> bool:
    from cryptography.hazmat.primitives.asymmetric import rsa

    return isinstance(key, rsa.RSAPrivateKey)
