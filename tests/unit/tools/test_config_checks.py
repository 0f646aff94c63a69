"""``worker config show`` keeps secrets out of sight, and a ``kafka.*`` setting librdkafka
rejects is a one-line config error (exit 2 naming the key) for every command."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.unit.tools.test_state_cli import run
from worker.config import is_secret, load
from worker.errors import ConfigError
from worker.kafka.client_config import check_passthrough

SECRETS = {
    "kafka.sasl.password": "s3cr3t-pw",
    "kafka.ssl.key.password": "key-pw",
    "kafka.ssl.key.pem": "-----BEGIN PRIVATE KEY-----",
    "kafka.sasl.oauthbearer.client.secret": "oauth-secret",
}


def shown(result_stdout: str) -> dict[str, str]:
    return {
        key: value.split("    #")[0]
        for key, value in (
            line.split(" = ", 1) for line in result_stdout.splitlines() if " = " in line
        )
    }


def test_config_show_redacts_every_secret_from_every_layer(tmp_path: Path) -> None:
    config = tmp_path / "worker.toml"
    config.write_text('[kafka]\n"sasl.password" = "s3cr3t-pw"\n"sasl.username" = "svc"\n')
    result = run(
        "config", "show", "--config", str(config),
        "--set", "kafka.ssl.key.password=key-pw",
        "--set", "kafka.ssl.key.pem=-----BEGIN PRIVATE KEY-----",
        "--set", "kafka.sasl.oauthbearer.client.secret=oauth-secret",
        env={"WORKER_KAFKA_SASL_MECHANISM": "PLAIN"},
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    values = shown(result.stdout)
    for key, secret in SECRETS.items():
        assert values[key] == "<redacted>"
        assert secret not in result.stdout + result.stderr
    assert values["kafka.sasl.username"] == "svc"
    assert values["kafka.sasl.mechanism"] == "PLAIN"


def test_config_show_prints_secrets_when_asked(tmp_path: Path) -> None:
    sets = [arg for key, value in SECRETS.items() for arg in ("--set", f"{key}={value}")]
    token = "a-query-token-of-some-length"
    result = run(
        "config", "show", "--show-secrets", *sets, env={"WORKER_HTTP_AUTH_TOKEN": token}
    )  # fmt: skip

    assert result.returncode == 0, result.stderr
    values = shown(result.stdout)
    assert {key: values[key] for key in SECRETS} == SECRETS
    assert values["http.auth.token"] == token


def test_config_show_redacts_the_query_token() -> None:
    token = "a-query-token-of-some-length"
    result = run("config", "show", env={"WORKER_HTTP_AUTH_TOKEN": token})

    assert result.returncode == 0, result.stderr
    assert shown(result.stdout)["http.auth.token"] == "<redacted>"
    assert token not in result.stdout + result.stderr


@pytest.mark.parametrize(
    "command",
    [("config", "show"), ("start",), ("state", "list", "--no-lag")],
    ids=["config-show", "start", "state-list"],
)
@pytest.mark.parametrize(
    ("setting", "named"),
    [
        ("kafka.no.such.property=1", "kafka.no.such.property"),
        ("kafka.auto.offset.reset=sometimes", "kafka.auto.offset.reset"),
    ],
)
def test_a_setting_librdkafka_rejects_is_a_config_error_naming_it(
    tmp_path: Path, command: tuple[str, ...], setting: str, named: str
) -> None:
    result = run(
        *command, "--set", setting, "--set", "kafka.sasl.password=s3cr3t-pw",
        "--set", "bootstrap.servers=127.0.0.1:1",
        env={"WORKER_STATE_DIR": str(tmp_path)},
    )  # fmt: skip

    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: config error: {named}:")
    assert "s3cr3t-pw" not in result.stderr


def test_settings_for_consumers_producers_and_security_all_pass_the_check() -> None:
    overrides = {
        "kafka.auto.offset.reset": "earliest",
        "kafka.enable.auto.commit": "false",
        "kafka.linger.ms": "5",
        "kafka.client.rack": "r1",
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "SCRAM-SHA-512",
        "kafka.sasl.username": "svc",
        "kafka.sasl.password": "pw",
    }
    check_passthrough(load(None, overrides, environ={}).settings)


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("kafka.sasl.password", True),
        ("kafka.ssl.keystore.password", True),
        ("kafka.sasl.oauthbearer.config", True),
        ("kafka.ssl.key.location", False),
        ("kafka.sasl.username", False),
        ("bootstrap.servers", False),
        ("kafka.ssl.certificate.location", False),
    ],
)
def test_which_keys_count_as_secrets(key: str, secret: bool) -> None:
    assert is_secret(key) is secret


@pytest.mark.parametrize("command", [("config", "show"), ("start",)], ids=["config-show", "start"])
@pytest.mark.parametrize(
    ("sets", "named"),
    [
        (("http.auth.token=too-short",), "http.auth.token"),
        (("http.auth.file=/nonexistent/token",), "http.auth.file"),
        (("http.tls.cert.file=/nonexistent/cert.pem",), "http.tls.key.file"),
        (("http.tls.ca.file=/nonexistent/ca.pem",), "http.tls.ca.file"),
        (("timestamp.extractor=no_such_module:extract",), "timestamp.extractor"),
        (
            ("kafka.security.protocol=SASL_PLAINTEXT", "kafka.sasl.mechanism=BOGUS"),
            "kafka.sasl.mechanism",
        ),
    ],
    ids=["short-token", "auth-file", "tls-half", "ca-alone", "extractor", "sasl-mechanism"],
)
def test_config_show_refuses_what_start_refuses_with_exit_2_naming_the_key(
    tmp_path: Path, command: tuple[str, ...], sets: tuple[str, ...], named: str
) -> None:
    pairs = [arg for pair in (*sets, "bootstrap.servers=127.0.0.1:1") for arg in ("--set", pair)]
    result = run(*command, *pairs, env={"WORKER_STATE_DIR": str(tmp_path)})

    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: config error: {named}:"), lines


def test_a_bad_sasl_mechanism_is_named_as_itself_with_librdkafkas_reason() -> None:
    overrides = {"kafka.security.protocol": "SASL_SSL", "kafka.sasl.mechanism": "BOGUS"}

    with pytest.raises(ConfigError) as raised:
        check_passthrough(load(None, overrides, environ={}).settings)

    assert raised.value.key == "kafka.sasl.mechanism"
    assert "Unsupported SASL mechanism: BOGUS" in str(raised.value)
