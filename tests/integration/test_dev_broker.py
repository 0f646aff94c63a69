"""``worker dev broker`` stops the broker it started when it is stopped itself, and on
Linux the broker dies with it even when it is SIGKILLed."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys

import pytest

from tests.support.ports import PortRegistry
from tests.support.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.duration(5)]


def alive(pid: int) -> bool:
    """True while ``pid`` exists and is not a zombie waiting for its parent."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(
    "signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGINT, signal.SIGKILL], ids=str
)
def test_a_signal_to_the_dev_broker_command_stops_its_broker_child(
    ports: PortRegistry, signum: int
) -> None:
    _signal_stops_the_broker_child(ports, signum, [])


@pytest.mark.duration(20)
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL], ids=str)
def test_a_signal_to_the_dev_broker_command_stops_its_kafka_broker(
    ports: PortRegistry, signum: int
) -> None:
    _signal_stops_the_broker_child(ports, signum, ["--kafka"])


def _signal_stops_the_broker_child(ports: PortRegistry, signum: int, args: list[str]) -> None:
    """Start ``worker dev broker`` (with ``args``), send ``signum``, see its child exit."""
    command = subprocess.Popen(
        [sys.executable, "-m", "worker", "dev", "broker", "--port", str(ports.take()), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    child: int | None = None
    try:
        assert command.stdout is not None
        line = command.stdout.readline()  # printed once the broker listens
        match = re.search(r"\(pid (\d+)\)", line)
        assert match, (
            f"no pid in {line!r}; stderr: {command.stderr.read() if command.stderr else ''}"
        )
        child = int(match.group(1))
        assert alive(child)

        command.send_signal(signum)

        expected = -signal.SIGKILL if signum == signal.SIGKILL else 0  # SIGKILL: no stop
        assert command.wait(timeout=60) == expected
        wait_until(
            lambda: not alive(child), 15, 0.05, f"broker pid {child} to exit with the command"
        )
    finally:
        if command.poll() is None:
            command.kill()
            command.wait()
        if child is not None and alive(child):
            os.kill(child, signal.SIGKILL)
