"""The spark-submit entry point: ``spark-submit ... worker/spark/submit.py load <job> ...``.

``worker spark load ... --print-submit`` prints the whole line. Here the master defaults
to whatever spark-submit was given, instead of local mode.
"""

from __future__ import annotations

import sys
from pathlib import Path

# Run as a script, this file's directory is sys.path[0], which would make the modules
# beside it importable under bare names (``errors``, ``files``...) and shadow others.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if not p or Path(p).resolve() != _HERE]


def main() -> None:
    from worker.spark.cli import spark

    from_submit = {"master": ""}
    load = {"account-profiles": from_submit, "table": from_submit}
    spark(
        prog_name="worker spark",
        default_map={"load": load, "export": from_submit, "reconcile": from_submit},
    )


if __name__ == "__main__":
    main()
