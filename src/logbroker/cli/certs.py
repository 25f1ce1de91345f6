"""`logbroker certs`: a development CA, a server certificate and client certificates as PEM files that both
logbroker and Apache Kafka take (``ssl.keystore.type=PEM``: a PKCS#8 private key followed by its certificate
chain in one file; ``ssl.truststore.type=PEM``: the CA certificate), plus the separate certificate and key
files librdkafka and Python's ``ssl`` want, and example broker and client configurations.

Private keys (and files holding a password) are written with mode 0600, each file atomically. Nothing is
overwritten without ``--force``: a CA replaced by mistake would orphan every certificate it signed.
"""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from logbroker.certificates import cert_pem, issue, key_pem, new_key
from logbroker.config import STANDARD_AUTHORIZER

DEFAULT_HOSTS = ("127.0.0.1", "localhost")
SSL_PORT, SASL_SSL_PORT = 9093, 9094
CA_DAYS = 3650
# Kafka's DEFAULT principal of a certificate is its whole subject ("CN=alice"); this rule keeps the CN only,
# so a client certificate made here is User:<name>, the same principal a SASL login as <name> gets.
PRINCIPAL_RULES = "RULE:^CN=([^,]+)$/$1/,DEFAULT"


@dataclass(frozen=True)
class Files:
    """Where `logbroker certs` writes in DIR (the names the example configurations refer to)."""

    dir: Path

    @property
    def ca_cert(self) -> Path:
        return self.dir / "ca.crt"

    @property
    def ca_key(self) -> Path:
        return self.dir / "ca.key"

    def cert(self, who: str) -> Path:
        """Certificate chain (leaf, then the CA): librdkafka's ssl.certificate.location."""
        return self.dir / f"{who}.crt"

    def key(self, who: str) -> Path:
        """PKCS#8 private key alone: librdkafka's ssl.key.location."""
        return self.dir / f"{who}.key"

    def keystore(self, who: str) -> Path:
        """Key then chain in one file: Kafka's and logbroker's ssl.keystore.location (type PEM)."""
        return self.dir / f"{who}-keystore.pem"

    @property
    def broker_config(self) -> Path:
        return self.dir / "broker.toml"

    @property
    def plain_users(self) -> Path:
        return self.dir / "plain-users.txt"

    @property
    def client_properties(self) -> Path:
        return self.dir / "client.properties"

    def client_tls_properties(self, name: str) -> Path:
        return self.dir / f"client-{name}.properties"


def _write(path: Path, data: bytes, secret: bool) -> None:
    """Atomically, and 0600 from the start for secrets (never readable by others, not even briefly)."""
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600 if secret else 0o644)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.chmod(tmp, 0o600 if secret else 0o644)  # the umask may have taken bits away from 0644
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _refuse_existing(paths: list[Path], force: bool, what: str) -> None:
    existing = [p for p in paths if p.exists()]
    if existing and not force:
        names = ", ".join(p.name for p in existing)
        raise click.ClickException(f"{what}: {names} already exist in {existing[0].parent}; use --force to replace")


# ---------------------------------------------------------------------------------- certificates


def _load_ca(files: Files) -> tuple[Any, Any]:
    from cryptography import x509
    from cryptography.hazmat.primitives import serialization

    if not files.ca_cert.exists() or not files.ca_key.exists():
        raise click.ClickException(f"{files.dir} holds no CA (ca.crt, ca.key): run `logbroker certs init {files.dir}`")
    cert = x509.load_pem_x509_certificate(files.ca_cert.read_bytes())
    key = serialization.load_pem_private_key(files.ca_key.read_bytes(), password=None)
    return cert, key


def _leaf(
    files: Files, who: str, subject: str, ca: tuple[Any, Any], days: int, key_type: str, password: str | None,
    hosts: tuple[str, ...] = (), server: bool = False,
) -> None:  # fmt: skip
    """Key, chain and keystore of one leaf certificate."""
    key = new_key(key_type)
    cert = issue(subject, key, ca, days, hosts=hosts, server=server)
    chain = cert_pem(cert) + cert_pem(ca[0])
    pem = key_pem(key, password)
    _write(files.key(who), pem, secret=True)
    _write(files.cert(who), chain, secret=False)
    _write(files.keystore(who), pem + chain, secret=True)


def _leaf_paths(files: Files, who: str) -> list[Path]:
    return [files.key(who), files.cert(who), files.keystore(who)]


def _client_name(name: str) -> str:
    if not name or any(c in name for c in ',=+"\\<>;#/') or name.strip() != name:
        raise click.BadParameter(f"{name!r}: a client name is a plain user name (no , = + \" \\ < > ; # / or spaces "
                                 "at the ends)")  # fmt: skip
    return name


# ---------------------------------------------------------------------------------- example configs


def _toml_str(value: str) -> str:
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _props_escape(value: str) -> str:
    """A value for a Java properties file (backslashes, and what a reader would take as a separator)."""
    out = value.replace("\\", "\\\\")
    return out.replace("\n", "\\n").replace("\r", "\\r")


def _broker_toml(files: Files, host: str, key_password: str | None, admin: str) -> str:
    lines = [
        "# logbroker serve --config broker.toml: an SSL and a SASL_SSL listener (made by `logbroker certs init`).",
        "# SSL (mutual TLS): clients must show a certificate of this CA; its CN is their principal, User:<CN>.",
        "# SASL_SSL: clients log in with PLAIN (the users in plain-users.txt) or SCRAM (`logbroker users add`).",
        f"# ACLs are enforced: User:{admin} may do anything; grant others with `logbroker acls add`.",
        f'listeners = "SSL://{host}:{SSL_PORT},SASL_SSL://{host}:{SASL_SSL_PORT}"',
        f"ssl_keystore_location = {_toml_str(str(files.keystore('server')))}",
        'ssl_keystore_type = "PEM"',
        f"ssl_truststore_location = {_toml_str(str(files.ca_cert))}",
        'ssl_truststore_type = "PEM"',
        'ssl_client_auth = "required"',
        f"ssl_principal_mapping_rules = {_toml_str(PRINCIPAL_RULES)}",
        'sasl_enabled_mechanisms = "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512"',
        f"sasl_plain_users_file = {_toml_str(str(files.plain_users))}",
        f'authorizer_class_name = "{STANDARD_AUTHORIZER}"',
        f"super_users = {_toml_str('User:' + admin)}",
    ]
    if key_password:
        lines.append(f"ssl_key_password = {_toml_str(key_password)}")
    lines += [
        "",
        "# SASL_SSL clients prove who they are with their login: no client certificate asked for there.",
        "[listener_configs.SASL_SSL]",
        'ssl_client_auth = "none"',
    ]
    return "\n".join(lines) + "\n"


def _client_properties(files: Files, user: str, password: str) -> str:
    from logbroker._kafka.settings import jaas_config

    return "\n".join([
        f"# --bootstrap <host>:{SASL_SSL_PORT} --command-config client.properties (logbroker's and Kafka's tools)",
        "security.protocol=SASL_SSL",
        "sasl.mechanism=PLAIN",
        f"sasl.jaas.config={_props_escape(jaas_config('PLAIN', user, password))}",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={_props_escape(str(files.ca_cert))}",
        "",
    ])  # fmt: skip


def _client_tls_properties(files: Files, name: str, key_password: str | None) -> str:
    lines = [
        f"# Mutual TLS as User:{name}: --bootstrap <host>:{SSL_PORT} --command-config client-{name}.properties",
        "security.protocol=SSL",
        "ssl.truststore.type=PEM",
        f"ssl.truststore.location={_props_escape(str(files.ca_cert))}",
        "ssl.keystore.type=PEM",
        f"ssl.keystore.location={_props_escape(str(files.keystore(name)))}",
    ]
    if key_password:
        lines.append(f"ssl.key.password={_props_escape(key_password)}")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------- commands


def _ascii_password(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None and not value.isascii():  # Java's PBE keys take ASCII only ("Password is not ASCII")
        raise click.BadParameter("Java (Kafka's PEM keystores) takes ASCII key passwords only")
    return value


_KEY_PASSWORD = click.option(
    "--key-password",
    envvar="LOGBROKER_CERTS_KEY_PASSWORD",
    show_envvar=True,
    callback=_ascii_password,
    help="Encrypt the new private keys (PKCS#8) with this password (ssl.key.password). The CA key stays plain.",
)
_DAYS = click.option("--days", default=825, show_default=True, type=click.IntRange(1, CA_DAYS), help="Validity.")
_KEY_TYPE = click.option("--key-type", type=click.Choice(["ec", "rsa"]), default="ec", show_default=True,
                         help="EC P-256 or RSA 2048.")  # fmt: skip
_FORCE = click.option("--force", is_flag=True, help="Replace files that already exist.")


@click.group()
def certs() -> None:
    """Development TLS: a CA, server and client certificates (PEM), example broker and client configs."""


@certs.command("init")
@click.argument("directory", type=click.Path(file_okay=False, path_type=Path))
@click.option(
    "--host", "hosts", multiple=True, help="Server name or address (repeatable; default 127.0.0.1, localhost)."
)
@click.option("--client", "clients", multiple=True, help="Also make a client certificate CN=NAME (repeatable).")
@click.option(
    "--sasl-user", default="admin", show_default=True, help="PLAIN user of the example configs, and the super user."
)
@_KEY_PASSWORD
@_DAYS
@_KEY_TYPE
@_FORCE
def certs_init(
    directory: Path, hosts: tuple[str, ...], clients: tuple[str, ...], sasl_user: str, key_password: str | None,
    days: int, key_type: str, force: bool,
) -> None:  # fmt: skip
    """Make a CA, a server certificate for the hosts and client certificates in DIRECTORY, with broker.toml
    (SSL and SASL_SSL listeners), plain-users.txt and client.properties ready to use."""
    hosts = tuple(dict.fromkeys(hosts or DEFAULT_HOSTS))
    names = [_client_name(n) for n in dict.fromkeys(clients)]
    if clash := {"ca", "server"} & set(names):
        raise click.BadParameter(
            f"{sorted(clash)[0]!r} would overwrite the CA's or server's files", param_hint="--client"
        )
    files = Files(directory.resolve())
    planned = [files.ca_cert, files.ca_key, *_leaf_paths(files, "server"), files.broker_config, files.plain_users,
               files.client_properties]  # fmt: skip
    for n in names:
        planned += [*_leaf_paths(files, n), files.client_tls_properties(n)]
    _refuse_existing(planned, force, "certs init")
    files.dir.mkdir(parents=True, exist_ok=True)
    ca_key = new_key(key_type)
    ca_cert = issue(f"logbroker development CA {secrets.token_hex(3)}", ca_key, None, CA_DAYS, server=False)
    _write(files.ca_key, key_pem(ca_key, None), secret=True)
    _write(files.ca_cert, cert_pem(ca_cert), secret=False)
    ca = (ca_cert, ca_key)
    _leaf(files, "server", hosts[0], ca, days, key_type, key_password, hosts=hosts, server=True)
    password = secrets.token_urlsafe(18)
    _write(files.plain_users, f"{sasl_user}={password}\n".encode(), secret=True)
    _write(
        files.broker_config,
        _broker_toml(files, _listen_host(hosts), key_password, sasl_user).encode(),
        secret=bool(key_password),
    )
    _write(files.client_properties, _client_properties(files, sasl_user, password).encode(), secret=True)
    for n in names:
        _leaf(files, n, n, ca, days, key_type, key_password)
        _write(files.client_tls_properties(n), _client_tls_properties(files, n, key_password).encode(),
               secret=bool(key_password))  # fmt: skip
    click.echo(f"CA, server certificate for {', '.join(hosts)}" + (f", clients {', '.join(names)}" if names else ""))
    click.echo(f"  truststore (PEM):        {files.ca_cert}")
    click.echo(f"  server keystore (PEM):   {files.keystore('server')}")
    click.echo(f"  broker config:           {files.broker_config}  (logbroker serve --config ...)")
    click.echo(f"  client config:           {files.client_properties}  (SASL_SSL as {sasl_user}, port {SASL_SSL_PORT})")
    for n in names:
        click.echo(f"  client {n}: {files.keystore(n)}, {files.client_tls_properties(n)}  (SSL, port {SSL_PORT})")
    click.echo(f"ACLs are enforced: User:{sasl_user} is the super user; grant others with `logbroker acls add`"
               + (f" (User:{names[0]} may do nothing until then)" if names else ""))  # fmt: skip


def _listen_host(hosts: tuple[str, ...]) -> str:
    """The example listeners' host: the first address given (a name is looked up by the broker)."""
    first = hosts[0]
    return f"[{first}]" if ":" in first else first


@certs.command("client")
@click.argument("directory", type=click.Path(file_okay=False, exists=True, path_type=Path))
@click.argument("name")
@_KEY_PASSWORD
@_DAYS
@_KEY_TYPE
@_FORCE
def certs_client(directory: Path, name: str, key_password: str | None, days: int, key_type: str, force: bool) -> None:
    """Make a client certificate CN=NAME signed by DIRECTORY's CA (principal User:NAME with broker.toml's
    mapping rule), and client-NAME.properties for mutual TLS."""
    files = Files(directory.resolve())
    name = _client_name(name)
    if name in ("ca", "server"):
        raise click.BadParameter(f"{name!r} would overwrite the {name}'s files", param_hint="NAME")
    _refuse_existing([*_leaf_paths(files, name), files.client_tls_properties(name)], force, f"certs client {name}")
    ca = _load_ca(files)
    _leaf(files, name, name, ca, days, key_type, key_password)
    _write(files.client_tls_properties(name), _client_tls_properties(files, name, key_password).encode(),
           secret=bool(key_password))  # fmt: skip
    click.echo(f"client {name}: {files.keystore(name)} (key {files.key(name)}, chain {files.cert(name)}), "
               f"{files.client_tls_properties(name)}")  # fmt: skip
