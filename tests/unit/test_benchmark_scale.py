"""The scale benchmark's report, from made-up rounds; and one real round of a small group."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks import scale

KIB = 1024


def _round(metadata_kib: float, plan: float, largest_kib: float = 60) -> scale.Round:
    half = int(metadata_kib * KIB / 2)
    return scale.Round(half, half, int(largest_kib * KIB), plan, plan * 2)


def _group(instances: int, metadata_kib: float, plan: float) -> scale.Group:
    return scale.Group(
        instances,
        instances * 10,
        first_join=_round(metadata_kib, plan * 1.5),
        steady=_round(metadata_kib, plan),
        steady_v1=_round(metadata_kib * 500, plan),
    )


def test_the_largest_group_is_held_against_one_mib_and_one_second(tmp_path: Path) -> None:
    measured = scale.Measured(
        scale.FULL, [_group(10, 3, 0.01), _group(1_000, 350, 0.3), _group(100, 30, 0.1)]
    )

    result = scale.report(measured, lambda name: tmp_path / f"{name}.png")

    metadata, previous, plan = result.rows
    assert "1,000 instances x 10,000 tasks" in metadata.metric
    assert metadata.measured == pytest.approx(350)
    assert metadata.baseline == 1024
    assert metadata.met is True
    assert previous.baseline == pytest.approx(350 * 500)
    assert previous.target is None
    assert plan.measured == pytest.approx(0.45)  # the slower round: the first join
    assert plan.met is True
    table = result.details[1]
    assert table.count("\n| ") == 3
    assert "| 1,000 | 10,000 | 175.0 | 175.0 | **350.0** |" in table
    assert "Before issue 23" in result.details[-1]


def test_a_group_over_the_budgets_misses_both_targets(tmp_path: Path) -> None:
    measured = scale.Measured(scale.QUICK, [_group(1_000, 2_000, 1.2)])
    metadata, _previous, plan = scale.report(measured, lambda n: tmp_path / n).rows
    assert metadata.met is False
    assert plan.met is False


def test_a_small_group_really_measured_fits_and_reads_version_2() -> None:
    group = scale.measure_group(5, 50, scale.Params(groups=((5, 50),), repeats=1))
    assert 0 < group.steady.metadata_bytes < group.steady_v1.metadata_bytes
    assert group.steady.subscription_bytes < group.first_join.subscription_bytes * 2
    assert group.steady.largest_assignment < group.steady_v1.largest_assignment
    assert group.steady.plan_seconds < group.steady.assign_seconds
