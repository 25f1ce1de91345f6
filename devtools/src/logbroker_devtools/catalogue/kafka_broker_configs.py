"""Measure the broker configs a Kafka 4.4 node lists (DescribeConfigs of its BROKER resource): every name
with its config type, its default (the DEFAULT_CONFIG synonym's value; None when Kafka has no default) and
whether Kafka lets it change while running (read_only false). Written as the JSON table
`src/logbroker/broker/kafka_broker_configs.json`, which logbroker lists its broker configs from; run again
when the Kafka peer is upgraded:

    python -m logbroker_devtools.catalogue.kafka_broker_configs [--out PATH]

The peer's own server.properties do not leak in: a value set there is read from its DEFAULT synonym.
Documentation is not taken (Kafka's text is its own).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from logbroker.protocol import ApiKey, api

from ..client.connection import Connection, parse_bootstrap
from ..testing.peers import KafkaPeer

OUT = Path(__file__).resolve().parents[4] / "src" / "logbroker" / "broker" / "kafka_broker_configs.json"
DEFAULT = 5


def measure(bootstrap: str) -> dict[str, dict[str, object]]:
    DC = api(ApiKey.DescribeConfigs).request
    res = DC.DescribeConfigsResource(resource_type=4, resource_name="1", configuration_keys=None)
    with Connection(*parse_bootstrap(bootstrap)) as c:
        [r] = c.do(DC(resources=[res], include_synonyms=True, include_documentation=False), 4).results
    out: dict[str, dict[str, object]] = {}
    for e in sorted(r.configs, key=lambda e: e.name):
        default = next((s.value for s in e.synonyms if s.source == DEFAULT and s.name == e.name), None)
        out[e.name] = {"type": e.config_type, "default": default, "dynamic": not e.read_only,
                       "sensitive": e.is_sensitive}  # fmt: skip
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args()
    with KafkaPeer() as kafka:
        table = measure(kafka.bootstrap)
    args.out.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    print(f"{len(table)} broker configs written to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
