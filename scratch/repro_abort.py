"""Isolated repro: transactional producer stalled past transaction.timeout.ms, then abort/commit."""
import sys, time
from confluent_kafka import Producer, KafkaException
from worker.dev.kafka_broker import KafkaBroker

b = KafkaBroker(die_with_parent=True)
boot = b.start()
t0 = time.monotonic()
def log(*a): print(f"{time.monotonic()-t0:7.2f}", *a, flush=True)
def desc(e):
    err = e.args[0]
    return (f"{err.name()} code={err.code()} retriable={err.retriable()} "
            f"abortable={err.txn_requires_abort()} fatal={err.fatal()} str={err.str()!r}")
try:
    p = Producer({"bootstrap.servers": boot, "transactional.id": "repro-1",
                  "transaction.timeout.ms": 3000, "enable.idempotence": True})
    p.init_transactions(30)
    p.begin_transaction()
    p.produce("t", b"v"); p.flush(10)
    log("produced; stalling 8 s (timeout 3 s)")
    time.sleep(8)
    first = sys.argv[1] if len(sys.argv) > 1 else "abort"
    if first == "commit":
        try:
            p.commit_transaction(10); log("commit OK")
        except KafkaException as e:
            log("commit:", desc(e))
    for i in range(12):
        s = time.monotonic()
        try:
            p.abort_transaction(float(sys.argv[2]) if len(sys.argv) > 2 else 5)
            log(f"abort try {i}: OK after {time.monotonic()-s:.2f}s"); break
        except KafkaException as e:
            log(f"abort try {i} ({time.monotonic()-s:.2f}s):", desc(e))
    try:
        p.begin_transaction(); p.produce("t", b"w"); p.commit_transaction(10); log("next txn committed")
    except KafkaException as e:
        log("next txn:", desc(e))
finally:
    b.stop()
