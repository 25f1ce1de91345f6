"""Apache Kafka's operator tools (kafka-topics, kafka-log-dirs, kafka-configs) as a test harness.

An operator's first contact with a broker is often Kafka's own CLI, so tests run the real tools'
main classes against logbroker and Apache Kafka and compare what they print. The jars come from
``.ci/fetch-jars tools`` (``org.apache.kafka:kafka-tools`` 4.3.1, the newest on Maven Central, plus
``kafka_2.13`` 4.3.1 for ConfigCommand, which still lives in core there); they are admin clients and
work against a 4.4 broker.

``run_tool("kafka-topics", bootstrap, "--describe", "--topic", "t")`` returns a :class:`ToolResult`
(exit code, stdout, stderr); :func:`tools_available` lets a test skip (or fail under CI) first.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from logbroker.jars import default_jar_dir, jars_available, java_tool, repo_root

__all__ = ["TOOLS", "ToolError", "ToolResult", "run_tool", "tool_command", "tools_available", "tools_jar_dir"]

# Script name (as in Kafka's bin/) -> main class in the 4.3 jars.
TOOLS: Mapping[str, str] = {
    "kafka-topics": "org.apache.kafka.tools.TopicCommand",
    "kafka-log-dirs": "org.apache.kafka.tools.LogDirsCommand",
    "kafka-configs": "kafka.admin.ConfigCommand",
    "kafka-consumer-groups": "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
    "kafka-share-groups": "org.apache.kafka.tools.consumer.group.ShareGroupCommand",
    "kafka-delete-records": "org.apache.kafka.tools.DeleteRecordsCommand",
    "kafka-get-offsets": "org.apache.kafka.tools.GetOffsetShell",
    "kafka-reassign-partitions": "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
    "kafka-cluster": "org.apache.kafka.tools.ClusterTool",
    "kafka-features": "org.apache.kafka.tools.FeatureCommand",
    "kafka-broker-api-versions": "org.apache.kafka.tools.BrokerApiVersionsCommand",
    "kafka-transactions": "org.apache.kafka.tools.TransactionsCommand",
    "kafka-leader-election": "org.apache.kafka.tools.LeaderElectionCommand",
    "kafka-metadata-quorum": "org.apache.kafka.tools.MetadataQuorumCommand",
    "kafka-streams-groups": "org.apache.kafka.tools.streams.StreamsGroupCommand",
}

# Kafka's bin/ scripts log WARN and above to stderr (config/tools-log4j2.yaml); stdout stays the tool's output.
_LOG4J2 = """\
status = warn
appender.err.type = Console
appender.err.name = err
appender.err.target = SYSTEM_ERR
appender.err.layout.type = PatternLayout
appender.err.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.err.ref = err
"""

# A tool is a short-lived admin client: the client compiler and a small serial heap start it fastest.
_JVM_FLAGS = ("-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC", "-Xmx256m", "-Djava.awt.headless=true")


class ToolError(RuntimeError):
    """A tool could not be run (no java, no jars) or, with ``check=True``, exited non-zero."""


@dataclass(frozen=True)
class ToolResult:
    """What a tool run left behind: Kafka's tools print results on stdout, errors on stdout or stderr."""

    argv: tuple[str, ...]
    returncode: int
    stdout: str
    stderr: str

    @property
    def output(self) -> str:
        """stdout and stderr together (the tools print some errors on stdout, others on stderr)."""
        return self.stdout + self.stderr


def tools_jar_dir() -> Path:
    return default_jar_dir("tools")


def tools_available() -> str | None:
    """None when the tools can run here, else why not (for a test's skip or CI failure)."""
    if java_tool("java") is None:
        return "java not found (Kafka's tools need a JVM)"
    if not jars_available("tools"):
        return f"no Kafka tools jars in {tools_jar_dir()} (run .ci/fetch-jars tools)"
    return None


@lru_cache(maxsize=1)
def _log_config() -> Path:
    """The log4j2 file every tool run shares (written once, atomically: parallel sessions may race)."""
    root = repo_root()
    base = root / ".ci" / "cache" if root else Path(tempfile.gettempdir())
    base.mkdir(parents=True, exist_ok=True)
    path = base / "kafka-tools-log4j2.properties"
    if not path.is_file() or path.read_text() != _LOG4J2:
        fd, tmp = tempfile.mkstemp(dir=base, prefix=".log4j2-")
        with os.fdopen(fd, "w") as f:
            f.write(_LOG4J2)
        os.replace(tmp, path)
    return path


def tool_command(tool: str, *args: str) -> list[str]:
    """The java command line running ``tool`` (a script name from TOOLS or a main class) with ``args``."""
    java = java_tool("java")
    if java is None:
        raise ToolError("java not found (set JAVA_HOME or put java on PATH)")
    if not jars_available("tools"):
        raise ToolError(f"no Kafka tools jars in {tools_jar_dir()} (run .ci/fetch-jars tools)")
    main = TOOLS.get(tool, tool)
    return [
        java, *_JVM_FLAGS,
        f"-Dlog4j2.configurationFile={_log_config()}",
        "-cp", str(tools_jar_dir() / "*"),
        main, *args,
    ]  # fmt: skip


def run_tool(
    tool: str,
    bootstrap: str | None,
    *args: str,
    timeout: float = 120.0,
    check: bool = False,
    input: str | None = None,
) -> ToolResult:
    """Run ``tool`` with ``--bootstrap-server bootstrap`` (omitted when None) followed by ``args``.

    ``check=True`` raises ToolError (carrying both streams) on a non-zero exit; otherwise the caller
    asserts on ``returncode``, since a refusal is often what a test expects.
    """
    argv: Sequence[str] = ("--bootstrap-server", bootstrap, *args) if bootstrap is not None else args
    cmd = tool_command(tool, *argv)
    env = dict(os.environ)
    # Picked up by every JVM: could inflate heaps, attach agents or print banners on stderr.
    env.pop("JAVA_TOOL_OPTIONS", None)
    env.pop("_JAVA_OPTIONS", None)
    env.pop("KAFKA_OPTS", None)
    proc = subprocess.run(
        cmd, input=input, capture_output=True, text=True, timeout=timeout, check=False, env=env,
        stdin=None if input is not None else subprocess.DEVNULL,
    )  # fmt: skip
    result = ToolResult(tuple(cmd), proc.returncode, proc.stdout, proc.stderr)
    if check and proc.returncode != 0:
        raise ToolError(
            f"{tool} {' '.join(argv)} exited {proc.returncode}:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
        )
    return result
