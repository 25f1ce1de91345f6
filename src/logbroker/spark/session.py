"""Build a SparkSession that carries Spark's Kafka connector and Delta Lake.

The pyspark wheel includes neither; both must be on the classpath when the JVM starts (a running
session cannot load them later). Where the jars come from, first found wins:

* ``jar_dir``, or by default what ``.ci/fetch-jars spark`` resolved into ``.ci/cache/jars/spark``
  (or ``$LOGBROKER_JARS_DIR/spark``): no network at session start, versions pinned in
  ``.ci/maven/spark/pom.xml``;
* the per-user cache ``~/.cache/logbroker/spark-jars/...``, fetched once by `logbroker.spark.jars`
  (a fresh ``pip install``: one line on stderr while it fetches, nothing after);
* ``spark.jars.packages`` when ``packages=`` is given explicitly (Ivy at every session start).

The connector is compiled against one Spark release, so its version must equal pyspark's; a
mismatch is refused here with a message instead of surfacing later as a NoSuchMethodError. With
Delta's jar present the session gets Delta's SQL extension and catalog, so ``format("delta")``,
``DeltaTable`` and ``MERGE`` work in any session built here.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from logbroker.jars import default_jar_dir, java_available

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

__all__ = [
    "CONNECTOR_ARTIFACT",
    "DELTA_ARTIFACT",
    "SparkSetupError",
    "connector_jars",
    "connector_package",
    "delta_loaded",
    "is_local",
    "on_loopback",
    "session",
]

CONNECTOR_ARTIFACT = "spark-sql-kafka-0-10_2.13"
DELTA_ARTIFACT = "delta-spark_2.13"
_CONNECTOR_JAR = re.compile(rf"^{re.escape(CONNECTOR_ARTIFACT)}-(?P<version>[^/]+)\.jar$")
_DELTA_JAR = re.compile(rf"^{re.escape(DELTA_ARTIFACT)}-(?P<version>[^/]+)\.jar$")
_LOG4J = "log4j2.properties"  # warnings and errors only, without Spark's two lines about its default profile
_DELTA_CONF = {
    "spark.sql.extensions": "io.delta.sql.DeltaSparkSessionExtension",
    "spark.sql.catalog.spark_catalog": "org.apache.spark.sql.delta.catalog.DeltaCatalog",
    # A table's log is replayed with this many tasks (50 by default): seconds of scheduling on two cores.
    "spark.databricks.delta.snapshotPartitions": "2",
}

# Small-machine defaults: tests and local pipelines run on a couple of cores, where Spark's 200
# shuffle partitions and the web UI cost seconds for nothing. Callers override through conf=.
_DEFAULT_CONF: dict[str, str] = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": "2",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.streaming.forceDeleteTempCheckpointLocation": "true",
}


# JVM flags added to the driver's (and executors') options: `-XX:TieredStopAtLevel=1` makes short local jobs (tests,
# a laptop's pipelines) cost about 40% less CPU, since their JVM spends much of its life compiling with C2;
# long-running pipelines leave it unset. With it, the JVM reserves only 48 MB of code cache, which a session running
# many queries fills: the tests add `-XX:ReservedCodeCacheSize=240m`. Any `conf=` given to session() still wins.
SPARK_JAVA_OPTIONS_ENV = "LOGBROKER_SPARK_JAVA_OPTIONS"


class SparkSetupError(RuntimeError):
    """Spark cannot be started with the Kafka connector; the message says what to install."""


def _pyspark_version() -> str:
    try:
        import pyspark
    except ImportError as exc:  # pragma: no cover - depends on the install
        raise SparkSetupError("pyspark is not installed: pip install 'logbroker[spark]'") from exc
    return str(pyspark.__version__)


def connector_package(spark_version: str | None = None) -> str:
    """Maven coordinate of the connector that matches the installed pyspark (for spark.jars.packages)."""
    return f"org.apache.spark:{CONNECTOR_ARTIFACT}:{spark_version or _pyspark_version()}"


def connector_jars(jar_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """The jars to put on ``spark.jars``, checked to contain a connector of pyspark's version.

    An explicit ``jar_dir`` must exist and hold the connector; the default directory is allowed to
    be absent (the caller then falls back to ``spark.jars.packages``) and yields ``[]``.
    """
    explicit = jar_dir is not None
    directory = Path(jar_dir) if jar_dir is not None else default_jar_dir("spark")
    jars = sorted(directory.glob("*.jar")) if directory.is_dir() else []
    if not jars:
        if explicit:
            raise SparkSetupError(f"no jars in {directory} (run .ci/fetch-jars spark)")
        return []
    versions = [m.group("version") for j in jars if (m := _CONNECTOR_JAR.match(j.name))]
    if not versions:
        raise SparkSetupError(f"{directory} has jars but no {CONNECTOR_ARTIFACT}-*.jar (run .ci/fetch-jars spark)")
    wanted = _pyspark_version()
    if wanted not in versions:
        raise SparkSetupError(
            f"{directory} holds {CONNECTOR_ARTIFACT} {', '.join(versions)} but pyspark is {wanted}; "
            "the connector must match Spark exactly (fix .ci/maven/spark/pom.xml or the pyspark pin)"
        )
    _check_delta(directory, jars)
    return jars


def _check_delta(directory: Path, jars: Sequence[Path]) -> None:
    """Delta's jar and its Python package (``delta.tables``) must be one release: the Python side calls
    the JVM side's methods by name."""
    from importlib.metadata import PackageNotFoundError, version

    found = [m.group("version") for j in jars if (m := _DELTA_JAR.match(j.name))]
    try:
        python = version("delta-spark")
    except PackageNotFoundError:
        return
    if found and python not in found:
        raise SparkSetupError(
            f"{directory} holds {DELTA_ARTIFACT} {', '.join(found)} but the delta-spark package is {python}; "
            "they must be one release (fix .ci/maven/spark/pom.xml or the delta-spark pin)"
        )


def _complete(jars: Sequence[Path]) -> bool:
    from logbroker.spark import jars as spark_jars

    return bool(jars) and not spark_jars.missing(jars[0].parent, _pyspark_version())


def _user_jars() -> list[Path]:
    """The per-user jar cache, fetched on first use (see `logbroker.spark.jars`)."""
    from logbroker.spark import jars as spark_jars

    wanted = _pyspark_version()
    directory = spark_jars.user_jar_dir(wanted)
    if spark_jars.missing(directory, wanted):
        print(f"logbroker: fetching Spark's Kafka connector and Delta Lake into {directory} (once)", file=sys.stderr)
        try:
            spark_jars.resolve(directory, wanted)
        except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
            raise SparkSetupError(
                f"cannot fetch the Kafka connector and Delta Lake jars ({exc}); with Maven at hand, "
                ".ci/fetch-jars spark puts them in .ci/cache/jars/spark instead"
            ) from exc
    return connector_jars(directory)


def is_local(master: str) -> bool:
    """A master that runs everything in the driver's JVM (``local``, ``local[4]``, ``local[2,3]``...)."""
    return master == "local" or master.startswith("local[")


def on_loopback(master: str) -> bool:
    """Local, or a cluster master URL whose host is this machine's loopback (a test or laptop cluster)."""
    if is_local(master):
        return True
    from urllib.parse import urlparse

    host = urlparse(master.split(",")[0]).hostname or ""
    return host in ("localhost", "::1") or host.startswith("127.")


def delta_loaded(spark: SparkSession) -> bool:
    """Whether Delta Lake's classes are on the session's classpath (py4j names a missing class a package)."""
    from py4j.java_gateway import JavaClass

    jvm = spark.sparkContext._jvm
    assert jvm is not None
    return isinstance(jvm.io.delta.tables.DeltaTable, JavaClass)


def _check_java() -> None:
    if not java_available():
        raise SparkSetupError(
            "Spark needs a Java runtime (17 or newer) and none was found on JAVA_HOME or PATH; "
            "install one, e.g. apt-get install openjdk-17-jdk-headless"
        )


def session(
    master: str = "local[*]",
    app_name: str = "logbroker",
    jar_dir: str | os.PathLike[str] | None = None,
    packages: Sequence[str] | None = None,
    conf: Mapping[str, str] | None = None,
) -> SparkSession:
    """Return a SparkSession whose classpath has Spark's Kafka connector.

    ``jar_dir`` (default: the ``.ci/fetch-jars spark`` directory, else the per-user cache, fetched
    once) supplies the connector and Delta Lake as local jars; ``packages`` are Maven coordinates
    for ``spark.jars.packages`` instead. ``conf`` entries win over the small-machine defaults above.

    With a local master, or a cluster master on this machine's loopback, the driver binds and
    advertises 127.0.0.1 and SPARK_LOCAL_IP defaults to it (Spark otherwise resolves the hostname
    and may bind a public interface or fail on hosts without DNS); with a remote cluster master the
    driver keeps Spark's own choice, an address the executors can reach back (set
    ``spark.driver.host`` when that guess is wrong). PYSPARK_PYTHON/PYSPARK_DRIVER_PYTHON default to
    this interpreter, so Python workers see the same packages as the driver (on a remote cluster the
    same path must exist on every worker, or set ``spark.pyspark.python``).

    Spark keeps one session per JVM: if one is already running, ``getOrCreate`` returns it and
    the classpath cannot change; that case is refused unless it already has the connector.
    """
    _pyspark_version()
    _check_java()
    loopback = on_loopback(master)
    if loopback:
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

    from pyspark.sql import SparkSession

    settings: dict[str, str] = dict(_DEFAULT_CONF)
    if loopback:
        settings.update({"spark.driver.host": "127.0.0.1", "spark.driver.bindAddress": "127.0.0.1"})
    if packages is not None:
        settings["spark.jars.packages"] = ",".join(packages)
        with_delta = any(DELTA_ARTIFACT in p for p in packages)
    else:
        jars = connector_jars(jar_dir)
        if jar_dir is None and not _complete(jars):  # an older .ci/fetch-jars run: no Delta yet
            jars = _user_jars()
        settings["spark.jars"] = ",".join(str(j) for j in jars)
        with_delta = any(_DELTA_JAR.match(j.name) for j in jars)
    if with_delta:
        settings.update(_DELTA_CONF)
    java_options = os.environ.get(SPARK_JAVA_OPTIONS_ENV, "").strip()
    driver_options = f"-Dlog4j2.configurationFile={Path(__file__).with_name(_LOG4J)}"
    settings["spark.driver.extraJavaOptions"] = f"{driver_options} {java_options}".strip()
    if java_options:
        settings["spark.executor.extraJavaOptions"] = java_options
    settings.update(conf or {})

    active = SparkSession.getActiveSession()
    if active is not None:
        loaded = active.conf.get("spark.jars", "") + "," + active.conf.get("spark.jars.packages", "")
        if CONNECTOR_ARTIFACT not in (loaded or ""):
            raise SparkSetupError(
                "a SparkSession without the Kafka connector is already running in this process; "
                "stop it first (jars can only be added when the JVM starts)"
            )

    builder = SparkSession.builder.master(master).appName(app_name)
    for key, value in settings.items():
        builder = builder.config(key, value)
    try:
        return builder.getOrCreate()
    except Exception as exc:  # the JVM gateway reports a missing/broken Java only this late
        if "JAVA_GATEWAY_EXITED" in str(exc) or "Java gateway process exited" in str(exc):
            raise SparkSetupError(f"the Spark JVM did not start: {exc}") from exc
        raise


def owned_session(**kwargs: Any) -> tuple[SparkSession, bool]:
    """``session(**kwargs)`` and whether this call started its SparkContext, so a caller stops only
    what it started. The JVM-wide context is the test: ``getActiveSession`` is per thread and says
    None in a worker thread even while another thread's session runs."""
    from pyspark import SparkContext

    started = SparkContext._active_spark_context is None
    return session(**kwargs), started
