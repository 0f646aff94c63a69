"""``worker spark export | reconcile | submit``: read the workers' state, run jobs on a cluster.

    worker spark export account-totals --to totals.parquet
    worker spark reconcile account-totals
    worker spark submit --master spark://host:7077 -- load account-profiles --input hdfs:///h

``submit`` ships this very ``worker`` package to the executors as a zip through
spark-submit's ``--py-files`` (the executors' Python needs the worker's dependencies,
confluent-kafka and orjson, and pyarrow; not the worker itself), checks that the master
answers, and runs the job with spark-submit from the installed PySpark. Exit codes as
for loads; ``reconcile`` exits 4 when the state differs from the recomputation.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import click

from worker.config import Settings, load, parse_assignments
from worker.errors import ConfigError, WorkerError
from worker.spark.cli import DEFAULT_MASTER, EXIT_FAILED, EXIT_USAGE, fail

EXIT_DIFFERENT = 4
DEFAULT_APP = "worker.examples.payments:build"  # worker.spark.datasource's, unimported
_SUBMIT_ENTRY = Path(__file__).with_name("submit.py")


def _say(message: str) -> None:
    click.echo(f"spark: {message}", err=True)


def _session_options(command: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(
        [
            click.option("--app", default=DEFAULT_APP, show_default=True, help="module:attr"),
            click.option("--master", default=DEFAULT_MASTER, show_default=True),
            click.option("--config", type=click.Path(path_type=Path), envvar="WORKER_CONFIG"),
            click.option("--set", "sets", multiple=True, metavar="KEY=VALUE"),
        ]
    ):
        command = option(command)
    return command


def _with_session(name: str, options: dict[str, Any], job: Callable[[Any, Settings], int]) -> None:
    """Run ``job(spark, settings)`` in a session; exit with its code, or 1 on a worker error."""
    try:
        settings = load(options["config"], parse_assignments(list(options["sets"]))).settings
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)
    from worker.spark.session import session

    spark_session: Any = None
    code = 0
    try:
        _say(f"starting Spark ({options['master'] or 'from spark-submit'})")
        spark_session = session(options["master"], f"worker-{name}")
        code = job(spark_session, settings)
    except WorkerError as exc:
        fail(str(exc), EXIT_FAILED)
    except Exception as exc:  # a Spark failure: say which of ours it was, if it was
        from worker.spark.progress import first_line, worker_error

        fail(str(worker_error(exc) or first_line(exc)), EXIT_FAILED)
    finally:
        if spark_session is not None:
            spark_session.stop()
    sys.exit(code)


@click.command("export")
@click.argument("store")
@click.option("--to", "path", required=True, help="Parquet output (a directory; replaced).")
@click.option(
    "--timestamp-column",
    help="Add a column of this name holding each row's record time (a versioned table:"
    " the time its latest version is valid from).",
)
@_session_options
def export(store: str, path: str, timestamp_column: str | None, **options: Any) -> None:
    """Write a store (or table) as the workers hold it to Parquet."""

    def job(spark: Any, settings: Settings) -> int:
        from worker.spark.export import export_store

        result = export_store(
            spark,
            store,
            path,
            settings,
            app=options["app"],
            timestamp_column=timestamp_column,
            progress=_say,
        )
        click.echo(f"exported {store} to {path}: {result.describe()}")
        return 0

    _with_session(f"export-{store}", options, job)


@click.command("reconcile")
@click.argument("store", type=click.Choice(["account-totals"]))
@click.option("--show", default=10, show_default=True, help="Differing keys to list.")
@_session_options
def reconcile(store: str, show: int, **options: Any) -> None:
    """Recompute a store from its input topic and compare it with the workers' state."""

    def job(spark: Any, settings: Settings) -> int:
        from worker.spark.export import reconcile_account_totals

        result = reconcile_account_totals(spark, settings, app=options["app"], show=show)
        click.echo(f"{store}: {result.describe()}")
        for key, recomputed, state in result.examples:
            click.echo(f"  {key}: recomputed {recomputed}, state {state}")
        return 0 if result.equal else EXIT_DIFFERENT

    _with_session(f"reconcile-{store}", options, job)


@click.command(
    "submit", context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False}
)
@click.option("--master", required=True, help="spark://host:port, yarn, k8s://..., local[N].")
@click.option("--conf", "confs", multiple=True, metavar="KEY=VALUE", help="Spark settings.")
@click.option(
    "--python",
    default=sys.executable,
    show_default=True,
    help="The executors' Python (spark.pyspark.python): one with the worker's dependencies.",
)
@click.option("--dry-run", is_flag=True, help="Print the spark-submit line and exit.")
@click.argument("job", nargs=-1, required=True, type=click.UNPROCESSED)
def submit(
    master: str, confs: tuple[str, ...], python: str, dry_run: bool, job: tuple[str, ...]
) -> None:
    """Run a job (load ..., export ..., reconcile ...) on a Spark cluster through spark-submit."""
    if job[0] not in ("load", "export", "reconcile"):
        fail(f"unknown job {job[0]!r}: load, export or reconcile", EXIT_USAGE)
    with tempfile.TemporaryDirectory(prefix="worker-submit-") as scratch:
        archive = package_archive(Path(scratch))
        argv = [spark_submit(), "--master", master, "--name", f"worker-{'-'.join(job[:2])}"]
        argv += ["--py-files", str(archive), "--conf", f"spark.pyspark.python={python}"]
        argv += ["--conf", "spark.log.level=WARN", "--conf", "spark.ui.showConsoleProgress=false"]
        for conf in confs:
            argv += ["--conf", conf]
        argv += [str(_SUBMIT_ENTRY), *job]
        if dry_run:
            click.echo(subprocess.list2cmdline(argv))
            return
        problem = unreachable(master)
        if problem:
            fail(problem, EXIT_FAILED)
        _say(f"submitting to {master} with {archive.name} ({archive.stat().st_size:,} bytes)")
        sys.exit(subprocess.run(argv, env=os.environ.copy(), check=False).returncode)


def package_archive(directory: Path) -> Path:
    """A zip of the ``worker`` package as imported here, for ``--py-files``."""
    import worker

    root = Path(worker.__file__).resolve().parent
    target = directory / "worker.zip"
    with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(root.rglob("*")):
            if path.is_file() and "__pycache__" not in path.parts and path.suffix != ".pyc":
                archive.write(path, Path("worker") / path.relative_to(root))
    return target


def spark_submit() -> str:
    """spark-submit of the installed PySpark, else the one on PATH."""
    import importlib.util

    spec = importlib.util.find_spec("pyspark")
    if spec is not None and spec.origin is not None:
        bundled = Path(spec.origin).parent / "bin" / "spark-submit"
        if bundled.exists():
            return str(bundled)
    found = shutil.which("spark-submit")
    if found is None:
        fail("no spark-submit: pip install 'worker[spark]'", EXIT_FAILED)
    return found


def unreachable(master: str, timeout: float = 5.0) -> str:
    """Why a standalone master (``spark://host:port``) does not answer, or "" if it does
    (other masters are left to spark-submit)."""
    if not master.startswith("spark://"):
        return ""
    for address in master[len("spark://") :].split(","):
        host, _, port = address.rpartition(":")
        try:
            with socket.create_connection((host, int(port)), timeout=timeout):
                return ""
        except (OSError, ValueError) as exc:
            problem = f"cannot reach the Spark master at {address}: {exc}"
    return f"{problem}; start it, or fix --master"


COMMANDS = (export, reconcile, submit)
