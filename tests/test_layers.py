"""Layering rules, checked on the import graph of the installed package.

Tooling lives in its own distribution, ``logbroker-devtools`` (``devtools/``): ``logbroker_devtools.testing``
(broker processes, reference peers, fuzzing), ``.bench`` (the benchmark) and ``.client`` (the protocol test
client). Product code never imports it at module level; the only product module that may load it at all is
the ``logbroker bench`` command, inside its function; and the product wheel holds none of it.
"""

from __future__ import annotations

import ast
import json
import pkgutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import logbroker

PACKAGE = "logbroker"
PACKAGE_DIR = Path(logbroker.__file__).resolve().parent
TOOLING = ("logbroker_devtools",)
# Product modules allowed to import tooling, and only inside a function (lazily).
LAZY_TOOLING_IMPORTERS = {"logbroker.cli.bench": {"logbroker_devtools.bench"}}


def _is_under(module: str, packages: tuple[str, ...] | set[str]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def all_modules() -> list[str]:
    """Every module of the package, found on disk (importing nothing), ``__main__`` modules left out."""

    def walk(path: Path, prefix: str) -> Iterator[str]:
        for info in pkgutil.iter_modules([str(path)]):
            if not info.ispkg and not (path / f"{info.name}.py").exists():
                continue  # a compiled extension (protocol/_walk.c): no Python source, imports nothing
            if info.name != "__main__":
                yield prefix + info.name
            if info.ispkg:
                yield from walk(path / info.name, f"{prefix}{info.name}.")

    return sorted([PACKAGE, *walk(PACKAGE_DIR, PACKAGE + ".")])


def product_modules() -> list[str]:
    return [m for m in all_modules() if not _is_under(m, TOOLING)]


def run_python(code: str, timeout: float = 300.0) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter (a clean ``sys.modules``); fails the test on a non-zero exit."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=timeout, check=False
    )
    assert proc.returncode == 0, f"exit {proc.returncode}\nstdout:\n{proc.stdout}\nstderr:\n{proc.stderr}"
    return proc


def module_file(module: str) -> Path:
    parts = module.split(".")[1:]
    path = PACKAGE_DIR.joinpath(*parts)
    return path / "__init__.py" if path.is_dir() else path.with_suffix(".py")


def imported_modules(module: str) -> list[tuple[str, bool]]:
    """(absolute module name, inside a function?) of every import statement in ``module``'s source."""
    path = module_file(module)
    tree = ast.parse(path.read_text(), str(path))
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            nested = in_function or isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
            if isinstance(child, ast.Import):
                found.extend((alias.name, in_function) for alias in child.names)
            elif isinstance(child, ast.ImportFrom):
                base = child.module or ""
                if child.level:
                    anchor = package.split(".")[: len(package.split(".")) - child.level + 1]
                    base = ".".join([*anchor, base] if base else anchor)
                found.append((base, in_function))
                # `from logbroker_devtools import bench` imports the submodule logbroker_devtools.bench.
                found.extend((f"{base}.{alias.name}", in_function) for alias in child.names)
            visit(child, nested)

    visit(tree, False)
    return found


def test_the_walk_finds_the_product_and_no_tooling_in_it() -> None:
    modules = all_modules()
    for expected in ("logbroker.cli", "logbroker.cli.bench", "logbroker.jars", "logbroker.spark.session",
                     "logbroker.broker.seams", "logbroker.addresses"):  # fmt: skip
        assert expected in modules
    for gone in ("logbroker.testing", "logbroker.bench", "logbroker.client"):
        assert not any(_is_under(m, (gone,)) for m in modules), f"{gone} is tooling: it lives in devtools/"
    assert product_modules() == modules


def test_the_product_wheel_holds_no_tooling(tmp_path: Path) -> None:
    """`pip install logbroker` installs the broker, the faces and the CLI only."""
    import zipfile

    root = PACKAGE_DIR.parents[1]
    if not (root / "pyproject.toml").is_file():
        import pytest

        pytest.skip("not a source checkout")
    run = subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(tmp_path),
         str(root)],
        capture_output=True, text=True, timeout=300, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stderr[-2000:]
    [wheel] = tmp_path.glob("logbroker-*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    assert "logbroker/broker/server.py" in names and "logbroker/cli/__init__.py" in names
    tooling = [n for n in names if n.startswith(("logbroker/testing/", "logbroker/bench/", "logbroker/client/",
                                                 "logbroker_devtools/")) or n.endswith(".go")]  # fmt: skip
    assert not tooling, tooling


def test_importing_product_modules_loads_no_tooling() -> None:
    """Import every product module in one fresh interpreter; report the first that drags tooling in."""
    result = run_python(
        f"""
        import importlib, json, sys

        tooling = {TOOLING!r}
        def loaded():
            return sorted(m for m in sys.modules if any(m == t or m.startswith(t + ".") for t in tooling))

        offenders = {{}}
        for name in {product_modules()!r}:
            before = set(loaded())
            importlib.import_module(name)
            new = sorted(set(loaded()) - before)
            if new:
                offenders[name] = new
        print(json.dumps({{"offenders": offenders, "loaded": loaded()}}))
        """
    )
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["offenders"] == {}, f"product modules import tooling at import time: {report['offenders']}"
    assert report["loaded"] == []


def test_only_the_bench_command_imports_tooling_and_only_lazily() -> None:
    """Static check of every import statement, including those inside functions."""
    problems = []
    for module in product_modules():
        allowed = LAZY_TOOLING_IMPORTERS.get(module, set())
        for target, in_function in imported_modules(module):
            if not _is_under(target, TOOLING):
                continue
            if not (in_function and _is_under(target, allowed)):
                where = "inside a function" if in_function else "at module level"
                problems.append(f"{module} imports {target} {where}")
    assert not problems, "\n".join(problems)


def test_the_bench_command_loads_the_benchmark_when_it_runs() -> None:
    """The lazy import is real: `logbroker bench` with a bad option value reaches logbroker_devtools.bench."""
    result = run_python(
        """
        import sys
        from click.testing import CliRunner
        from logbroker.cli import main

        assert "logbroker_devtools.bench" not in sys.modules
        r = CliRunner().invoke(main, ["bench", "--targets", "nope"])
        assert r.exit_code == 2 and "unknown target" in r.output, r.output
        assert "logbroker_devtools.bench" in sys.modules
        print("ok")
        """
    )
    assert result.stdout.strip() == "ok"


# ---------------------------------------------------------------------------------------------------------------
# The broker's seams: handlers see the context only, no import loop, one file per API, one codec importer


def _import_edges(module: str) -> set[str]:
    """Modules of this package that ``module`` imports anywhere in its source (functions included);
    ``from pkg import submodule`` counts as importing the submodule, not the package's ``__init__``."""
    known = set(all_modules())
    path = module_file(module)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    edges: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            edges.update(a.name for a in node.names if a.name in known)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            subs = {f"{base}.{a.name}" for a in node.names} & known
            edges.update(subs or ({base} & known))
    return edges


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    state: dict[str, int] = {}  # 1 = on the current path, 2 = done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == 1:
                return [*path[path.index(nxt) :], nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[node] = 2
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start)) is not None:
            return found
    return None


def test_no_import_loop_anywhere() -> None:
    """No circle in the whole package's import graph, imports inside functions and for type checking
    included: a module that needs its importer's types names them as a Protocol of its own."""
    modules = all_modules()
    graph = {m: {t for t in _import_edges(m) if t in modules and t != m} for m in modules}
    assert len(graph) > 150
    loop = _cycle(graph)
    assert loop is None, "import loop: " + " -> ".join(loop or [])


def test_handlers_see_the_broker_context_only() -> None:
    """Handlers reach the broker through the context and `broker.seams` (what crosses from storage is named
    there), never the server, storage or the codec; and no API's handler imports another's (what two share
    lives in a `_` helper module)."""
    handlers = [m for m in all_modules() if m.startswith("logbroker.broker.handlers.")]
    apis = {m for m in handlers if not m.rpartition(".")[2].startswith("_")}
    assert len(handlers) >= 26
    problems = []
    for module in handlers:
        for target, _ in imported_modules(module):
            if _is_under(target, ("logbroker.broker.server", "logbroker.storage", "kafka")):
                problems.append(f"{module} imports {target}")
            elif target in apis and target != module:
                problems.append(f"{module} imports the handler {target}")
    assert not problems, "\n".join(problems)


# Product modules that use kafka-python as a client, not as the codec: the CLI's partitioner (murmur2) and
# its admin path for the two calls confluent-kafka lacks (OffsetDelete, DescribeLogDirs).
KAFKA_PYTHON_CLIENTS = {
    "logbroker.cli.wire_admin": {"kafka", "kafka.TopicPartition", "kafka.admin", "kafka.errors",
                                 "kafka.admin.KafkaAdminClient", "kafka.errors.KafkaError", "kafka.protocol.admin",
                                 "kafka.protocol.admin.DescribeUserScramCredentialsRequest"},
    # the console's calls librdkafka lacks (log dirs, transactions, producers, every group type, SCRAM listing)
    "logbroker.console.cluster": {"kafka", "kafka.TopicPartition", "kafka.admin", "kafka.errors",
                                  "kafka.admin.KafkaAdminClient", "kafka.errors.KafkaError",
                                  "kafka.admin.AbortTransactionSpec", "kafka.admin.ACLFilter",
                                  "kafka.admin.ACLOperation", "kafka.admin.ACLPermissionType",
                                  "kafka.admin.ACLResourcePatternType", "kafka.admin.ResourcePatternFilter",
                                  "kafka.admin.ResourceType", "kafka.errors.SecurityDisabledError"},
    # ShareGroupDescribe and DescribeShareGroupOffsets: request classes kafka-python builds from our schemas
    "logbroker.console.share_wire": {"kafka.admin", "kafka.admin.KafkaAdminClient", "kafka.protocol.api_message",
                                     "kafka.protocol.api_message.ApiMessage"},
}  # fmt: skip


def test_only_the_protocol_layer_imports_the_codec() -> None:
    """kafka-python's protocol package is the codec behind `logbroker.protocol`; nothing else names it."""
    offenders = [
        f"{module} imports {target}"
        for module in product_modules()
        if not _is_under(module, ("logbroker.protocol",))
        for target, _ in imported_modules(module)
        if _is_under(target, ("kafka",))
        and not _is_under(target, ("kafka.partitioner",))
        and not (
            target in KAFKA_PYTHON_CLIENTS.get(module, ())
            or _is_under(target, KAFKA_PYTHON_CLIENTS.get(module, ())[2:])
        )
    ]
    assert not offenders, "\n".join(offenders)


CLIENT_CLASSES = {"Producer", "Consumer", "AdminClient", "ShareConsumer", "SerializingProducer",
                  "DeserializingConsumer"}  # fmt: skip
CLIENT_MODULES = ("confluent_kafka", "confluent_kafka.admin")


def client_uses(module: str) -> list[str]:
    """Where ``module`` names a confluent-kafka client class as a value (a call, a factory passed on), not
    as a type annotation; and any use of the layer's raw `new_client`."""
    path = module_file(module)
    tree = ast.parse(path.read_text(), str(path))
    bound: set[str] = set()  # local names of client classes
    modules: set[str] = set()  # local names of confluent_kafka / confluent_kafka.admin
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module in CLIENT_MODULES:
            bound |= {a.asname or a.name for a in node.names if a.name in CLIENT_CLASSES}
            if node.module == "confluent_kafka":
                modules |= {a.asname or a.name for a in node.names if a.name == "admin"}
        elif isinstance(node, ast.Import):
            modules |= {a.asname or a.name for a in node.names if a.name in CLIENT_MODULES}
    annotations: set[int] = set()
    for node in ast.walk(tree):
        parts: list[ast.AST | None] = []
        if isinstance(node, ast.arg):
            parts = [node.annotation]
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            parts = [node.returns]
        elif isinstance(node, ast.AnnAssign):
            parts = [node.annotation]
        for part in parts:
            if part is not None:
                annotations |= {id(n) for n in ast.walk(part)}
    found = []
    for node in ast.walk(tree):
        if id(node) in annotations:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in bound | {"new_client"}:
            found.append(f"{module}:{node.lineno} uses {node.id}")
        elif (isinstance(node, ast.Attribute) and node.attr in CLIENT_CLASSES | {"new_client"}
              and isinstance(node.value, ast.Name) and node.value.id in modules | {"_kafka", "errors"}):  # fmt: skip
            found.append(f"{module}:{node.lineno} uses {node.value.id}.{node.attr}")
    return found


def test_only_the_kafka_layer_builds_clients() -> None:
    """Every confluent-kafka client of the faces and the CLI comes from `_kafka.producer` / `consumer` /
    `share_consumer` / `admin`: one place turns settings into librdkafka properties and a refused property
    into the face's error. The check itself is checked on a module that builds one."""
    offenders = [use for module in product_modules() if not _is_under(module, ("logbroker._kafka",))
                 for use in client_uses(module)]  # fmt: skip
    assert not offenders, "\n".join(offenders)
    assert client_uses("logbroker._kafka.clients"), "the check finds nothing where clients are built"


def test_one_handler_file_per_api_and_versions_served_as_declared() -> None:
    """Every module under broker/handlers/ registers exactly one API; ApiVersions' table is the registry."""
    from logbroker.broker.handlers import registry, served_apis

    handlers = registry()
    by_module: dict[str, list[int]] = {}
    for key, h in handlers.items():
        by_module.setdefault(h.fn.__module__, []).append(key)
    files = [m for m in all_modules() if m.startswith("logbroker.broker.handlers.") and "._" not in m]
    assert sorted(by_module) == sorted(files)
    assert all(len(keys) == 1 for keys in by_module.values()), by_module
    served = served_apis()
    assert sorted(served) == sorted(handlers)
    for key, spec in served.items():
        assert spec is handlers[key].spec and spec.key == key
        assert 0 <= spec.min_version <= spec.max_version <= spec.api.codec_max_version
