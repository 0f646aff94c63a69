"""The benchmark report's profile breakdown: samples sorted into kinds of work."""

from __future__ import annotations

from pathlib import Path

from benchmarks import profiling, restore, throughput

LOOP = "Worker._run_loop (worker/runtime/worker.py:190)"


def stack(*frames: str, count: int, thread: str = "thread (1): MainThread") -> str:
    return ";".join([thread, *frames]) + f" {count}"


def test_each_sample_goes_to_the_first_category_that_claims_it(tmp_path: Path) -> None:
    raw = tmp_path / "profile.txt"
    raw.write_text(
        "\n".join(
            [
                stack(LOOP, "DataConsumer.consume (worker/kafka/consumers.py:330)", count=10),
                stack(
                    LOOP,
                    "RecordRouter.process (worker/tasks/router.py:50)",
                    "score_payment (worker/examples/payments.py:60)",
                    count=20,
                ),
                stack(
                    LOOP,
                    "TaskCommitter.commit (worker/tasks/committer.py:45)",
                    "DataConsumer.consume (worker/kafka/consumers.py:330)",
                    count=5,
                ),
                stack(LOOP, "RecordRouter.process (worker/tasks/router.py:50)", count=15),
                stack(LOOP, count=50, thread="thread (2): http"),  # another thread: left out
                "not a sample line",
            ]
        )
    )
    categories = [
        profiling.Category("commit", under=("TaskCommitter.commit",)),
        profiling.Category("fetch", leaf_functions=("DataConsumer.consume",)),
        profiling.Category("app", leaf_files=("worker/examples/payments.py",)),
    ]

    shares = profiling.breakdown(raw, "Worker._run_loop", categories, rest="other")

    assert shares == [("commit", 0.1), ("fetch", 0.2), ("app", 0.4), ("other", 0.3)]


def test_the_gap_paragraphs_give_time_per_record_and_every_share() -> None:
    shares = {
        label: 1 / 7 for label in [*(c.label for c in throughput.CATEGORIES), throughput.LOOP]
    }
    text = throughput._gap(rate=250_000, ceiling=1_000_000, shares=shares)
    assert "4.0 us per record" in text and "allows 3.3 us" in text
    assert all(label in text for label in shares)

    shares = {label: 1 / 5 for label in [*(c.label for c in restore.CATEGORIES), restore.LOOP]}
    text = restore._gap(rate=800_000, raw_rate=1_000_000, shares=shares)
    assert "restores a record in 1.25 us" in text and "allows 1.43 us" in text
    assert all(label in text for label in shares)
