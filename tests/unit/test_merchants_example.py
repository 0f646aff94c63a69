"""The DSL example app (worker.examples.merchants) through the test driver: its window
counts are the reference's, over several partitions, payments out of order included."""

from __future__ import annotations

from worker.dev import sample_data
from worker.examples import merchants
from worker.serde import JSON
from worker.testing import TopologyTestDriver


def test_the_merchants_app_counts_payments_per_merchant_and_10_minute_window() -> None:
    accts = sample_data.accounts(30)
    payments = [p for _, p in sample_data.payments(accts, 400)]
    times = [1_000_000 + (i * 7_919) % 3_600_000 for i in range(len(payments))]  # shuffled
    config = {"application.id": merchants.APPLICATION_ID}
    with TopologyTestDriver(merchants.build(), config, partitions=4) as driver:
        topic = driver.input_topic(merchants.PAYMENTS)
        for payment, at in zip(payments, times, strict=True):
            topic.pipe(payment["account"], payment, timestamp=at)
        out = driver.output_topic(merchants.MERCHANT_COUNTS, merchants.KEYS, JSON)
        got = {(w.key, w.start_ms): n for w, n in out.read_key_values()}
    assert got == merchants.reference(zip(payments, times, strict=True))
    assert {m for m, _ in got} <= {f"merchant-{i:02d}" for i in range(sample_data.MERCHANTS)}
