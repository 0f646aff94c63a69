"""Historical payments for the account-profiles job: deterministic files and their reference."""

from __future__ import annotations

import csv
import statistics

import orjson
import pytest

from worker.dev import history, sample_data


def read_csv(out) -> list[tuple[str, str, int, int]]:
    rows = []
    for path in sorted(out.glob("history-*.csv")):
        with open(path, newline="") as fh:
            reader = csv.reader(fh)
            assert next(reader) == list(history.COLUMNS)
            rows += [(i, a, int(m), int(t)) for i, a, m, t in reader]
    return rows


def test_every_account_gets_its_payments_spread_over_the_shards(tmp_path):
    written = history.write_history(tmp_path, accounts=10, per_account=7, files=3)

    rows = read_csv(tmp_path)
    assert written.rows == len(rows) == 70
    assert len(list(tmp_path.glob("history-*.csv"))) == 3
    assert {a for _, a, _, _ in rows} == {a.id for a in sample_data.accounts(10)}
    assert len({i for i, _, _, _ in rows}) == 70
    assert all(m >= 1 for _, _, m, _ in rows)


def test_the_same_seed_writes_the_same_payments(tmp_path):
    history.write_history(tmp_path / "a", 5, 4, seed=3)
    history.write_history(tmp_path / "b", 5, 4, seed=3)

    assert read_csv(tmp_path / "a") == read_csv(tmp_path / "b")


def test_json_lines_hold_the_same_payments(tmp_path):
    history.write_history(tmp_path / "c", 5, 4, "csv", files=2)
    history.write_history(tmp_path / "j", 5, 4, "json", files=2)

    lines = [
        orjson.loads(line)
        for path in sorted((tmp_path / "j").glob("history-*.json"))
        for line in path.read_text().splitlines()
    ]
    as_tuples = sorted(tuple(d[c] for c in history.COLUMNS) for d in lines)
    assert as_tuples == sorted(read_csv(tmp_path / "c"))


def test_the_reference_is_mean_population_std_and_count_per_account():
    rows = [("1", "a", 10, 0), ("2", "a", 20, 0), ("3", "a", 60, 0), ("4", "b", 5, 0)]

    reference = history.reference_profiles(rows)

    assert reference["a"] == {"mean": 30.0, "std": statistics.pstdev([10, 20, 60]), "n": 3}
    assert reference["b"] == {"mean": 5.0, "std": 0.0, "n": 1}


def test_a_second_run_replaces_the_first(tmp_path):
    history.write_history(tmp_path, 5, 4, files=4)
    history.write_history(tmp_path, 5, 2, files=2)

    assert len(read_csv(tmp_path)) == 10
    assert len(list(tmp_path.iterdir())) == 2


def test_a_directory_with_other_files_is_refused_and_left_alone(tmp_path):
    (tmp_path / "keep.txt").write_text("mine")

    with pytest.raises(history.HistoryError, match="holds other files \\(keep.txt\\)"):
        history.write_history(tmp_path, 5, 4)
    assert [p.name for p in tmp_path.iterdir()] == ["keep.txt"]


@pytest.mark.parametrize(
    ("args", "message"), [((5, 4, "avro"), "unknown format"), ((0, 4), "at least 1")]
)
def test_bad_arguments_are_refused(tmp_path, args, message):
    with pytest.raises(ValueError, match=message):
        history.write_history(tmp_path, *args)
