"""The Parquet upsert sink that Delta's MERGE retired (logbroker before 2026-11-26), kept only as the
benchmark's baseline: a foreachBatch merge that rewrites the dataset and installs it file by file."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from logbroker.spark.pipeline import local_path

if TYPE_CHECKING:
    from pyspark.sql import DataFrame


_DATA_FILE = "part-00000.parquet"


def _data_files(root: Path) -> list[Path]:
    """Parquet files a reader of `root` sees (not under `_`/`.` entries such as _checkpoint)."""
    if not root.is_dir():
        return []
    return [p for p in root.rglob("*.parquet")
            if not any(part.startswith(("_", ".")) for part in p.relative_to(root).parts)]  # fmt: skip


def _install(staging: Path, target: Path) -> None:
    """Move the staged files over the dataset's, one atomic os.replace per partition directory.

    Each directory holds a single file of a fixed name, so replacing it is atomic: a reader that
    opens it sees the old or the new rows, never both (no duplicate keys); a reader that listed the
    directory just before may fail on the replaced file and must retry, and a file-stream source
    cannot follow an upsert dataset (it tracks files by name). The whole directory is not swapped
    because it also holds the query's checkpoint. Hadoop's local filesystem verifies `.<name>.crc`
    files: the old one goes first and the new one follows, so no reader meets a mismatching checksum.
    """
    installed: set[Path] = set()
    for new in _data_files(staging):
        dest_dir = target / new.parent.relative_to(staging)
        dest_dir.mkdir(parents=True, exist_ok=True)
        dest = dest_dir / _DATA_FILE
        (dest_dir / f".{_DATA_FILE}.crc").unlink(missing_ok=True)
        os.replace(new, dest)
        crc = new.parent / f".{new.name}.crc"
        if crc.exists():
            os.replace(crc, dest_dir / f".{_DATA_FILE}.crc")
        installed.add(dest)
    for old in _data_files(target):
        if old not in installed:
            old.unlink(missing_ok=True)
            (old.parent / f".{old.name}.crc").unlink(missing_ok=True)


def upsert_batch(path: str, keys: list[str]) -> Callable[[DataFrame, int], None]:
    """foreachBatch body: merge the batch into the dataset at `path`, batch rows winning per key.

    The merged table is written to a staging directory inside the dataset (``_staging-*``, which
    readers ignore) and installed file by file (see `_install`); meant for rollup-sized data. Keys
    compare null-safely (window partitioning); duplicates of a key inside one batch keep one
    arbitrary row. Running the same batch again gives the same table: idempotent on replay.
    """

    def merge(batch: DataFrame, batch_id: int) -> None:
        from pyspark.sql import Window
        from pyspark.sql import functions as F

        spark = batch.sparkSession
        local = local_path(path)
        if local is None:
            raise ValueError(f"upsert sink needs a local path, not {path}")
        for stale in local.glob("_staging-*"):
            shutil.rmtree(stale, ignore_errors=True)
        rows = batch.withColumn("_prio", F.lit(0))
        if _data_files(local):
            existing = spark.read.parquet(str(local)).select(*batch.columns).withColumn("_prio", F.lit(1))
            rows = rows.unionByName(existing)
        w = Window.partitionBy(*[F.col(f"`{k}`") for k in keys]).orderBy("_prio")
        merged = rows.withColumn("_rn", F.row_number().over(w)).where("_rn = 1").drop("_rn", "_prio")
        staging = local / f"_staging-{batch_id}-{uuid.uuid4().hex[:8]}"
        merged.coalesce(1).write.mode("overwrite").parquet(str(staging))
        _install(staging, local)
        shutil.rmtree(staging, ignore_errors=True)

    return merge
