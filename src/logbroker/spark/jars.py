"""The jars a logbroker Spark session needs beyond the pyspark wheel, and how a fresh machine gets them.

Spark's Kafka connector and Delta Lake are not in the pyspark wheel and must be on the classpath when the
JVM starts. A checkout has them from ``.ci/fetch-jars spark`` (Maven); a fresh ``pip install`` does not,
and ``spark.jars.packages`` would resolve them through Ivy at every session start with Spark's default
resolver chain: a dozen "Host not found" / "proxy server not well configured" lines for repositories
nobody uses, and the whole transitive tree (a second Hadoop client, older Jackson and Parquet jars than
pyspark's own). So the six jars are named here exactly (the same set the Maven pom resolves, checked by a
test) and fetched once, without their transitive dependencies, by the Ivy that pyspark bundles, run as its
own command with its output kept unless it fails, into a per-user cache.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path
from xml.sax.saxutils import quoteattr

from logbroker.jars import java_tool

__all__ = ["DELTA_VERSION", "artifacts", "missing", "resolve", "user_jar_dir"]

# Must equal delta.version in .ci/maven/spark/pom.xml and the delta-spark pin in pyproject.toml.
DELTA_VERSION = "4.4.0"
# What the connector's own pom declares for Spark 4.2.0 (the Maven resolution picks the same).
_KAFKA_CLIENTS = "3.9.2"
_COMMONS_POOL2 = "2.13.1"
_CENTRAL = "https://repo1.maven.org/maven2/"


def artifacts(spark_version: str) -> list[tuple[str, str, str]]:
    """(group, artifact, version) of every jar the session loads for pyspark ``spark_version``."""
    return [
        ("org.apache.spark", "spark-sql-kafka-0-10_2.13", spark_version),
        ("org.apache.spark", "spark-token-provider-kafka-0-10_2.13", spark_version),
        ("org.apache.kafka", "kafka-clients", _KAFKA_CLIENTS),
        ("org.apache.commons", "commons-pool2", _COMMONS_POOL2),
        ("io.delta", "delta-spark_2.13", DELTA_VERSION),
        ("io.delta", "delta-storage", DELTA_VERSION),
    ]


def user_jar_dir(spark_version: str) -> Path:
    """Where a fresh install keeps the jars: one directory per Spark and Delta pair."""
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "logbroker" / "spark-jars" / f"spark-{spark_version}-delta-{DELTA_VERSION}"


def missing(directory: Path, spark_version: str) -> list[str]:
    """File names of the jars ``directory`` lacks."""
    names = [f"{a}-{v}.jar" for _g, a, v in artifacts(spark_version)]
    return [n for n in names if not (directory / n).is_file()]


def _ivy_jar() -> Path:
    import pyspark

    found = sorted((Path(pyspark.__file__).parent / "jars").glob("ivy-*.jar"))
    if not found:
        raise FileNotFoundError("pyspark's jars hold no ivy-*.jar")
    return found[-1]


def resolve(dest: Path, spark_version: str, timeout: float = 600) -> None:
    """Fetch the jars into ``dest`` (local Maven repository first, then Maven Central); atomic: ``dest``
    appears only complete, and a complete copy another process put there first is left alone (its JVM may
    be loading it). RuntimeError carries Ivy's own report when it fails."""
    java = java_tool("java")
    if java is None:
        raise RuntimeError("no Java runtime on JAVA_HOME or PATH")
    m2 = Path.home() / ".m2" / "repository"
    dest.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".resolve-", dir=dest.parent) as tmp:
        work = Path(tmp)
        deps = "\n".join(
            f'    <dependency org={quoteattr(g)} name={quoteattr(a)} rev={quoteattr(v)} transitive="false"/>'
            for g, a, v in artifacts(spark_version)
        )
        (work / "ivy.xml").write_text(
            '<ivy-module version="2.0">\n  <info organisation="dev.logbroker" module="spark-session"/>\n'
            f'  <dependencies defaultconf="default->master">\n{deps}\n  </dependencies>\n</ivy-module>\n'
        )
        (work / "ivysettings.xml").write_text(
            '<ivysettings>\n  <settings defaultResolver="chain"/>\n'
            f"  <caches defaultCacheDir={quoteattr(str(work / 'cache'))}/>\n"
            '  <resolvers>\n    <chain name="chain" returnFirst="true">\n'
            f'      <ibiblio name="local-m2" m2compatible="true" root={quoteattr(m2.as_uri() + "/")}/>\n'
            f'      <ibiblio name="central" m2compatible="true" root={quoteattr(_CENTRAL)}/>\n'
            "    </chain>\n  </resolvers>\n</ivysettings>\n"
        )
        out = work / "jars"
        cmd = [java, "-jar", str(_ivy_jar()), "-settings", str(work / "ivysettings.xml"),
               "-ivy", str(work / "ivy.xml"), "-confs", "default",
               "-retrieve", f"{out}/[artifact]-[revision].[ext]"]  # fmt: skip
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, check=False)
        lacking = missing(out, spark_version) if out.is_dir() else ["all of them"]
        if done.returncode != 0 or lacking:
            report = [ln for ln in (done.stdout + done.stderr).splitlines() if "::" in ln or "ERROR" in ln]
            raise RuntimeError(f"Ivy could not fetch {', '.join(lacking)}: " + " | ".join(report[-8:]))
        try:
            out.rename(dest)
        except OSError:
            if missing(dest, spark_version):  # not another process's complete copy: replace it
                shutil.rmtree(dest, ignore_errors=True)
                out.rename(dest)
