"""The ``worker`` command line: parse, load config, hand over. One-line errors, set exit codes.

Exit codes: 0 success; 1 a runtime error (state dir in use or unusable, topics missing);
2 bad configuration or usage (the message names the key).
"""

from __future__ import annotations

import importlib
import os
import signal
import sys
from pathlib import Path
from typing import Any, NoReturn

import click
from pydantic import SecretStr

from worker import __version__
from worker.config import (
    REDACTED,
    LoadedSettings,
    is_secret,
    load,
    parse_assignments,
)
from worker.dsl import StreamsBuilder
from worker.errors import ConfigError, TopologyError, WorkerError
from worker.kafka.client_config import check_passthrough
from worker.observability import configure_logging, get_logger
from worker.processing.built_topology import BuiltTopology
from worker.processing.topology import Topology
from worker.runtime.settings_checks import check_settings

DEFAULT_APP = "worker.examples.payments:build"


def _fail(message: str, code: int) -> NoReturn:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


def _load_settings(
    config: Path | None, sets: tuple[str, ...], state_dir: Path | None
) -> LoadedSettings:
    """Every layer loaded and validated, the ``kafka.*`` settings by librdkafka too.

    Raises:
        ConfigError: naming the bad key.
    """
    overrides = parse_assignments(list(sets))
    if state_dir is not None:
        overrides["state.dir"] = str(state_dir)
    loaded = load(config, overrides)
    check_passthrough(loaded.settings)
    return loaded


def _checked_settings(
    config: Path | None, sets: tuple[str, ...], state_dir: Path | None
) -> LoadedSettings:
    """:func:`_load_settings` and every check ``worker start`` makes before it starts
    (``worker.runtime.settings_checks``): ``start`` and ``config show`` call this one.

    Raises:
        ConfigError: naming the bad key.
    """
    loaded = _load_settings(config, sets, state_dir)
    check_settings(loaded.settings)
    return loaded


def load_topology(spec: str, application_id: str) -> BuiltTopology:
    """Import ``module:attr``; attr is a Topology or a DSL ``StreamsBuilder``, or a
    callable returning one. A builder is built here with ``application_id`` (it names the
    repartition topics); a Topology the DSL built for another application id is refused."""
    module_name, _, attr = spec.partition(":")
    if not module_name or not attr:
        raise ConfigError("--app", f"expected module:attr, got {spec!r}")
    try:
        target: Any = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise ConfigError("--app", f"cannot load {spec}: {exc}") from exc
    topology = (
        target()
        if callable(target) and not isinstance(target, Topology | StreamsBuilder)
        else target
    )
    if isinstance(topology, StreamsBuilder):
        topology = topology.build(application_id)
    if not isinstance(topology, Topology):
        raise ConfigError("--app", f"{spec} is not a Topology or a StreamsBuilder")
    built_for = getattr(topology, "application_id", None)
    if built_for is not None and built_for != application_id:
        raise ConfigError(
            "--app",
            f"{spec} was built for application.id {built_for!r}, the worker runs"
            f" {application_id!r}: hand over the StreamsBuilder, or build it with that id",
        )
    return topology.build()


config_option = click.option(
    "--config",
    "config",
    type=click.Path(path_type=Path),
    envvar="WORKER_CONFIG",
    help="TOML settings file (see config/worker.toml).",
)
set_option = click.option(
    "--set", "sets", multiple=True, metavar="KEY=VALUE", help="Override a setting; repeatable."
)


@click.group()
@click.version_option(__version__, prog_name="worker")
def main() -> None:
    """A stateful stream-processing worker: local RocksDB state backed by Kafka changelogs."""


@main.command()
@config_option
@set_option
@click.option("--state-dir", type=click.Path(path_type=Path), envvar="WORKER_STATE_DIR")
@click.option(
    "--app",
    default=DEFAULT_APP,
    envvar="WORKER_APP",
    show_default=True,
    help="The topology to run, as module:attr.",
)
def start(config: Path | None, sets: tuple[str, ...], state_dir: Path | None, app: str) -> None:
    """Run the worker until SIGTERM or SIGINT."""
    try:
        loaded = _checked_settings(config, sets, state_dir)
        topology = load_topology(app, loaded.settings.application_id)
    except ConfigError as exc:
        _fail(str(exc), 2)
    except TopologyError as exc:
        _fail(f"topology: {exc}", 2)
    settings = loaded.settings
    configure_logging(settings.log_level, settings.log_format)
    if loaded.ignored_env:
        get_logger().warning("config.env_ignored", names=loaded.ignored_env)
    from worker.runtime.worker import Worker  # after validation: bad config fails fast

    worker = Worker(settings, topology)
    _install_signal_handlers(worker.request_stop)
    try:
        code = worker.run()
    except ConfigError as exc:  # found at start: the HTTP token and TLS files
        _fail(str(exc), 2)
    except WorkerError as exc:
        _fail(str(exc), 1)
    sys.exit(code)


def _install_signal_handlers(stop: Any) -> None:
    """First SIGTERM/SIGINT: graceful stop. Second: exit at once. SIGHUP: ignored."""
    received = {"count": 0}

    def handle(signum: int, _frame: Any) -> None:
        received["count"] += 1
        if received["count"] > 1:
            os._exit(128 + signum)
        stop()

    signal.signal(signal.SIGTERM, handle)
    signal.signal(signal.SIGINT, handle)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)


@main.command()
def version() -> None:
    """Print the worker's version."""
    click.echo(f"worker {__version__}")


@main.group("config")
def config_group() -> None:
    """Inspect configuration."""


@config_group.command("show")
@config_option
@set_option
@click.option(
    "--show-secrets",
    is_flag=True,
    help="Print passwords, tokens and keys instead of <redacted>.",
)
def config_show(config: Path | None, sets: tuple[str, ...], show_secrets: bool) -> None:
    """Print the effective settings and where each value came from.

    Secrets (any key naming a password, secret, token or private key) are redacted
    unless --show-secrets is given.
    """
    try:
        loaded = _checked_settings(config, sets, None)
    except ConfigError as exc:
        _fail(str(exc), 2)
    values = {k: _shown(v) for k, v in loaded.settings.model_dump(by_alias=True).items()}
    values.pop("kafka")
    values.update({f"kafka.{k}": v for k, v in loaded.settings.kafka.items()})
    for key in sorted(k for k in values if not k.startswith("kafka.")) + sorted(
        k for k in values if k.startswith("kafka.")
    ):
        value = REDACTED if is_secret(key) and not show_secrets else values[key]
        click.echo(f"{key} = {value}    # {loaded.sources.get(key, 'default')}")
    bound = loaded.settings.memory_bound_bytes
    click.echo(
        f"# memory bound: {'none (statestore.uncommitted.max.bytes=-1)' if bound is None else bound}"
        " = rocksdb.memory.bytes + 2 x statestore.uncommitted.max.bytes"
        " + input.buffer.max.bytes + output.buffer.max.bytes"
    )


def _shown(value: object) -> str:
    """A setting as the user wrote it: pydantic masks a SecretStr as stars, which would
    make --show-secrets print the stars."""
    return value.get_secret_value() if isinstance(value, SecretStr) else str(value)


from worker.dev.commands import dev  # noqa: E402  (registers the dev group)
from worker.tools.repair import repair  # noqa: E402  (`worker state repair`)
from worker.tools.state import state  # noqa: E402  (`worker state list|wipe`)

state.add_command(repair)

main.add_command(dev)
main.add_command(state)
main.add_command(importlib.import_module("worker.spark.cli").spark)  # worker spark load ...
