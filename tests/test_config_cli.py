"""`logbroker config list` names every broker setting as each source spells it (Kafka property, LOGBROKER_*
variable), and `logbroker serve` warns about LOGBROKER_* variables nothing reads."""

from __future__ import annotations

import json
import re
from pathlib import Path

from click.testing import CliRunner

from logbroker import kafka_properties
from logbroker.cli import main
from logbroker.cli.config_cmd import cli_envvars
from logbroker.config import BrokerSettings, unknown_environment
from logbroker_devtools.testing.process import BrokerProcess
from support import eventually

ROOT = Path(__file__).resolve().parent.parent
# Kafka names load_properties handles by a rule of its own yet that set no setting (warned about as ignored).
RULED_WITHOUT_SETTING = {"controller.listener.names"}


def listed() -> list[dict]:
    result = CliRunner().invoke(main, ["config", "list", "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.output)


def test_json_covers_every_setting_with_env_type_default_description() -> None:
    rows = listed()
    assert [r["setting"] for r in rows] == list(BrokerSettings.model_fields)
    defaults = BrokerSettings().model_dump(mode="json")
    for r in rows:
        name = r["setting"]
        assert r["env"] == f"LOGBROKER_{name.upper()}"
        assert r["description"], f"{name} has no description"
        assert r["type"], name
        assert r["default"] == defaults[name], name
        assert r["property"] == f"logbroker.{name.replace('_', '.')}"
    by_name = {r["setting"]: r for r in rows}
    assert by_name["fsync"]["type"] == "always|interval|never"
    assert by_name["ssl_keystore_location"]["type"] == "path (optional)"
    assert by_name["log_format"]["default"] == "text"


def test_kafka_names_match_kafka_properties() -> None:
    rows = listed()
    names = {r["setting"]: set(r["kafka"]) for r in rows}
    for prop, (setting, _) in kafka_properties.KAFKA_NAMES.items():
        assert prop in names[setting], f"{prop} sets {setting} but config list does not say so"
    shown = {p for ps in names.values() for p in ps}
    for prop in kafka_properties._RULED - RULED_WITHOUT_SETTING:
        assert prop in shown, f"{prop} (a ruled name) is not listed"
    for setting, props in names.items():
        for prop in props:
            known = prop in kafka_properties._RULED or prop.startswith("listener.name.")
            assert known or kafka_properties.KAFKA_NAMES[prop][0] == setting, (setting, prop)
    # What the list says, a server.properties file does: each name it gives reaches the setting it names.
    samples = {"log.retention.minutes": ("retention_ms", "2", 120_000),
               "log.roll.hours": ("segment_ms", "1", 3_600_000), "broker.id": ("node_id", "7", 7),
               "log.dirs": ("data_dir", "/srv/lb", "/srv/lb"),
               "message.max.bytes": ("message_max_bytes", "2000", 2000)}  # fmt: skip
    for prop, (setting, raw, want) in samples.items():
        assert prop in names[setting]
        loaded = kafka_properties.load_properties(f"{prop}={raw}\n", "t", frozenset(BrokerSettings.model_fields))
        assert loaded.values == {setting: want}, (prop, loaded.values)


def test_text_listing_and_serve_help_point_to_it() -> None:
    runner = CliRunner()
    text = runner.invoke(main, ["config", "list"])
    assert text.exit_code == 0, text.output
    heads = [ln.split()[0] for ln in text.output.splitlines() if ln and not ln.startswith(" ")]
    assert heads == list(BrokerSettings.model_fields)
    assert "retention_ms  [log.retention.ms, log.retention.minutes, log.retention.hours]  LOGBROKER_RETENTION_MS" in (
        text.output
    )
    help_text = runner.invoke(main, ["serve", "--help"], terminal_width=200).output
    assert "logbroker config list" in help_text
    assert "--log-format [text|json]" in help_text


def _repo_env_names() -> set[str]:
    """Every LOGBROKER_* name the repository mentions, less Python names and prefixes that are not variables."""
    texts = {"", ".py", ".md", ".sh", ".toml", ".yaml", ".yml", ".service", ".properties", ".txt"}
    paths = [*ROOT.glob("*.md"), *ROOT.glob("*.toml")]
    for top in ("src", "tests", "benchmarks", "docs", "examples", ".ci"):
        paths += [p for p in (ROOT / top).rglob("*") if p.suffix in texts or p.name == "Containerfile"]
    found: set[str] = set()
    for path in paths:
        if path.is_file() and "__pycache__" not in path.parts:
            found |= set(re.findall(r"LOGBROKER_[A-Z0-9_]+", path.read_text(errors="replace")))
    not_variables = {"LOGBROKER_ENV", "LOGBROKER_OPTS"}  # a test's dict, oslo's option list
    prefixes = {"LOGBROKER_SASL"}  # a test drops LOGBROKER_SASL* from its environment
    return {n for n in found if not n.endswith("_") and n not in not_variables | prefixes}


def test_unknown_environment_names_only_the_unknown() -> None:
    known = _repo_env_names()
    assert {"LOGBROKER_TEST_TARGET", "LOGBROKER_REQUIRE_PEERS", "LOGBROKER_SASL_PASSWORD"} <= known
    assert "LOGBROKER_DATA_DIR" in known
    env = dict.fromkeys(known, "x") | {"LOGBROKER_NUM_PARTITONS": "3", "logbroker_fsinc": "always", "PATH": "/bin"}
    assert unknown_environment(env, cli_envvars(main)) == ["LOGBROKER_NUM_PARTITONS", "logbroker_fsinc"]


def test_serve_warns_once_about_unknown_variables(tmp_path: Path) -> None:
    env = {"LOGBROKER_NUM_PARTITONS": "3", "LOGBROKER_TEST_TARGET": "logbroker", "LOGBROKER_SASL_PASSWORD": "pw",
           "LOGBROKER_REQUIRE_PEERS": "1", "LOGBROKER_MQ_TYPE": "kafka", "LOGBROKER_NUM_PARTITIONS": "2"}  # fmt: skip
    with BrokerProcess(tmp_path / "data", env=env) as proc:

        def warned() -> list[str]:
            lines = [ln for ln in proc.log_path.read_text().splitlines() if "unknown LOGBROKER_" in ln]
            assert lines, proc.log_tail()
            return lines

        lines = eventually(warned, timeout=20)
        assert proc.stop() == 0
    assert len(lines) == 1, lines
    assert " WARNING logbroker.config: " in lines[0]
    named = set(lines[0].rsplit(": ", 1)[1].split(", "))
    assert "LOGBROKER_NUM_PARTITONS" in named
    assert not named & set(env) - {"LOGBROKER_NUM_PARTITONS"}, named
