"""Where Java and the Maven jars are: the Spark face needs them at session start, the test peers
(``logbroker_devtools.testing.peers``) to launch Apache Kafka and the Java client.

``.ci/fetch-jars`` resolves jars into ``<repo>/.ci/cache/jars/<kind>`` (kinds ``kafka``, ``clients``, ``tools``,
``spark``, ``kafka39``); ``$LOGBROKER_JARS_DIR/<kind>`` wins so CI caches and installed packages can point
elsewhere. Java is looked up on ``JAVA_HOME``, then ``PATH``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from functools import lru_cache
from pathlib import Path

__all__ = [
    "JARS_ENV",
    "default_jar_dir",
    "jars_available",
    "java_available",
    "java_tool",
    "javac_available",
    "repo_root",
]

JARS_ENV = "LOGBROKER_JARS_DIR"


@lru_cache(maxsize=1)
def repo_root() -> Path | None:
    """The source checkout holding this package, if any (editable installs only)."""
    for parent in Path(__file__).resolve().parents:
        if (parent / "pyproject.toml").is_file() and (parent / ".ci").is_dir():
            return parent
    return None


def default_jar_dir(kind: str) -> Path:
    """Where ``.ci/fetch-jars`` puts jars of ``kind`` (``kafka``, ``clients``, ``tools`` or ``spark``).

    ``$LOGBROKER_JARS_DIR/<kind>`` wins so CI caches and installed packages can point
    elsewhere; otherwise ``<repo>/.ci/cache/jars/<kind>``.
    """
    env = os.environ.get(JARS_ENV)
    if env:
        return Path(env) / kind
    root = repo_root()
    base = root / ".ci" / "cache" / "jars" if root else Path.cwd() / ".ci" / "cache" / "jars"
    return base / kind


def jars_available(kind: str, jar_dir: Path | None = None) -> bool:
    """True when the jar directory for ``kind`` holds jars (lets tests skip cleanly)."""
    d = jar_dir if jar_dir is not None else default_jar_dir(kind)
    return d.is_dir() and any(d.glob("*.jar"))


def _java_home_tool(name: str) -> str | None:
    home = os.environ.get("JAVA_HOME")
    if home:
        candidate = Path(home) / "bin" / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return shutil.which(name)


@lru_cache(maxsize=4)
def java_tool(name: str) -> str | None:
    """Path of a JDK tool (``java``, ``javac``) on JAVA_HOME or PATH that runs ``-version``, else None."""
    exe = _java_home_tool(name)
    if exe is None:
        return None
    try:
        proc = subprocess.run([exe, "-version"], capture_output=True, timeout=30, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return exe if proc.returncode == 0 else None


def java_available() -> bool:
    """True when a runnable ``java`` is on JAVA_HOME or PATH."""
    return java_tool("java") is not None


def javac_available() -> bool:
    """True when ``javac`` is available too (a JRE alone cannot build ClientTool)."""
    return java_tool("javac") is not None
