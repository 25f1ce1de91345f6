"""The price of security: 1 KB produce and consume throughput over PLAINTEXT, SSL and SASL_SSL (SCRAM-SHA-256),
logbroker against Apache Kafka set up the same way (one broker each, the three listeners side by side, the
same certificates and SCRAM user). Not for CI: `python benchmarks/security_bench.py`.

Each broker gets a throw-away CA and server certificate (no client certificates: TLS cost, not mTLS); clients
are the bench's librdkafka workloads with the listener's security settings.
"""

from __future__ import annotations

import contextlib
import json
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from logbroker_devtools.bench import clients
from logbroker_devtools.bench.workloads import consume_throughput, produce_throughput
from logbroker_devtools.testing import peers
from logbroker_devtools.testing.net import LOOPBACK, free_ports
from logbroker_devtools.testing.process import BrokerProcess

PROTOCOLS = ("PLAINTEXT", "SSL", "SASL_SSL")
USER, PASSWORD, MECHANISM = "bench", "bench-secret", "SCRAM-SHA-256"


def make_certs(d: Path) -> dict[str, Path]:
    """A CA and a server certificate for 127.0.0.1 (Kafka's PEM keystore: key, then certificate)."""
    from logbroker.certificates import cert_pem, issue, key_pem, new_key

    ca_key, key = new_key("ec"), new_key("ec")
    ca = issue("bench-ca", ca_key, None, 2, server=False)
    server = issue("server", key, (ca, ca_key), 2, hosts=("localhost", LOOPBACK), server=True)
    out = {"ca": d / "ca.pem", "keystore": d / "server-keystore.pem"}
    out["ca"].write_bytes(cert_pem(ca))
    out["keystore"].write_bytes(key_pem(key, None) + cert_pem(server))
    return out


def client_security(protocol: str, certs: dict[str, Path]) -> dict[str, Any]:
    conf: dict[str, Any] = {"security.protocol": protocol.lower()}
    if "SSL" in protocol:
        conf["ssl.ca.location"] = str(certs["ca"])
    if protocol.startswith("SASL"):
        conf |= {"sasl.mechanism": MECHANISM, "sasl.username": USER, "sasl.password": PASSWORD}
    return conf


@contextlib.contextmanager
def logbroker_broker(d: Path, certs: dict[str, Path], fsync: str) -> Iterator[dict[str, str]]:
    ports = dict(zip(PROTOCOLS, free_ports(len(PROTOCOLS)), strict=True))
    config = d / "logbroker.toml"
    config.write_text(
        f'listeners = "{",".join(f"{p}://{LOOPBACK}:{port}" for p, port in ports.items())}"\n'
        f'ssl_keystore_location = "{certs["keystore"]}"\n'
        f'sasl_enabled_mechanisms = "{MECHANISM}"\n'
        f'fsync = "{fsync}"\n'
    )
    broker = BrokerProcess(d / "data", port=ports["PLAINTEXT"], extra_args=["--config", str(config)])
    broker.start()
    try:
        yield {p: f"{LOOPBACK}:{port}" for p, port in ports.items()}
    finally:
        broker.stop()
        broker.cleanup()


@contextlib.contextmanager
def kafka_broker(d: Path, certs: dict[str, Path], fsync: str) -> Iterator[dict[str, str]]:
    props = {
        "sasl.enabled.mechanisms": MECHANISM,
        "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config":
            "org.apache.kafka.common.security.scram.ScramLoginModule required;",
        "ssl.keystore.type": "PEM",
        "ssl.keystore.location": str(certs["keystore"]),
    }  # fmt: skip
    peer = peers.KafkaPeer(listeners={"SSL": "SSL", "SASL_SSL": "SASL_SSL"}, server_properties=props)
    with peer:
        yield {"PLAINTEXT": peer.bootstrap, "SSL": peer.listener_bootstrap("SSL"),
               "SASL_SSL": peer.listener_bootstrap("SASL_SSL")}  # fmt: skip


def add_user(bootstraps: dict[str, str], certs: dict[str, Path], timeout: float = 30.0) -> None:
    """The SCRAM user (AlterUserScramCredentials over PLAINTEXT), waited for until it can log in."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, ScramCredentialInfo, ScramMechanism, UserScramCredentialUpsertion

    admin = AdminClient({"bootstrap.servers": bootstraps["PLAINTEXT"]})
    info = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_256, 4096)
    for fut in admin.alter_user_scram_credentials(
        [UserScramCredentialUpsertion(USER, info, PASSWORD.encode())]
    ).values():
        fut.result(timeout)
    deadline = time.monotonic() + timeout
    conf = {"bootstrap.servers": bootstraps["SASL_SSL"], **client_security("SASL_SSL", certs)}
    while True:
        try:
            AdminClient(conf).list_topics(timeout=5)
            return
        except KafkaException:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.3)


def run_security_bench(records: int = 200_000, size: int = 1024, out_dir: str | Path = "bench-results",
                       fsync: str = "never", targets: tuple[str, ...] = ("logbroker", "kafka"),
                       echo: Callable[[str], None] = print) -> dict[str, Any]:  # fmt: skip
    """Produce then consume `records` records of `size` bytes per target and protocol; the results, also
    written to <out_dir>/security.json."""
    results: dict[str, Any] = {"records": records, "size": size, "fsync": fsync, "targets": {}}
    starters = {"logbroker": logbroker_broker, "kafka": kafka_broker}
    with tempfile.TemporaryDirectory(prefix="security-bench-") as tmp:
        certs = make_certs(Path(tmp))
        for target in targets:
            d = Path(tmp) / target
            d.mkdir()
            per: dict[str, Any] = {}
            with starters[target](d, certs, fsync) as bootstraps:
                add_user(bootstraps, certs)
                for protocol in PROTOCOLS:
                    bootstrap = bootstraps[protocol]
                    clients._SECURITY[bootstrap] = client_security(protocol, certs)
                    try:
                        topic = f"sec-bench-{uuid.uuid4().hex[:8]}"
                        clients.create_topic(bootstrap, topic)
                        produced = produce_throughput(bootstrap, topic, records, size, lambda n: None)
                        consumed = consume_throughput(bootstrap, topic, records, size, lambda n: None)
                    finally:
                        clients._SECURITY.pop(bootstrap, None)
                    per[protocol] = {"produce": produced, "consume": consumed}
                    echo(f"{target:9} {protocol:10} produce {produced['MB_per_s']:7.1f} MB/s"
                         f"   consume {consumed['MB_per_s']:7.1f} MB/s")  # fmt: skip
            results["targets"][target] = per
    if {"logbroker", "kafka"} <= set(results["targets"]):
        lb, k = results["targets"]["logbroker"], results["targets"]["kafka"]
        results["ratios"] = {
            p: {w: lb[p][w]["MB_per_s"] / k[p][w]["MB_per_s"] for w in ("produce", "consume")} for p in PROTOCOLS
        }
        for p, r in results["ratios"].items():
            echo(f"logbroker/kafka {p:10} produce {r['produce']:.2f}   consume {r['consume']:.2f}")
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "security.json").write_text(json.dumps(results, indent=2, default=str))
    return results
