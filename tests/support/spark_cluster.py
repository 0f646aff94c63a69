"""A Spark standalone cluster (one master, one worker) from the installed PySpark, for tests.

Started with ``spark-class ... deploy.master.Master`` and ``... deploy.worker.Worker``
(the pip package has no ``sbin`` scripts), bound to loopback, with small memory: the
test machine's cores are shared. Each daemon is its own process group (``spark-class``
execs java, so the PID is the JVM); stopping kills those groups by PID, executors and
their Python workers with them. A daemon also dies with the test process, should that be
killed outright (:func:`worker.dev.processes.guarded`). The worker daemon gets no
PYTHONPATH, so executors import ``worker`` only from what the job ships (or the
installed package).
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from types import TracebackType

import pyspark

from tests.support.waiting import wait_until
from worker.dev.processes import guarded

SPARK_CLASS = Path(pyspark.__file__).parent / "bin" / "spark-class"


class StandaloneCluster:
    def __init__(self, base: Path, master_port: int, worker_port: int, ui_ports: tuple[int, int]):
        self.base = base
        self.master_port, self.worker_port, self.ui_ports = master_port, worker_port, ui_ports
        self._processes: list[subprocess.Popen[bytes]] = []

    @property
    def master(self) -> str:
        return f"spark://127.0.0.1:{self.master_port}"

    def _env(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env.update(
            {
                "SPARK_LOCAL_IP": "127.0.0.1",
                "SPARK_DAEMON_MEMORY": "256m",
                "SPARK_WORKER_DIR": str(self.base / "work"),
                "SPARK_LOG_DIR": str(self.base / "logs"),
            }
        )
        return env

    def _start(self, name: str, *args: str) -> None:
        log = open(self.base / f"{name}.log", "wb")  # noqa: SIM115 (closed with the process)
        self._processes.append(
            subprocess.Popen(
                guarded([str(SPARK_CLASS), *args]),
                env=self._env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        )
        log.close()

    def log(self, name: str) -> str:
        path = self.base / f"{name}.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def start(self) -> StandaloneCluster:
        self.base.mkdir(parents=True, exist_ok=True)
        master_ui, worker_ui = self.ui_ports
        self._start(
            "master", "org.apache.spark.deploy.master.Master", "--host", "127.0.0.1",
            "--port", str(self.master_port), "--webui-port", str(master_ui),
        )  # fmt: skip
        wait_until(
            lambda: "I have been elected leader" in self.log("master"),
            90,
            message=lambda: f"the Spark master started:\n{self.log('master')[-2000:]}",
        )
        self._start(
            "worker", "org.apache.spark.deploy.worker.Worker", "--host", "127.0.0.1",
            "--port", str(self.worker_port), "--webui-port", str(worker_ui),
            "--cores", "2", "--memory", "1g", self.master,
        )  # fmt: skip
        wait_until(
            lambda: "Successfully registered with master" in self.log("worker"),
            90,
            message=lambda: f"the Spark worker registered:\n{self.log('worker')[-2000:]}",
        )
        return self

    def stop(self) -> None:
        for process in reversed(self._processes):
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
                try:
                    process.wait(20)
                except subprocess.TimeoutExpired:
                    os.killpg(process.pid, signal.SIGKILL)
                    process.wait(10)
        self._processes.clear()

    def __enter__(self) -> StandaloneCluster:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()
