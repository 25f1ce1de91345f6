"""TLS and SASL set-ups shared by the security suites: certificates, and logbroker and Apache Kafka started
with the same listeners, the same users and the same certificates (tests/test_security_clients.py,
tests/test_sasl_wire.py)."""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from logbroker_devtools.testing.net import LOOPBACK, free_ports
from support import missing_tool

KEY_PASSWORD = "key-secret"
# PLAIN users (a users file on logbroker, the JAAS user_NAME entries on Kafka); SCRAM users get the same
# passwords through AlterUserScramCredentials on both.
USERS = {"alice": "alice-secret", "bob": "bob-secret", "admin": "admin-secret"}
MECHANISMS = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
# Listener name -> security protocol, PLAINTEXT first (its port is the one the launchers wait on).
LISTENERS = {
    "PLAINTEXT": "PLAINTEXT",
    "SSL": "SSL",  # ssl.client.auth=requested: with or without a client certificate
    "MTLS": "SSL",  # ssl.client.auth=required
    "SASL_PLAINTEXT": "SASL_PLAINTEXT",
    "SASL_SSL": "SASL_SSL",
}


# ---------------------------------------------------------------------------------------- certificates


def make_certs(d: Path) -> dict[str, Path]:
    """A CA; a server certificate for 127.0.0.1/localhost (Kafka's PEM keystore: key, then chain); client
    certificates CN=client (key encrypted with KEY_PASSWORD) and CN=admin; and a client certificate from a
    CA nobody trusts. Each client also as one PEM keystore (encrypted key, then certificate) for Java. The
    product's `logbroker.certificates` makes them: one encoding every client and both brokers read."""
    from logbroker.certificates import cert_pem, issue, key_pem, new_key

    out: dict[str, Path] = {}

    def write(label: str, data: bytes) -> Path:
        out[label] = d / f"{label}.pem"
        out[label].write_bytes(data)
        return out[label]

    cas = {}
    for ca_label, cn in (("ca", "logbroker-test-ca"), ("rogue_ca", "rogue-ca")):
        key = new_key("ec")
        cas[ca_label] = (issue(cn, key, None, 2, server=False), key)
        write(ca_label, cert_pem(cas[ca_label][0]))
    for label, cn, ca_label, password in (
        ("server", "server", "ca", None),
        ("client", "client", "ca", KEY_PASSWORD),
        ("admin", "admin", "ca", KEY_PASSWORD),
        ("rogue", "client", "rogue_ca", KEY_PASSWORD),
    ):
        key = new_key("ec")
        server = label == "server"
        hosts = ("localhost", LOOPBACK) if server else ()
        c = cert_pem(issue(cn, key, cas[ca_label], 2, hosts=hosts, server=server))
        pem = key_pem(key, password)
        write(f"{label}_cert", c)
        write(f"{label}_key", pem)
        write(f"{label}_keystore", pem + c)
    return out


# ---------------------------------------------------------------------------------------------- brokers


@dataclass
class SecureBroker:
    """One broker of a pair: its name ("logbroker" or "kafka"), each listener's bootstrap, the certificates,
    and (logbroker) the process, whose log tests read."""

    name: str
    bootstraps: dict[str, str]
    certs: dict[str, Path]
    process: Any = None  # BrokerProcess (logbroker) or KafkaPeer
    protocols: dict[str, str] = field(default_factory=lambda: dict(LISTENERS))  # listener -> security protocol

    def bootstrap(self, listener: str) -> str:
        return self.bootstraps[listener]

    def port(self, listener: str) -> int:
        return int(self.bootstraps[listener].rsplit(":", 1)[1])


def _toml(value: Any) -> str:
    return (
        json.dumps(value) if isinstance(value, str) else str(value).lower() if isinstance(value, bool) else str(value)
    )


@contextlib.contextmanager
def logbroker_secure(
    tmp: Path,
    certs: dict[str, Path],
    listeners: Mapping[str, str] = LISTENERS,
    listener_overrides: Mapping[str, Mapping[str, Any]] | None = None,
    settings: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    attempt: int = 0,
) -> Iterator[SecureBroker]:
    """`logbroker serve --config` with these listeners (a TOML file in Kafka's setting names); the SSL
    listener asks for a client certificate, MTLS needs one."""
    from logbroker_devtools.testing.process import BrokerProcess

    ports = dict(zip(listeners, free_ports(len(listeners)), strict=True))
    users_file = tmp / "plain-users.txt"
    users_file.write_text("".join(f"{u}={p}\n" for u, p in USERS.items()))
    overrides: dict[str, dict[str, Any]] = {"ssl": {"ssl_client_auth": "requested"}}
    if "MTLS" in listeners:
        overrides["mtls"] = {"ssl_client_auth": "required"}
    for k, v in (listener_overrides or {}).items():
        overrides.setdefault(k.lower(), {}).update(v)
    top = {
        "listeners": ",".join(f"{n}://{LOOPBACK}:{p}" for n, p in ports.items()),
        "listener_security_protocol_map": ",".join(f"{n}:{p}" for n, p in listeners.items()),
        "ssl_keystore_location": str(certs["server_keystore"]),
        "ssl_truststore_location": str(certs["ca"]),
        "sasl_enabled_mechanisms": ",".join(MECHANISMS),
        "sasl_plain_users_file": str(users_file),
        "num_partitions": 1,
        **(settings or {}),
    }
    lines = [f"{k} = {_toml(v)}" for k, v in top.items()]
    for name, values in overrides.items():
        lines.append(f"\n[listener_configs.{name}]")
        lines += [f"{k} = {_toml(v)}" for k, v in values.items()]
    config = tmp / "logbroker.toml"
    config.write_text("\n".join(lines) + "\n")
    proc = BrokerProcess(
        tmp / "data", port=ports["PLAINTEXT"], extra_args=["--config", str(config)], env=dict(env or {})
    )
    try:
        proc.start()
    except RuntimeError as exc:
        if "address already in use" not in str(exc) or attempt >= 2:
            raise
        # A free port taken between choosing and binding it (ports are chosen racily): choose again.
        proc.cleanup()
        with logbroker_secure(tmp, certs, listeners, listener_overrides, settings, env, attempt + 1) as broker:
            yield broker
        return
    try:
        bootstraps = {n: f"{LOOPBACK}:{p}" for n, p in ports.items()}
        broker = SecureBroker("logbroker", bootstraps, certs, proc, dict(listeners))
        add_scram_users(broker, authorizer=bool((settings or {}).get("authorizer_class_name")))
        yield broker
    finally:
        rc = proc.stop()
        proc.cleanup()
        assert rc == 0, f"logbroker exited with {rc}"


@contextlib.contextmanager
def kafka_secure(
    certs: dict[str, Path],
    listeners: Mapping[str, str] = LISTENERS,
    listener_overrides: Mapping[str, Mapping[str, Any]] | None = None,
    properties: Mapping[str, Any] | None = None,
    authorizer: bool = False,
    super_users: tuple[str, ...] = (),
) -> Iterator[SecureBroker]:
    """Apache Kafka 4 with the same listeners, certificates and users (JAAS PLAIN users; SCRAM users added
    with AlterUserScramCredentials, as on logbroker)."""
    from logbroker_devtools.testing import peers

    if not peers.java_available():
        missing_tool("java not found (Apache Kafka needs a JVM)")
    if not peers.jars_available("kafka"):
        missing_tool(f"no Kafka jars in {peers.default_jar_dir('kafka')} (run .ci/fetch-jars)")
    plain = (
        "org.apache.kafka.common.security.plain.PlainLoginModule required "
        + " ".join(f'user_{u}="{p}"' for u, p in USERS.items())
        + ";"
    )
    scram = "org.apache.kafka.common.security.scram.ScramLoginModule required;"
    props: dict[str, Any] = {
        "group.initial.rebalance.delay.ms": 0,
        "sasl.enabled.mechanisms": ",".join(MECHANISMS),
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs["server_keystore"]),
        "ssl.truststore.type": "PEM",
        "ssl.truststore.location": str(certs["ca"]),
    }
    extra = {n: p for n, p in listeners.items() if n != "PLAINTEXT"}
    for name, protocol in extra.items():
        lname = f"listener.name.{name.lower()}"
        if protocol.startswith("SASL"):
            props[f"{lname}.plain.sasl.jaas.config"] = plain
            props[f"{lname}.scram-sha-256.sasl.jaas.config"] = scram
            props[f"{lname}.scram-sha-512.sasl.jaas.config"] = scram
    if "SSL" in listeners:
        props["listener.name.ssl.ssl.client.auth"] = "requested"
    if "MTLS" in listeners:
        props["listener.name.mtls.ssl.client.auth"] = "required"
    for name, values in (listener_overrides or {}).items():
        for k, v in values.items():
            props[f"listener.name.{name.lower()}.{k.replace('_', '.')}"] = v
    props.update(properties or {})
    for attempt in range(3):
        peer = peers.KafkaPeer(listeners=extra, server_properties=props, authorizer=authorizer, super_users=super_users)
        try:
            peer.start()
            break
        except peers.PeerError as exc:  # a port taken between choosing and binding it: choose again
            if ("BindException" not in str(exc) and "Address already in use" not in str(exc)) or attempt == 2:
                raise
    with peer:
        bootstraps = {"PLAINTEXT": peer.bootstrap} | {n: peer.listener_bootstrap(n) for n in extra}
        broker = SecureBroker("kafka", bootstraps, certs, peer, dict(listeners))
        add_scram_users(broker, authorizer=authorizer)
        yield broker


def add_scram_users(broker: SecureBroker, timeout: float = 30.0, authorizer: bool = False) -> None:
    """Every USERS entry as a SCRAM-SHA-256 and -512 user (AlterUserScramCredentials over PLAINTEXT, or with
    an authorizer as the PLAIN super user admin), then wait until a SCRAM login works (Kafka applies the
    change through its metadata log)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    if authorizer:
        admin = AdminClient(client_config("confluent", broker, "SASL_PLAINTEXT", "PLAIN", user="admin"))
    else:
        admin = AdminClient({"bootstrap.servers": broker.bootstrap("PLAINTEXT")})
    for m in MECHANISMS[1:]:  # one mechanism per request: a user may appear once in each (Kafka's rule)
        info = ScramCredentialInfo(getattr(ScramMechanism, m.replace("-", "_")), 4096)
        upserts = [UserScramCredentialUpsertion(user, info, password.encode()) for user, password in USERS.items()]
        for fut in admin.alter_user_scram_credentials(upserts).values():
            fut.result(timeout)
    if not any(p.startswith("SASL") for p in broker.protocols.values()):
        return
    sasl = next(n for n, p in broker.protocols.items() if p.startswith("SASL"))
    deadline = time.monotonic() + timeout
    for m in MECHANISMS[1:]:
        while True:
            probe = AdminClient(client_config("confluent", broker, sasl, m) | {"socket.timeout.ms": 5000})
            try:
                probe.list_topics(timeout=5)
                break
            except KafkaException:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.3)


# ----------------------------------------------------------------------------------- client settings


def client_config(
    client: str,
    broker: SecureBroker,
    listener: str,
    mechanism: str | None = None,
    user: str = "alice",
    password: str | None = None,
    cert: str | None = None,
) -> dict[str, Any]:
    """The settings of `client` ("confluent" also for kcat, "kafka-python", "aiokafka", "java") for one
    listener: the CA, a client certificate (`cert`: "client", "admin", "rogue"), SASL user and password."""
    protocol = broker.protocols.get(listener, listener)
    certs = broker.certs
    password = USERS.get(user, "nobody-secret") if password is None else password
    tls, sasl = "SSL" in protocol, protocol.startswith("SASL")
    if client == "confluent":
        conf: dict[str, Any] = {"bootstrap.servers": broker.bootstrap(listener), "security.protocol": protocol.lower()}
        if tls:
            conf["ssl.ca.location"] = str(certs["ca"])
            if cert:
                conf |= {
                    "ssl.certificate.location": str(certs[f"{cert}_cert"]),
                    "ssl.key.location": str(certs[f"{cert}_key"]),
                    "ssl.key.password": KEY_PASSWORD,
                }
        if sasl:
            conf |= {"sasl.mechanism": mechanism, "sasl.username": user, "sasl.password": password}
        return conf
    if client in ("kafka-python", "aiokafka"):
        conf = {"bootstrap_servers": broker.bootstrap(listener), "security_protocol": protocol}
        if tls:
            if client == "aiokafka":
                from aiokafka.helpers import create_ssl_context

                files = {"certfile": str(certs[f"{cert}_cert"]), "keyfile": str(certs[f"{cert}_key"]),
                         "password": KEY_PASSWORD} if cert else {}  # fmt: skip
                conf["ssl_context"] = create_ssl_context(cafile=str(certs["ca"]), **files)
            else:
                conf["ssl_cafile"] = str(certs["ca"])
                if cert:
                    conf |= {"ssl_certfile": str(certs[f"{cert}_cert"]), "ssl_keyfile": str(certs[f"{cert}_key"]),
                             "ssl_password": KEY_PASSWORD}  # fmt: skip
        if sasl:
            conf |= {"sasl_mechanism": mechanism, "sasl_plain_username": user, "sasl_plain_password": password}
        return conf
    if client == "java":
        conf = {"security.protocol": protocol}
        if tls:
            conf |= {"ssl.truststore.type": "PEM", "ssl.truststore.location": str(certs["ca"])}
            if cert:
                keystore = certs[f"{cert}_keystore"]
                conf |= {"ssl.keystore.type": "PEM", "ssl.keystore.location": str(keystore)}
                if b"ENCRYPTED" in keystore.read_bytes():
                    conf["ssl.key.password"] = KEY_PASSWORD
        if sasl:
            module = "plain.PlainLoginModule" if mechanism == "PLAIN" else "scram.ScramLoginModule"
            conf |= {
                "sasl.mechanism": mechanism,
                "sasl.jaas.config": f"org.apache.kafka.common.security.{module} required "
                f'username="{user}" password="{password}";',
            }
        return conf
    raise ValueError(f"unknown client {client}")
