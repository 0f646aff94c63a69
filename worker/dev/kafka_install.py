"""The pinned Apache Kafka broker's jars: fetched once from Maven Central, offline after.

``worker/dev/kafka-broker/pom.xml`` lists the broker's artifacts; :func:`ensure_kafka`
runs ``mvn dependency:copy-dependencies`` on it into a cache directory and marks the
copy complete with a stamp file, so an interrupted fetch is redone and a finished one is
never repeated (no network afterwards). Concurrent callers (xdist workers, ``make
kafka``) serialise on a lock file: one fetches, the others wait and reuse it.

Cache: ``$WORKER_KAFKA_CACHE`` if set, else ``.cache/kafka`` in the source checkout
(git-ignored), else ``~/.cache/worker/kafka`` for an installed package; one directory per
version, ``<cache>/<version>/libs/*.jar``.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from pathlib import Path

from worker.errors import FatalError

# Keep equal to <kafka.version> in the pom (a unit test checks it).
KAFKA_VERSION = "4.1.1"
POM = Path(__file__).with_name("kafka-broker") / "pom.xml"
CACHE_ENV = "WORKER_KAFKA_CACHE"
_STAMP = ".complete"


def cache_root() -> Path:
    """Where fetched broker versions live (see the module docstring)."""
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser()
    checkout = Path(__file__).resolve().parents[2]
    if (checkout / "pyproject.toml").is_file() and (checkout / ".git").exists():
        return checkout / ".cache" / "kafka"
    return Path.home() / ".cache" / "worker" / "kafka"


def libs_dir(root: Path | None = None, version: str = KAFKA_VERSION) -> Path:
    """The classpath directory of ``version`` (its jars), fetched or not."""
    return (root or cache_root()) / version / "libs"


def is_installed(root: Path | None = None, version: str = KAFKA_VERSION) -> bool:
    return (libs_dir(root, version).parent / _STAMP).is_file()


def ensure_kafka(root: Path | None = None, timeout: float = 600.0) -> Path:
    """The jars of the pinned broker, fetching them with Maven the first time.

    Idempotent and safe to call from several processes at once.

    Raises:
        FatalError: Maven or Java is missing, or the fetch failed (its output is in the
            message); nothing is marked complete then, so the next call retries.
    """
    libs = libs_dir(root)
    if is_installed(root):
        return libs
    home = libs.parent
    home.mkdir(parents=True, exist_ok=True)
    with open(home.parent / f".{KAFKA_VERSION}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not is_installed(root):
            _fetch(libs, timeout)
            (home / _STAMP).write_text(f"{KAFKA_VERSION}\n")
    return libs


def _fetch(libs: Path, timeout: float) -> None:
    """Copy the pom's dependencies into ``libs`` (a fresh directory: partial copies go)."""
    mvn = shutil.which("mvn")
    if mvn is None or shutil.which("java") is None:
        raise FatalError(
            "the Apache Kafka broker needs a JDK (17 or newer) and Maven on PATH: "
            "java and mvn were not both found"
        )
    partial = libs.with_name("libs.partial")
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(libs, ignore_errors=True)
    command = [
        mvn,
        "-q",
        "-B",
        "-f",
        str(POM),
        "dependency:copy-dependencies",
        f"-DoutputDirectory={partial}",
    ]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as exc:
        raise FatalError(f"fetching Apache Kafka {KAFKA_VERSION} took over {timeout}s") from exc
    if done.returncode != 0 or not any(partial.glob("kafka_2.13-*.jar")):
        raise FatalError(
            f"fetching Apache Kafka {KAFKA_VERSION} failed ({' '.join(command)}):\n"
            f"{(done.stdout + done.stderr)[-4000:]}"
        )
    partial.rename(libs)


def main() -> int:
    """``python -m worker.dev.kafka_install``: fetch if needed, print the directory."""
    try:
        print(ensure_kafka())
    except FatalError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
