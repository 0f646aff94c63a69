"""``worker dev``: the embedded broker, sample data and the demo."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from worker.config import load, parse_assignments
from worker.dev.broker import BrokerProcess, EmbeddedBroker
from worker.dev.kafka_broker import KafkaBroker
from worker.errors import ConfigError, WorkerError


@click.group()
def dev() -> None:
    """Developer tools: a local broker, sample data, the demo."""


@dev.command()
@click.option("--port", default=9092, show_default=True, help="Loopback port to listen on.")
@click.option(
    "--kafka",
    is_flag=True,
    help="Run Apache Kafka (KRaft, on disk in a temporary directory; needs java and, the "
    "first time, mvn) instead of the embedded in-memory broker.",
)
def broker(port: int, kafka: bool) -> None:
    """Run a broker on 127.0.0.1 in the foreground: the embedded Kafka-compatible one (in
    memory), or Apache Kafka with --kafka. It stops with this command, even on SIGKILL."""
    running: BrokerProcess = (
        KafkaBroker(port=port, die_with_parent=True)
        if kafka
        else EmbeddedBroker(port=port, die_with_parent=True)
    )

    def ready() -> None:
        click.echo(f"broker listening on {running.bootstrap} (pid {running.pid}); Ctrl-C to stop")

    try:
        code = running.serve(ready)
    except WorkerError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    if code != 0:
        click.echo(f"error: broker exited with code {code}", err=True)
        sys.exit(1)


@dev.command("sample-data")
@click.option("--config", type=click.Path(path_type=Path))
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE")
@click.option("--accounts", default=200, show_default=True)
@click.option("--payments", default=0, show_default=True, help="Also produce this many payments.")
@click.option("--partitions", default=4, show_default=True)
def sample_data(
    config: Path | None, sets: tuple[str, ...], accounts: int, payments: int, partitions: int
) -> None:
    """Create the example app's topics and load account profiles, the merchants' reference
    data (and optionally payments)."""
    from worker.dev import demo

    try:
        settings = load(config, parse_assignments(list(sets))).settings
    except ConfigError as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    loaded = demo.load_sample_data(settings, accounts, payments, partitions)
    click.echo(
        f"loaded {loaded['profiles']} profiles, {loaded['merchants']} merchants' reference"
        f" data and {loaded['payments']} payments"
    )


@dev.command()
@click.option(
    "--duration",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=1.0),
    help="Seconds of payment traffic.",
)
@click.option(
    "--rate",
    default=500,
    show_default=True,
    type=click.IntRange(min=1),
    help="Payments per second.",
)
@click.option(
    "--workdir",
    type=click.Path(path_type=Path, file_okay=False),
    default=Path(".demo"),
    show_default=True,
    help="Logs and state of this run (emptied first).",
)
@click.option(
    "--kafka",
    is_flag=True,
    help="Run it on Apache Kafka (needs java and, the first time, mvn) instead of the "
    "embedded broker.",
)
def demo(duration: float, rate: int, workdir: Path, kafka: bool) -> None:
    """Start a broker, load sample data, run workers over generated payments, summarise.

    Two workers start; a quarter of the way in one is killed (kill -9) and restarted over
    its state, past half way a third joins. The summary shows per task its longest stall
    and the records restored. Exits 0 when the workers' output matches a plain-Python
    reference computation and every worker stopped cleanly; 1 otherwise; 128+N when stopped by signal N (Ctrl-C: 130).
    Every process it starts is stopped by its PID, whatever happens.
    """
    from worker.dev import demo as demo_module

    code = demo_module.run_demo(duration, rate, workdir, kafka=kafka)
    sys.exit(code)


@dev.command()
@click.option(
    "--out",
    required=True,
    type=click.Path(path_type=Path, file_okay=False),
    help="Directory for the files (created; files of an earlier run replaced).",
)
@click.option("--accounts", default=200, show_default=True, type=click.IntRange(min=1))
@click.option(
    "--per-account",
    default=50,
    show_default=True,
    type=click.IntRange(min=1),
    help="Payments per account.",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["csv", "json", "parquet"]),
    default="csv",
    show_default=True,
)
@click.option("--files", default=4, show_default=True, type=click.IntRange(min=1))
@click.option("--seed", default=23, show_default=True)
def history(out: Path, accounts: int, per_account: int, fmt: str, files: int, seed: int) -> None:
    """Write historical payments: the input of `worker spark load account-profiles`.

    Parquet is written through Spark (the spark extra); CSV and JSON lines need nothing.
    """
    from worker.dev.history import HistoryError, write_history

    try:
        written = write_history(out, accounts, per_account, fmt, files, seed)
    except (HistoryError, WorkerError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(1)
    click.echo(f"wrote {written.rows} payments of {written.accounts} accounts to {out} ({fmt})")
