"""``worker spark``: the table loaders, in local mode or through spark-submit.

    worker spark load account-profiles --input history/
    worker spark load table --input users.parquet --topic users --key-column id \\
        --value-columns name,email --partitions 8 --create --mode upsert
    worker spark load table --input profiles/ --topic account-profiles --key-column account \\
        --value-columns mean,std,n --timestamp-column valid_from --mode upsert
    worker spark load account-profiles --input hdfs:///history --master yarn --print-submit

``export``, ``reconcile`` and ``submit`` live in ``worker.spark.cli_jobs`` and join the
group here. pyspark is imported only when a job runs, so the worker runs without the
spark extra. Progress goes to stderr; the final counts to stdout. Exit codes: 0 every
change committed; 1 the load failed while writing (a partition's transaction did not
commit), or Spark, Java or the broker is unavailable; 2 bad configuration or usage; 3
the load was rejected by its checks and nothing was written.
"""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NoReturn

import click
from click.core import ParameterSource

from worker.config import Settings, load, parse_assignments
from worker.errors import ConfigError, WorkerError
from worker.examples import payments as app

DEFAULT_MASTER = "local[2]"  # worker.spark.session.DEFAULT_MASTER, without importing it
EXIT_FAILED, EXIT_USAGE, EXIT_REJECTED = 1, 2, 3
_SUBMIT_ENTRY = Path(__file__).with_name("submit.py")


def fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _progress(message: str) -> None:
    click.echo(f"spark load: {message}", err=True)


def _common(command: Callable[..., Any]) -> Callable[..., Any]:
    """Options every load shares: input, target checks, Spark master, settings."""
    options = [
        click.option(
            "--input",
            "inputs",
            multiple=True,
            required=True,
            help="A file or directory (local path or URI); repeatable.",
        ),
        click.option(
            "--format",
            "fmt",
            type=click.Choice(["auto", "parquet", "csv", "json"]),
            default="auto",
            show_default=True,
            help="Input format; auto: from the file names.",
        ),
        click.option(
            "--partitions",
            type=click.IntRange(min=1),
            help="The partition count the topic must have (and is created with).",
        ),
        click.option("--create", is_flag=True, help="Create the topic (compacted) if missing."),
        click.option(
            "--mode",
            type=click.Choice(["snapshot", "upsert"]),
            default="snapshot",
            show_default=True,
            help="snapshot: the input is the whole table (changed rows upserted, vanished keys"
            " deleted, unchanged rows not written); upsert: write every row, delete nothing.",
        ),
        click.option(
            "--master",
            default=DEFAULT_MASTER,
            show_default=True,
            help="Spark master; '' leaves it to spark-submit.",
        ),
        click.option(
            "--print-submit",
            is_flag=True,
            help="Print the spark-submit command running this load on a cluster, and exit.",
        ),
        click.option("--config", type=click.Path(path_type=Path), envvar="WORKER_CONFIG"),
        click.option("--set", "sets", multiple=True, metavar="KEY=VALUE"),
    ]
    for option in reversed(options):
        command = option(command)
    return command


@click.group()
def spark() -> None:
    """Spark jobs: load tables, export and reconcile state, run on a cluster (the spark
    extra: pyspark, pyarrow, Java 17)."""


@spark.group("load")
def load_group() -> None:
    """Compute a table with Spark and write it into its compacted topic."""


@load_group.command("account-profiles")
@_common
@click.option(
    "--co-partition-with",
    "co_partition_with",
    multiple=True,
    default=[app.PAYMENTS],
    show_default=True,
    help="Topics whose partition count the table's must equal; repeatable.",
)
@click.option("--no-co-partition", is_flag=True, help="Do not check against other topics.")
def account_profiles(
    co_partition_with: tuple[str, ...], no_co_partition: bool, **common: Any
) -> None:
    """The example app's `account-profiles`: mean, spread and count of each account's payments."""
    topics = () if no_co_partition else co_partition_with

    def job(session: Any, settings: Settings) -> Any:
        from worker.spark.profiles import load_account_profiles

        return load_account_profiles(
            session,
            common["inputs"],
            settings,
            fmt=common["fmt"],
            partitions=common["partitions"],
            co_partition_with=topics,
            create=common["create"],
            mode=common["mode"],
            progress=_progress,
        )

    _run(app.PROFILES, topics, job, common)


@load_group.command("table")
@_common
@click.option("--topic", required=True, help="The table's topic.")
@click.option("--key-column", required=True)
@click.option("--value-column", help="One column holds the value (null: delete the key).")
@click.option("--value-columns", help="Comma-separated columns making a dict value.")
@click.option("--key-serde", default="str", show_default=True, help="str, bytes or json.")
@click.option("--value-serde", default="json", show_default=True, help="str, bytes or json.")
@click.option("--schema", help="Input schema as DDL, e.g. 'id STRING, n LONG' (CSV, JSON).")
@click.option(
    "--co-partition-with",
    "co_partition_with",
    multiple=True,
    help="Topics whose partition count the table's must equal; repeatable.",
)
@click.option("--allow-duplicate-keys", is_flag=True, help="Skip the unique-key check.")
@click.option(
    "--timestamp-column",
    help="Stamp each record with this column's time (a timestamp, epoch milliseconds or"
    " ISO-8601 with an offset) instead of the load's: the event time a versioned table"
    " serves it from. With --mode upsert a key may have one row per time (a history).",
)
def table(
    topic: str,
    key_column: str,
    value_column: str | None,
    value_columns: str | None,
    key_serde: str,
    value_serde: str,
    schema: str | None,
    co_partition_with: tuple[str, ...],
    allow_duplicate_keys: bool,
    timestamp_column: str | None,
    **common: Any,
) -> None:
    """Any table: one row per key from Parquet, CSV or JSON files."""
    if (value_column is None) == (value_columns is None):
        fail("give exactly one of --value-column and --value-columns", EXIT_USAGE)
    value: str | list[str] = value_column or [
        c.strip() for c in (value_columns or "").split(",") if c.strip()
    ]

    def job(session: Any, settings: Settings) -> Any:
        from worker.spark.files import read_input
        from worker.spark.load import load_table

        return load_table(
            read_input(session, common["inputs"], common["fmt"], schema),
            topic,
            key_column,
            value,
            settings,
            key_serde=key_serde,
            value_serde=value_serde,
            partitions=common["partitions"],
            co_partition_with=co_partition_with,
            create=common["create"],
            check_unique_keys=not allow_duplicate_keys,
            timestamp_column=timestamp_column,
            mode=common["mode"],
            progress=_progress,
        )

    _run(topic, co_partition_with, job, common)


def _run(
    topic: str,
    co_partition_with: tuple[str, ...],
    job: Callable[[Any, Settings], Any],
    common: dict[str, Any],
) -> None:
    """Validate settings, then print the spark-submit line or run ``job`` and report.

    The target topic is checked before Spark starts (seconds), so a wrong partition count
    is reported at once; the job checks it again with everything else.
    """
    try:
        settings = load(common["config"], parse_assignments(list(common["sets"]))).settings
    except ConfigError as exc:
        fail(str(exc), EXIT_USAGE)
    if common["print_submit"]:
        click.echo(submit_command(click.get_current_context(), common["master"]))
        return
    from worker.kafka.admin import Admin
    from worker.spark.errors import LoadRejected
    from worker.spark.session import require_spark, session
    from worker.spark.target import check_target

    spark_session: Any = None
    try:
        require_spark()
        check_target(
            Admin(settings),
            topic,
            partitions=common["partitions"],
            co_partition_with=co_partition_with,
            create=common["create"],
        )
        _progress(f"starting Spark ({common['master'] or 'from spark-submit'})")
        spark_session = session(common["master"], f"worker-load-{topic}")
        result = job(spark_session, settings)
    except LoadRejected as exc:
        fail(f"load rejected, nothing written: {exc}", EXIT_REJECTED)
    except WorkerError as exc:  # LoadIncomplete, KafkaUnavailable, SparkUnavailable
        fail(str(exc), EXIT_FAILED)
    finally:
        if spark_session is not None:
            spark_session.stop()
    click.echo(
        f"loaded {result.rows} rows into {result.target.topic}"
        f" ({result.describe()}) in {result.seconds:.1f}s,"
        f" {result.rows_per_second:,.0f} rows/s"
    )


def submit_command(ctx: click.Context, master: str) -> str:
    """The spark-submit line that runs the command of ``ctx`` with the same options.

    Every node needs ``worker[spark]`` installed; ``spark.pyspark.python`` names this
    interpreter and may need changing for the cluster's.
    """
    argv = ["spark-submit"]
    if master:
        argv += ["--master", master]
    argv += ["--name", f"worker-load-{ctx.info_name}"]
    argv += ["--conf", f"spark.pyspark.python={sys.executable}", str(_SUBMIT_ENTRY)]
    names: list[str] = []  # the command's path below the `spark` group: load <command>
    current: click.Context | None = ctx
    while current is not None and current.command is not spark:
        names.insert(0, str(current.info_name))
        current = current.parent
    return shlex.join([*argv, *names, *replay_options(ctx)])


def replay_options(ctx: click.Context) -> list[str]:
    """The options of ``ctx`` given on the command line or by environment, as arguments.

    ``--master`` and ``--print-submit`` are left out (spark-submit owns the master);
    ``--config`` becomes an absolute path.
    """
    args: list[str] = []
    for param in ctx.command.params:
        if not isinstance(param, click.Option) or param.name in ("master", "print_submit"):
            continue
        source = ctx.get_parameter_source(str(param.name))
        if source in (None, ParameterSource.DEFAULT, ParameterSource.DEFAULT_MAP):
            continue
        value = ctx.params[str(param.name)]
        if value is None or value is False:
            continue
        flag = max(param.opts, key=len)
        if param.is_flag:
            args.append(flag)
        elif param.multiple:
            for item in value:
                args += [flag, str(item)]
        else:
            args += [flag, str(Path(value).resolve()) if param.name == "config" else str(value)]
    return args


def _add_jobs() -> None:
    from worker.spark import cli_jobs  # imports this module: add its commands once it is whole

    for command in cli_jobs.COMMANDS:
        spark.add_command(command)


_add_jobs()
