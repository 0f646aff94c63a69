"""The pinned Apache Kafka: one version in the pom and the code, a cache the caller picks."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from worker.dev import kafka_install
from worker.dev.kafka_broker import cluster_id


def test_the_pom_pins_the_version_the_code_names() -> None:
    pom = kafka_install.POM.read_text()
    assert re.findall(r"<kafka.version>(.+)</kafka.version>", pom) == [kafka_install.KAFKA_VERSION]


def test_the_cache_is_where_the_environment_says(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(kafka_install.CACHE_ENV, str(tmp_path))
    assert kafka_install.libs_dir() == tmp_path / kafka_install.KAFKA_VERSION / "libs"
    assert not kafka_install.is_installed()


def test_a_fetch_already_complete_is_not_repeated(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    home = tmp_path / kafka_install.KAFKA_VERSION
    (home / "libs").mkdir(parents=True)
    (home / ".complete").write_text("done\n")
    monkeypatch.setattr(kafka_install, "_fetch", pytest.fail)
    assert kafka_install.ensure_kafka(tmp_path) == home / "libs"


def test_cluster_ids_are_22_url_safe_characters_never_starting_with_a_dash() -> None:
    for _ in range(200):
        made = cluster_id()
        assert re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]{21}", made), made
