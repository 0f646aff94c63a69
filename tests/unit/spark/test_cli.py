"""``worker spark``: usage errors, the spark-submit line, and no pyspark import until a load runs."""

from __future__ import annotations

import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from worker.cli import main
from worker.spark import cli as spark_cli
from worker.spark.session import local_threads

ENTRY = str(Path(spark_cli.__file__).with_name("submit.py"))


def run(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["spark", "load", *args])
    return result.exit_code, result.stdout, result.stderr


def test_print_submit_prints_a_spark_submit_line_replaying_the_given_options(tmp_path):
    config = tmp_path / "w.toml"
    config.write_text('"bootstrap.servers" = "kafka:9092"\n')

    code, out, _ = run(
        "account-profiles",
        "--input", "hdfs:///history",
        "--partitions", "12",
        "--config", str(config),
        "--set", "kafka.security.protocol=SSL",
        "--master", "yarn",
        "--print-submit",
    )  # fmt: skip

    assert code == 0
    argv = shlex.split(out)
    assert argv[:4] == ["spark-submit", "--master", "yarn", "--name"]
    assert f"spark.pyspark.python={sys.executable}" in argv
    tail = argv[argv.index(ENTRY) + 1 :]
    assert tail[:2] == ["load", "account-profiles"]
    assert sorted(shlex.join(tail[2:]).split(" --")) == sorted(
        [
            "--input hdfs:///history",
            f"config {config.resolve()}",
            "partitions 12",
            "set kafka.security.protocol=SSL",
        ]
    )


def test_print_submit_for_a_generic_table_keeps_its_options():
    code, out, _ = run(
        "table", "--input", "s3a://b/users.parquet", "--topic", "users", "--key-column", "id",
        "--value-columns", "name,email", "--co-partition-with", "clicks",
        "--co-partition-with", "orders", "--create", "--timestamp-column", "updated_at",
        "--print-submit",
    )  # fmt: skip

    assert code == 0
    tail = shlex.split(out)[shlex.split(out).index(ENTRY) + 1 :]
    assert tail[:2] == ["load", "table"]
    joined = shlex.join(tail)
    for part in (
        "--topic users",
        "--key-column id",
        "--value-columns name,email",
        "--co-partition-with clicks --co-partition-with orders",
        "--create",
        "--timestamp-column updated_at",
    ):
        assert part in joined
    assert "--master" not in shlex.split(out)[3:]  # the default local master is not replayed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--value-column", "a", "--value-columns", "a,b"], "exactly one of --value-column"),
        ([], "exactly one of --value-column"),
    ],
)
def test_a_table_needs_exactly_one_kind_of_value(args, message):
    code, _, err = run(
        "table", "--input", "x", "--topic", "t", "--key-column", "k", *args
    )  # fmt: skip

    assert code == 2
    assert message in err


def test_bad_settings_exit_2_naming_the_key():
    code, _, err = run("account-profiles", "--input", "x", "--set", "commit.interval.ms=0")

    assert code == 2
    assert "commit.interval.ms" in err


def test_the_cli_and_the_submit_entry_run_without_importing_pyspark():
    # A fresh interpreter: the test process may have imported pyspark already.
    probe = (
        "import runpy, sys\n"
        f"sys.argv = [{ENTRY!r}, 'load', 'account-profiles', '--input', 'h', '--print-submit']\n"
        "try:\n"
        f"    runpy.run_path({ENTRY!r}, run_name='__main__')\n"
        "except SystemExit as stop:\n"
        "    assert stop.code in (None, 0), stop.code\n"
        "assert 'pyspark' not in sys.modules, 'pyspark imported'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False
    )

    assert done.returncode == 0, done.stderr
    argv = shlex.split(done.stdout)
    assert argv[:2] == ["spark-submit", "--name"], "spark-submit's own master is used"
    assert argv[argv.index(ENTRY) + 1 :] == ["load", "account-profiles", "--input", "h"]


@pytest.mark.parametrize(
    ("master", "threads"),
    [("local", 1), ("local[2]", 2), ("local[8,3]", 8), ("yarn", None), ("spark://h:7077", None)],
)
def test_local_masters_are_recognised_with_their_thread_count(master, threads):
    assert local_threads(master) == threads


def test_without_pyspark_a_load_says_how_to_install_it_and_exits_1(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "pyspark" else real(name, *a)
    )

    code, out, err = run("account-profiles", "--input", "h")

    assert code == 1
    assert "pip install 'worker[spark]'" in err
    assert out == ""
