"""``worker state repair``: write a tombstone or a corrected value for one key of a store's
changelog, the way out when a value the application cannot decode poisons its key.

Wiping a task does not help such a key: its restore reads the bad value back from the
changelog. The repair finds the key's latest record in ``<application.id>-<store>-changelog``
(reading each partition to its end), shows it, asks, and appends the new record to the
same partition (:mod:`worker.kafka.changelog_repair`). Every restore from then on applies
it after the bad value. Keys and values are the raw bytes the changelog holds (the
store's serde output): ``--key``/``--value`` take UTF-8 text, ``--key-hex``/``--value-hex``
and ``--value-file`` anything. docs/operations.md walks through the poisoned-key case.

Exit codes: 0 written, 1 a runtime problem (no broker, no such topic, key not found,
declined), 2 bad usage or configuration.
"""

from __future__ import annotations

from pathlib import Path

import click

from worker.config import Settings
from worker.kafka.changelog_repair import (
    KeyRecord,
    RepairFailed,
    append_record,
    latest_records,
    partition_count,
)
from worker.tools.state import config_option, fail, logs_to_stderr, set_option, tool_settings

_SHOWN_BYTES = 120


def _raw(text: str | None, hex_text: str | None, what: str) -> bytes | None:
    if text is not None and hex_text is not None:
        fail(f"give --{what} or --{what}-hex, not both", 2)
    if hex_text is not None:
        try:
            return bytes.fromhex(hex_text)
        except ValueError:
            fail(f"--{what}-hex: not hexadecimal: {hex_text!r}", 2)
    return None if text is None else text.encode("utf-8")


def _new_value(
    delete: bool, value: str | None, value_hex: str | None, value_file: Path | None
) -> bytes | None:
    given = [delete, value is not None, value_hex is not None, value_file is not None]
    if sum(given) != 1:
        fail("give exactly one of --delete, --value, --value-hex, --value-file", 2)
    if value_file is not None:
        try:
            return value_file.read_bytes()
        except OSError as exc:
            fail(f"--value-file: {exc}", 2)
    return _raw(value, value_hex, "value")


def _show(data: bytes | None) -> str:
    if data is None:
        return "a tombstone"
    more = "..." if len(data) > _SHOWN_BYTES else ""
    return f"{len(data)} bytes {data[:_SHOWN_BYTES]!r}{more}"


@click.command("repair")
@config_option
@set_option
@click.argument("store")
@click.option("--key", help="The key as UTF-8 text.")
@click.option("--key-hex", help="The key's bytes in hexadecimal.")
@click.option("--delete", is_flag=True, help="Write a tombstone: the key is deleted.")
@click.option("--value", help="The corrected value as UTF-8 text.")
@click.option("--value-hex", help="The corrected value's bytes in hexadecimal.")
@click.option(
    "--value-file", type=click.Path(path_type=Path, dir_okay=False), help="The value's bytes."
)
@click.option("--partition", type=click.IntRange(min=0), help="Skip the search: this one.")
@click.option("--topic", help="The changelog (default: <application.id>-<STORE>-changelog).")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@click.option(
    "--timeout",
    default=60.0,
    show_default=True,
    type=click.FloatRange(min=1),
    help="Seconds for reading the changelog and for the write's acknowledgement.",
)
def repair(
    config: Path | None,
    sets: tuple[str, ...],
    store: str,
    key: str | None,
    key_hex: str | None,
    delete: bool,
    value: str | None,
    value_hex: str | None,
    value_file: Path | None,
    partition: int | None,
    topic: str | None,
    yes: bool,
    timeout: float,
) -> None:
    """Write a tombstone or a corrected value for one key of STORE's changelog."""
    raw_key = _raw(key, key_hex, "key")
    if raw_key is None:
        fail("give the key: --key or --key-hex", 2)
    new_value = _new_value(delete, value, value_hex, value_file)
    settings = tool_settings(config, sets)
    changelog = topic or f"{settings.application_id}-{store}-changelog"
    target, current = _locate(settings, changelog, raw_key, partition, timeout)
    where = f"{changelog}[{target}]"
    now = (
        "not in the partition"
        if current is None
        else f"{_show(current.value)} at offset {current.offset}"
    )
    click.echo(f"key {raw_key!r} in {where}: {now}")
    if not yes and not click.confirm(f"Append {_show(new_value)} for it?"):
        fail("nothing written", 1)
    try:
        with logs_to_stderr():
            offset = append_record(settings, changelog, target, raw_key, new_value, timeout)
    except RepairFailed as exc:
        fail(str(exc), 1)
    click.echo(f"wrote {_show(new_value)} to {where} at offset {offset}")
    click.echo(
        "a restore now applies it after the old value; instances whose task directory for"
        f" partition {target} already holds the old value keep it until that task is wiped"
        " (worker state wipe) or the key is written again"
    )


def _locate(
    settings: Settings, changelog: str, key: bytes, partition: int | None, timeout: float
) -> tuple[int, KeyRecord | None]:
    """The partition to write to, and the key's latest record there (None: not found)."""
    try:
        with logs_to_stderr():
            count = partition_count(settings, changelog, min(timeout, 15.0))
            if partition is not None and partition >= count:
                fail(f"--partition {partition}: {changelog} has {count} partitions", 2)
            wanted = [partition] if partition is not None else list(range(count))
            found = latest_records(settings, changelog, key, wanted, timeout)
    except RepairFailed as exc:
        fail(str(exc), 1)
    if partition is not None:
        return partition, found.get(partition)
    if not found:
        fail(f"key {key!r} is in no partition of {changelog}; give --partition to write anyway", 1)
    if len(found) > 1:
        fail(f"key {key!r} is in partitions {sorted(found)} of {changelog}; give --partition", 1)
    (record,) = found.values()
    return record.partition, record
