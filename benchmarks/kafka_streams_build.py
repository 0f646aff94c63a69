"""The Kafka Streams baseline's build: compiled once with Maven, offline afterwards.

``benchmarks/kafka_streams_app/`` holds a pom and one Java file (the count-and-sum and
tumbling-window topologies in Kafka Streams' DSL). :func:`ensure_built` runs ``mvn
compile dependency:copy-dependencies`` on it into a cache directory named after a hash
of the pom and the sources, so an edit rebuilds and an unchanged tree never calls Maven
(nor the network) again; a stamp file marks a finished build, so an interrupted one is
redone. Concurrent callers serialise on a lock file.

Cache: ``$WORKER_BENCH_CACHE`` if set, else ``.cache/kafka-streams-baseline`` in the
checkout (git-ignored).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from benchmarks.harness import REPO, BenchmarkFailed

APP_DIR = REPO / "benchmarks" / "kafka_streams_app"
MAIN_CLASS = "bench.Baseline"
CACHE_ENV = "WORKER_BENCH_CACHE"
_STAMP = ".complete"


def cache_root() -> Path:
    configured = os.environ.get(CACHE_ENV)
    if configured:
        return Path(configured).expanduser() / "kafka-streams-baseline"
    return REPO / ".cache" / "kafka-streams-baseline"


def source_hash() -> str:
    """A hash of the pom and every source file: the build directory's name."""
    digest = hashlib.sha256()
    files = [APP_DIR / "pom.xml", *sorted((APP_DIR / "src").rglob("*.java"))]
    for path in files:
        digest.update(path.relative_to(APP_DIR).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


def build_dir() -> Path:
    return cache_root() / source_hash()


def classpath(out: Path) -> str:
    """The JVM classpath of a finished build in ``out``."""
    return os.pathsep.join([str(out / "classes"), str(out / "libs" / "*")])


def ensure_built(timeout: float = 900.0) -> Path:
    """The build directory of the current sources, building it the first time.

    Idempotent and safe from several processes at once.

    Raises:
        BenchmarkFailed: Java or Maven missing, or the build failed (its output in the
            message); nothing is stamped then, so the next call builds again.
    """
    out = build_dir()
    if (out / _STAMP).is_file():
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    with open(out.parent / f".{out.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if not (out / _STAMP).is_file():
            _build(out, timeout)
            (out / _STAMP).write_text(source_hash() + "\n")
    return out


def _build(out: Path, timeout: float) -> None:
    mvn = shutil.which("mvn")
    if mvn is None or shutil.which("java") is None:
        raise BenchmarkFailed(
            "the Kafka Streams baseline needs a JDK (17 or newer) and Maven on PATH"
        )
    shutil.rmtree(out, ignore_errors=True)  # a partial build starts over
    cmd = [
        mvn, "-q", "-B", f"-Dbench.out={out}", "compile", "dependency:copy-dependencies",
        f"-DoutputDirectory={out / 'libs'}", "-DincludeScope=runtime",
    ]  # fmt: skip
    try:
        done = subprocess.run(
            cmd, cwd=APP_DIR, capture_output=True, text=True, timeout=timeout, check=False
        )
    except subprocess.TimeoutExpired as exc:
        raise BenchmarkFailed(
            f"building the Kafka Streams baseline took over {timeout:.0f}s"
        ) from exc
    if done.returncode != 0:
        raise BenchmarkFailed(
            f"building the Kafka Streams baseline failed ({' '.join(cmd)}):\n"
            + (done.stdout + done.stderr)[-4000:]
        )
