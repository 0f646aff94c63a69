"""Reading batch input (Parquet, CSV, JSON lines) and converting CSV to Parquet.

The format is taken from the file names unless given: ``.parquet``, ``.csv``, ``.json`` /
``.jsonl``, looking inside directories (Spark reads every file of a directory, skipping
names that start with ``_`` or ``.``). CSV has a header row; without a schema its
column types are inferred (one extra pass over the data).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pyspark.sql import DataFrame, SparkSession

from worker.spark.errors import LoadRejected

FORMATS = ("parquet", "csv", "json")
_SUFFIXES = {".parquet": "parquet", ".csv": "csv", ".json": "json", ".jsonl": "json"}


def detect_format(paths: Sequence[str]) -> str:
    """The format of local ``paths`` from their names; LoadRejected when it cannot tell.

    Paths with a URI scheme (``s3a://``, ``hdfs://``) are not listed: their suffix
    decides, and a directory URI needs an explicit format.
    """
    found: set[str] = set()
    for raw in paths:
        if "://" in raw:
            fmt = _SUFFIXES.get(Path(raw.rstrip("/")).suffix)
            if fmt is None:
                raise LoadRejected(f"cannot tell the format of {raw}: give --format")
            found.add(fmt)
            continue
        path = Path(raw)
        if not path.exists():
            raise LoadRejected(f"input {raw} does not exist")
        names = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        found.update(
            _SUFFIXES[p.suffix]
            for p in names
            if p.suffix in _SUFFIXES and not p.name.startswith(("_", "."))
        )
    if len(found) != 1:
        what = "no data files" if not found else f"several formats ({', '.join(sorted(found))})"
        raise LoadRejected(f"input has {what}: give --format")
    return found.pop()


def read_input(
    spark: SparkSession, paths: Sequence[str], fmt: str = "auto", schema: str | None = None
) -> DataFrame:
    """A DataFrame over ``paths``; ``schema`` as a DDL string (``"a STRING, b LONG"``)."""
    if not paths:
        raise LoadRejected("no input given")
    fmt = detect_format(paths) if fmt == "auto" else fmt
    if fmt not in FORMATS:
        raise LoadRejected(f"unknown format {fmt!r}; known: {', '.join(FORMATS)}")
    reader = spark.read
    if schema is not None:
        reader = reader.schema(schema)
    if fmt == "csv":
        reader = reader.option("header", "true").option("inferSchema", str(schema is None))
    return reader.format(fmt).load(list(paths))


def csv_to_parquet(spark: SparkSession, csv_paths: Sequence[str], schema: str, out: str) -> None:
    """Rewrite CSV files (with a header) as one Parquet data set at ``out`` (replaced)."""
    read_input(spark, csv_paths, "csv", schema).write.mode("overwrite").parquet(out)
