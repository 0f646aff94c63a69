"""deploy/grafana/dashboard.json: valid JSON whose PromQL names only metrics the worker exports.

The exported names come from the worker's own metrics module: a fresh
:class:`~worker.observability.Metrics` registry, every family expanded to the sample
names Prometheus sees (counters ``_total``, histograms ``_bucket``/``_sum``/``_count``).
Label names used in selectors and ``by (...)`` clauses must belong to the metrics the
query uses, so a renamed label breaks this test instead of a panel.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from worker.observability import Metrics

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "grafana" / "dashboard.json"
# Labels Prometheus adds at scrape time, and the histogram bucket label.
SCRAPE_LABELS = {"job", "instance", "le"}
METRIC = re.compile(r"\b(worker_[a-z0-9_]+)\b")
SELECTOR = re.compile(r"\b(worker_[a-z0-9_]+)\{([^}]*)\}")
GROUPING = re.compile(r"\b(?:by|without)\s*\(([^)]*)\)")
MATCHER_LABEL = re.compile(r"([a-zA-Z_][a-zA-Z0-9_]*)\s*(?:=~|!~|!=|=)")


def exported() -> dict[str, set[str]]:
    """Every sample name a worker exposes -> its label names."""
    metrics = Metrics()
    samples: dict[str, set[str]] = {}
    for value in vars(metrics).values():
        collector = getattr(value, "_gauge", value)  # _TaskGauge wraps a Gauge
        if not hasattr(collector, "describe"):
            continue  # the registry itself
        # prometheus_client keeps label names only in this attribute; a fresh registry has
        # no samples to read them from.
        labels = set(getattr(collector, "_labelnames", ()))
        for family in collector.describe():
            suffixes = {
                "counter": ["_total", "_created"],
                "histogram": ["_bucket", "_sum", "_count", "_created"],
                "gauge": [""],
            }[family.type]
            for suffix in suffixes:
                samples[family.name + suffix] = labels | ({"le"} if suffix == "_bucket" else set())
    return samples


def dashboard() -> dict[str, Any]:
    return json.loads(DASHBOARD.read_text())  # type: ignore[no-any-return]


def panels(board: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    for panel in board["panels"]:
        found.append(panel)
        found.extend(panel.get("panels", []))
    return found


def expressions(board: dict[str, Any]) -> list[str]:
    exprs = [t["expr"] for p in panels(board) for t in p.get("targets", [])]
    for variable in board["templating"]["list"]:
        query = variable.get("query")
        if isinstance(query, dict):
            exprs.append(query["query"])
    return exprs


EXPORTED = exported()
EXPRESSIONS = expressions(dashboard())


def test_the_exported_names_are_what_prometheus_sees() -> None:
    assert "worker_processed_records_total" in EXPORTED
    assert "worker_commit_seconds_bucket" in EXPORTED
    assert "worker_tasks" in EXPORTED
    assert EXPORTED["worker_tasks"] == {"kind"}
    assert EXPORTED["worker_task_unavailable_seconds_total"] == {"task", "cause"}


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_every_query_names_only_exported_metrics(expr: str) -> None:
    names = set(METRIC.findall(expr))
    assert names, f"no worker metric in {expr!r}"
    unknown = sorted(names - set(EXPORTED))
    assert not unknown, f"{expr!r} names metrics the worker does not export: {unknown}"


@pytest.mark.parametrize("expr", EXPRESSIONS)
def test_every_label_a_query_uses_exists_on_its_metrics(expr: str) -> None:
    names = set(METRIC.findall(expr))
    available = set().union(*(EXPORTED[n] for n in names)) | SCRAPE_LABELS
    used: set[str] = set()
    for _name, matchers in SELECTOR.findall(expr):
        used |= set(MATCHER_LABEL.findall(matchers))
    for group in GROUPING.findall(expr):
        used |= {label.strip() for label in group.split(",") if label.strip()}
    assert used <= available, f"{expr!r} uses labels {sorted(used - available)}"


def test_the_dashboard_covers_what_operators_watch() -> None:
    text = " ".join(EXPRESSIONS)
    for metric in (
        "worker_tasks",  # tasks by kind
        "worker_restored_records_total",  # restore progress
        "worker_standby_lag_records",  # standby lag
        "worker_processed_records_total",  # throughput
        "worker_commit_seconds_bucket",  # commit latency
        "worker_rebalances_total",  # rebalances
        "worker_task_unavailable_seconds_total",  # per-task availability by cause
    ):
        assert metric in text


def test_panels_have_unique_ids_a_datasource_variable_and_fit_the_grid() -> None:
    board = dashboard()
    ids = [p["id"] for p in panels(board)]
    assert len(ids) == len(set(ids))
    assert any(v["type"] == "datasource" for v in board["templating"]["list"])
    for panel in panels(board):
        grid = panel["gridPos"]
        assert grid["x"] + grid["w"] <= 24
        for target in panel.get("targets", []):
            assert target["datasource"]["uid"] == "${datasource}"


def test_a_query_naming_a_metric_the_worker_lacks_is_caught() -> None:
    with pytest.raises(AssertionError):
        test_every_query_names_only_exported_metrics("rate(worker_no_such_thing_total[1m])")
