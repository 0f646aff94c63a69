"""``python -m benchmarks [NAME ...] [--quick] [--out DIR]``: run benchmarks, write the report.

Runs the named benchmarks (all by default) one after another, each with its own broker
and workers, then rewrites ``<out>/benchmarks.md`` and ``<out>/benchmarks/*.png``.
Exits 0 when every benchmark produced its numbers (met targets or not), 1 when one
failed, 130 on Ctrl-C. Every process a benchmark starts is stopped by its PID before the
next one begins, and on failure, Ctrl-C, SIGTERM or SIGHUP.
"""

from __future__ import annotations

import argparse
import datetime as dt
import importlib
import os
import shlex
import shutil
import signal
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from types import FrameType, ModuleType
from typing import Any

from benchmarks import BENCHMARK_NAMES, report
from benchmarks.harness import BROKERS, REPO, RunContext
from benchmarks.results import Result

BENCHMARKS: dict[str, ModuleType] = {
    name: importlib.import_module(f"benchmarks.{name}") for name in BENCHMARK_NAMES
}


class Stopped(BaseException):
    """SIGTERM or SIGHUP: like Ctrl-C, it stops the run (no benchmark may swallow it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _raise_stopped(signum: int, _frame: FrameType | None) -> None:
    raise Stopped(signum)


def _close_undisturbed(ctx: RunContext) -> None:
    """Stop everything the benchmark started; a signal meanwhile is held until that is
    done (then raised), so a second Ctrl-C cannot leave a process running."""
    held: list[int] = []
    stop_signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    previous = {s: signal.signal(s, lambda signum, _f: held.append(signum)) for s in stop_signals}
    try:
        ctx.close()
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    if held:
        if held[0] == signal.SIGINT:
            raise KeyboardInterrupt
        raise Stopped(held[0])


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description="Benchmarks of the worker against same-run baselines; writes a report.",
    )
    parser.add_argument(
        "names", nargs="*", metavar="NAME",
        help=f"benchmarks to run (default: all): {', '.join(BENCHMARKS)}",
    )  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="tiny workloads (smoke test)")
    parser.add_argument(
        "--out", type=Path, default=REPO / "docs",
        help="where benchmarks.md and benchmarks/*.png go (default: docs/)",
    )  # fmt: skip
    parser.add_argument(
        "--broker", default="embedded", type=_brokers, metavar="NAME[,NAME]",
        help="the broker(s) every named benchmark runs on, one after the other: "
        f"{' or '.join(BROKERS)} (default: embedded; kafka_streams always runs on kafka)",
    )  # fmt: skip
    parser.add_argument(
        "--update", action="store_true",
        help="replace only the report's sections of the benchmarks run, keep the others",
    )  # fmt: skip
    parser.add_argument("--workdir", type=Path, help="logs and state (default: a temp dir)")
    parser.add_argument("--keep", action="store_true", help="keep the work dir after success")
    parser.add_argument(
        "--profile", action=argparse.BooleanOptionalAction, default=None,
        help="add an unmeasured py-spy run to throughput and restore (default: on, off with --quick)",
    )  # fmt: skip
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in BENCHMARKS]
    if unknown:
        parser.error(f"unknown benchmark {', '.join(unknown)}; choose from {', '.join(BENCHMARKS)}")
    return args


def _brokers(value: str) -> list[str]:
    names = [name.strip() for name in value.split(",") if name.strip()]
    unknown = [name for name in names if name not in BROKERS]
    if unknown or not names:
        raise argparse.ArgumentTypeError(f"choose from {', '.join(BROKERS)} (got {value!r})")
    return list(dict.fromkeys(names))


def runs(names: list[str], brokers: list[str]) -> list[tuple[str, str]]:
    """(benchmark, broker) in the order they run: each benchmark on each broker in turn; a
    benchmark that names its own broker (``RUNS_ON_BROKER``) runs once, on that one."""
    planned: list[tuple[str, str]] = []
    for name in names:
        own = getattr(BENCHMARKS[name], "RUNS_ON_BROKER", None)
        for broker in [own] if own else brokers:
            if (name, broker) not in planned:
                planned.append((name, broker))
    return planned


def run_one(
    module: ModuleType, args: argparse.Namespace, workdir: Path, plots: Path, broker: str
) -> Result:
    """Measure one benchmark on ``broker`` and report it; its processes are all stopped
    when this returns or raises. Run on another broker than the embedded one, its title
    and plots say which."""
    params = module.QUICK if args.quick else module.FULL
    profile = (not args.quick) if args.profile is None else args.profile
    started = time.monotonic()
    print(f"== {module.NAME} on {broker}: {params}", flush=True)
    suffix = "" if broker == "embedded" or hasattr(module, "RUNS_ON_BROKER") else f"-{broker}"
    ctx = RunContext(workdir / (module.NAME + suffix), plots, args.quick, profile, broker)
    plot_path = ctx.plot_path if not suffix else (lambda name: ctx.plot_path(name + suffix))
    try:
        result: Result = module.report(module.measure(ctx, params), plot_path)
    except Exception:
        result = Result(module.NAME, module.TITLE, error=traceback.format_exc(limit=8))
    finally:
        _close_undisturbed(ctx)
    result.broker = broker
    if suffix:
        result.title += f" {report.BROKER_TITLES[broker]}"
    result.seconds = time.monotonic() - started
    _print(result)
    return result


def _print(result: Result) -> None:
    if result.error is not None:
        print(f"   FAILED after {result.seconds:.0f}s:\n{result.error}", flush=True)
        return
    for row in result.rows:
        verdict = {None: "", True: "target met", False: "TARGET MISSED"}[row.met]
        print(
            f"   {row.metric}: {row.measured:,.2f} ({row.measured_label}) vs "
            f"{row.baseline:,.2f} ({row.baseline_label}) -> ratio {row.ratio:.2f} {verdict}",
            flush=True,
        )
    print(f"   ({result.seconds:.0f}s)", flush=True)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    names = args.names or list(BENCHMARKS)
    out = args.out.resolve()
    plots = out / report.PLOTS_DIR
    workdir = (args.workdir or Path(tempfile.mkdtemp(prefix="worker-bench-"))).resolve()
    workdir.mkdir(parents=True, exist_ok=True)
    previous: dict[int, Callable[..., Any] | int | None] = {
        s: signal.signal(s, _raise_stopped) for s in (signal.SIGTERM, signal.SIGHUP)
    }
    started_at, started = dt.datetime.now(dt.UTC), time.monotonic()
    load_before = os.getloadavg()[0]
    print(f"benchmarks: {', '.join(names)}; work dir {workdir}", flush=True)
    results: list[Result] = []
    code = 0
    try:
        for stale in [] if args.update else plots.glob("*.png"):
            stale.unlink()  # the report is rewritten whole: no plot of an older run stays
        for name, broker in runs(names, args.broker):
            results.append(run_one(BENCHMARKS[name], args, workdir, plots, broker))
    except (KeyboardInterrupt, Stopped) as exc:
        signum = exc.signum if isinstance(exc, Stopped) else signal.SIGINT
        print(f"\ninterrupted ({signal.Signals(signum).name}); every process was stopped")
        return 128 + signum
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
    info = report.RunInfo(
        started=started_at,
        seconds=time.monotonic() - started,
        quick=args.quick,
        load_before=load_before,
        load_after=os.getloadavg()[0],
        command=" ".join(
            ["python -m benchmarks", *map(shlex.quote, sys.argv[1:] if argv is None else argv)]
        ),
    )
    path = report.write(results, info, out, update=args.update)
    print(f"report: {path}", flush=True)
    if any(r.error for r in results):
        code = 1
        print(f"logs and state kept in {workdir}", flush=True)
    elif not args.keep:
        shutil.rmtree(workdir, ignore_errors=True)
    else:
        print(f"logs and state kept in {workdir}", flush=True)
    return code


if __name__ == "__main__":
    sys.exit(main())
