"""Bad config, an unusable state dir, a second process: one-line errors, non-zero exits."""

from __future__ import annotations

import ctypes
import os
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from tests.integration.example_app import example_data
from tests.support.waiting import wait_until


def _run(
    args: list[str], cwd: Path, preexec_fn: Callable[[], None] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WORKER_")}
    return subprocess.run(
        [sys.executable, "-m", "worker", *args],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        env=env,
        preexec_fn=preexec_fn,
    )


def _without_root_file_powers() -> None:
    """Drop the capabilities that let root ignore file permissions (runs in the child).

    The suite runs as root on CI; without this a read-only directory is writable to it.
    PR_CAPBSET_DROP (24) for CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH and CAP_FOWNER.
    """
    libc = ctypes.CDLL(None, use_errno=True)
    for cap in (1, 2, 3):
        if libc.prctl(24, cap, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def _error_lines(result: subprocess.CompletedProcess[str]) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error:")]


def test_a_bad_config_value_exits_2_naming_the_key(tmp_path):
    result = _run(
        ["start", "--state-dir", str(tmp_path), "--set", "commit.interval.ms=0"], tmp_path
    )
    assert result.returncode == 2
    (line,) = _error_lines(result)
    assert "commit.interval.ms" in line
    assert not (tmp_path / "payments-app").exists(), "nothing may start on a bad config"


def test_an_unknown_key_in_the_config_file_exits_2(tmp_path):
    config = tmp_path / "worker.toml"
    config.write_text('application.id = "x"\ncommit.intervall.ms = 5\n')
    result = _run(["start", "--config", str(config), "--state-dir", str(tmp_path)], tmp_path)
    assert result.returncode == 2
    assert "commit.intervall.ms" in _error_lines(result)[0]


def test_a_state_dir_that_cannot_be_written_exits_1(tmp_path):
    locked = tmp_path / "read-only"
    locked.mkdir(mode=0o555)
    preexec = _without_root_file_powers if os.geteuid() == 0 else None
    result = _run(["start", "--state-dir", str(locked)], tmp_path, preexec)
    assert result.returncode == 1, result.stderr
    (line,) = _error_lines(result)
    assert str(locked) in line and "permission" in line.lower()


def test_a_state_dir_that_is_a_file_exits_1(tmp_path):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("x")
    result = _run(["start", "--state-dir", str(not_a_dir)], tmp_path)
    assert result.returncode == 1
    assert len(_error_lines(result)) == 1


@pytest.mark.integration
def test_a_second_process_on_the_same_state_dir_exits_1(own_broker, worker_factory):
    example_data(own_broker.bootstrap)
    first = worker_factory("first", settings={"bootstrap.servers": own_broker.bootstrap})
    wait_until(first.healthy, 60, message="first worker up")
    second = worker_factory(
        "second", state_dir=first.state_dir, settings={"bootstrap.servers": own_broker.bootstrap}
    )
    assert second.wait_exit(60) == 1
    assert "in use by another process" in second.logs()
    assert first.alive


@pytest.mark.integration
def test_missing_source_topics_exit_1_naming_them(own_broker, worker_factory):
    w = worker_factory("early", settings={"bootstrap.servers": own_broker.bootstrap})
    assert w.wait_exit(60) == 1
    (line,) = [x for x in w.logs().splitlines() if x.startswith("error:")]
    assert "payments" in line and "account-profiles" in line and "do not exist" in line


@pytest.mark.integration
def test_sources_that_are_not_co_partitioned_exit_1(own_broker, worker_factory):
    admin = AdminClient({"bootstrap.servers": own_broker.bootstrap})
    topics = [NewTopic("payments", 4, 1), NewTopic("account-profiles", 3, 1)]
    topics += [
        NewTopic(t, 4, 1)
        for t in (
            "merchant-reference",
            "enriched-payments",
            "payment-alerts",
            "quiet-accounts",
            "busy-accounts",
        )
    ]
    for future in admin.create_topics(topics).values():
        future.result(30)
    w = worker_factory("skewed", settings={"bootstrap.servers": own_broker.bootstrap})
    assert w.wait_exit(60) == 1
    (line,) = [x for x in w.logs().splitlines() if x.startswith("error:")]
    assert "not co-partitioned" in line
    # The joins read account-profiles beside the payments' repartition topic, which the
    # worker sizes like payments.
    hop = f"{worker_factory.application_id}-with-profile-repartition"
    assert "account-profiles=3" in line and f"{hop}=4" in line


def _example_topics(bootstrap: str, extra: list[NewTopic]) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    names = (
        "payments",
        "account-profiles",
        "merchant-reference",
        "enriched-payments",
        "payment-alerts",
        "quiet-accounts",
        "busy-accounts",
    )
    topics = [NewTopic(t, 4, 1) for t in names]
    for future in admin.create_topics(topics + extra).values():
        future.result(30)


@pytest.mark.integration
def test_a_changelog_with_the_wrong_partition_count_exits_1_naming_it(own_broker, worker_factory):
    application_id = worker_factory.application_id
    changelog = f"{application_id}-account-totals-changelog"
    _example_topics(own_broker.bootstrap, [NewTopic(changelog, 2, 1)])
    w = worker_factory("skewed", settings={"bootstrap.servers": own_broker.bootstrap})
    assert w.wait_exit(60) == 1
    (line,) = [x for x in w.logs().splitlines() if x.startswith("error:")]
    assert f"changelog {changelog} has 2 partitions, expected 4" in line


@pytest.mark.integration
def test_a_missing_changelog_is_created_unless_creation_is_off(own_broker, worker_factory):
    _example_topics(own_broker.bootstrap, [])
    changelog = f"{worker_factory.application_id}-account-totals-changelog"
    refused = worker_factory(
        "refused",
        settings={"bootstrap.servers": own_broker.bootstrap, "internal.topics.create": False},
    )
    assert refused.wait_exit(60) == 1
    (line,) = [x for x in refused.logs().splitlines() if x.startswith("error:")]
    # The first of the app's changelogs the plan checks (the versioned profiles' today).
    missing = re.search(r"changelog (\S+) does not exist and internal.topics.create is false", line)
    assert missing and missing.group(1).startswith(f"{worker_factory.application_id}-")

    created = worker_factory("created", settings={"bootstrap.servers": own_broker.bootstrap})
    created.wait_ready(90)
    admin = AdminClient({"bootstrap.servers": own_broker.bootstrap})
    topic = admin.list_topics(changelog, timeout=10).topics[changelog]
    assert topic.error is None and len(topic.partitions) == 4
    assert created.terminate() == 0


@pytest.mark.parametrize("value", ["now", "no_such_module_xyz:extract", "os:no_such_attr"])
def test_a_timestamp_extractor_that_does_not_load_exits_2_naming_the_key(tmp_path, value):
    result = _run(
        ["start", "--state-dir", str(tmp_path), "--set", f"timestamp.extractor={value}"],
        tmp_path,
    )
    assert result.returncode == 2
    (line,) = _error_lines(result)
    assert "timestamp.extractor" in line
    assert not (tmp_path / "payments-app").exists(), "nothing may start on a bad config"


@pytest.mark.integration
def test_a_broker_refusing_the_sasl_login_exits_2_with_librdkafkas_reason(
    own_broker, worker_factory
):
    """The test broker refuses every SASL handshake, as a broker refuses a wrong password
    or mechanism: the worker used to wait "for the broker" for ever with /healthz 200."""
    w = worker_factory(
        "sasl",
        settings={
            "bootstrap.servers": own_broker.bootstrap,
            "kafka.security.protocol": "SASL_PLAINTEXT",
            "kafka.sasl.mechanism": "PLAIN",
            "kafka.sasl.username": "svc",
            "kafka.sasl.password": "not-the-password",
        },
    )

    assert w.wait_exit(60) == 2
    (line,) = [x for x in w.logs().splitlines() if x.startswith("error:")]
    assert line.startswith("error: config error: kafka: the broker refused access"), line
    assert "SASL PLAIN mechanism handshake failed" in line and "not-the-password" not in line
