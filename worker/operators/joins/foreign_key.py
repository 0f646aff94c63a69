"""The foreign-key table-table join (Kafka Streams' KIP-213): each left row joins the right
row whose key ``foreign_key_extractor(left value)`` names; the two tables need not be
co-partitioned.

The protocol, as the processors below run it (wire formats: ``subscriptions.py``):

1. A left change (the left table's store already updated) goes to the foreign key's
   partition as a subscription on the *subscription topic*: subscribe with the hash of
   the new value to the new foreign key, and, when the row's foreign key moved away or
   the row was deleted, unsubscribe from the old one (known from the join's own store
   of each row's subscribed foreign key, ``<name>-fk``).
2. The right side, in the task that holds the foreign key's partition of the right table,
   keeps every subscription in ``<name>-subscriptions`` (keyed foreign key, then primary
   key) and answers each subscribe with the right row (None when there is none), and
   every right change to every subscriber of its key, on the *response topic*, keyed by
   the primary key and carrying the subscription's hash.
3. The left side drops a response whose hash is not the hash of the row it now holds:
   an answer to an older value, or from the row's old foreign key. What is left joins
   the row and the right value into the result table (``name``, a store with its own
   changelog, queryable); a change of the result forwards the new row, and its removal
   a tombstone, only if the row existed.
4. A deleted left row, or one whose foreign key is None, needs no answer: its result is
   decided at once (inner: no row; left: ``joiner(left, None)``), and any answer still
   on its way is dropped by step 3.

So a result is always ``joiner(left row now, a value the right row of its foreign key
held)``, and once the inputs stop changing the result table is the join of the two
tables: the last answer for a row's current value comes from its current foreign key's
task after every change of that right row it saw. Unlike KIP-213, every subscribe is
answered, even with no right row: the result store, not the instruction, decides whether
an inner join's row must be retracted (a foreign key that moves to a missing right row).

Semantics per kind: docs/joins.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

from worker.errors import TopologyError
from worker.operators.joins.kinds import Joiner, check_join
from worker.operators.joins.subscriptions import (
    Instruction,
    Response,
    ResponseSerde,
    Subscription,
    SubscriptionSerde,
    subscriber,
    subscriber_prefix,
    subscription_key,
    value_hash,
)
from worker.operators.joins.table_table import joined, update_result
from worker.processing.context import ProcessorContext
from worker.processing.topology import Topology
from worker.serde import BYTES, Codec, Serde

ForeignKeyExtractor = Callable[[Any], Any]
FkKind = Literal["inner", "left"]


@dataclass(frozen=True, slots=True)
class ForeignKeySerdes:
    """The serdes of the two tables' keys and values and of the result's values."""

    left_key: Serde
    left_value: Serde
    right_key: Serde
    right_value: Serde
    result_value: Serde


@dataclass(frozen=True, slots=True)
class ForeignKeyTopics:
    """The two internal topics: subscriptions keyed by foreign key, responses by primary key."""

    subscription: str
    response: str


class ForeignKeyJoin:
    """The join's processors (see the module doc for the steps they run)."""

    def __init__(
        self,
        name: str,
        left_store: str,
        right_store: str,
        extractor: ForeignKeyExtractor,
        joiner: Joiner,
        kind: FkKind,
        serdes: ForeignKeySerdes,
    ) -> None:
        self.name = name
        self.left_store = left_store
        self.right_store = right_store
        self.fk_store = f"{name}-fk"
        self.subscription_store = f"{name}-subscriptions"
        self.subscription_sink, self.response_sink = internal_sinks(name)
        self.extractor = extractor
        self.joiner = joiner
        self.kind = kind
        self._left_values = Codec(serdes.left_value)
        self._pks = Codec(serdes.left_key)
        self._fks = Codec(serdes.right_key)

    # -- the left side ------------------------------------------------------------------

    def subscribe(self, ctx: ProcessorContext, pk: Any, value: Any) -> None:
        """Step 1: a left change, sent to the foreign keys it concerns."""
        if pk is None:
            return
        sent = ctx.store(self.fk_store)
        old_fk = sent.get(pk)
        new_fk = None if value is None else self.extractor(value)
        if old_fk is not None and (new_fk is None or self._fk(old_fk) != self._fk(new_fk)):
            unsubscribe = Subscription(Instruction.UNSUBSCRIBE, pk, None)
            ctx.forward(old_fk, unsubscribe, self.subscription_sink)
        if new_fk is None:
            if old_fk is not None:
                sent.delete(pk)
            return
        sent.put(pk, new_fk)
        # hashed as step 3 will hash it: the row read back from the store, so a serde
        # that does not write a decoded value back byte for byte still matches
        digest = value_hash(self._left_values, ctx.store(self.left_store).get(pk))
        ctx.forward(new_fk, Subscription(Instruction.SUBSCRIBE, pk, digest), self.subscription_sink)

    def left_changed(self, ctx: ProcessorContext, pk: Any, value: Any) -> None:
        """Step 4: a deleted row, or one without a foreign key, is decided here."""
        if pk is None:
            return
        if value is None or self.extractor(value) is None:
            update_result(ctx, self.name, pk, joined(self.kind, self.joiner, value, None))

    def respond(self, ctx: ProcessorContext, pk: Any, response: Response) -> None:
        """Step 3: an answer joins the row it was asked for, if that row is still there."""
        if pk is None or response is None:
            return
        current = ctx.store(self.left_store).get(pk)
        if current is None or value_hash(self._left_values, current) != response.value_hash:
            return
        update_result(ctx, self.name, pk, joined(self.kind, self.joiner, current, response.right))

    # -- the right side -----------------------------------------------------------------

    def subscription(self, ctx: ProcessorContext, fk: Any, sub: Subscription) -> None:
        """Step 2: keep or forget a subscription; answer a subscribe at once."""
        if fk is None or sub is None:
            return
        key = subscription_key(self._fk(fk), self._pk(sub.pk))
        subs = ctx.store(self.subscription_store)
        if sub.instruction is Instruction.UNSUBSCRIBE or sub.value_hash is None:
            subs.delete(key)
            return
        subs.put(key, sub.value_hash)
        ctx.forward(sub.pk, Response(sub.value_hash, ctx.store(self.right_store).get(fk)))

    def right_changed(self, ctx: ProcessorContext, fk: Any, value: Any) -> None:
        """Step 2: a right change, answered to every subscriber of its key."""
        if fk is None:
            return
        with ctx.store(self.subscription_store).prefix(subscriber_prefix(self._fk(fk))) as scan:
            subscribers = list(scan)
        for key, digest in subscribers:
            ctx.forward(self._pks.decode(subscriber(key)), Response(digest, value))

    def _fk(self, fk: Any) -> bytes:
        return self._encoded(self._fks, fk, "foreign key")

    def _pk(self, pk: Any) -> bytes:
        return self._encoded(self._pks, pk, "primary key")

    def _encoded(self, codec: Codec, key: Any, what: str) -> bytes:
        data = codec.encode(key)
        if data is None:
            raise TopologyError(f"join {self.name!r}: a {what} that its serde writes as None")
        return data


def add_foreign_key_join(
    topology: Topology,
    name: str,
    left: tuple[str, str],
    right: tuple[str, str],
    foreign_key_extractor: ForeignKeyExtractor,
    joiner: Joiner,
    *,
    kind: FkKind,
    topics: ForeignKeyTopics,
    serdes: ForeignKeySerdes,
) -> Topology:
    """Join table ``left`` to table ``right`` by foreign key, each table given as ``(node
    forwarding its changes, its store)``; the result table is store ``name``.

    Adds the stores ``name``, ``<name>-fk`` (left side) and ``<name>-subscriptions``
    (right side), the sink and source of each internal topic (whose sources take the
    partition count of the table their sub-topology holds), and the processors; the
    result's changes come from :func:`result_parents`.

    Raises:
        TopologyError: a kind other than inner or left, a joiner or extractor that is not
            callable, or as ``Topology``'s methods.
    """
    check_join(name, kind, joiner)
    if kind not in ("inner", "left"):
        raise TopologyError(f"join {name!r}: a foreign-key join is inner or left, not {kind!r}")
    if not callable(foreign_key_extractor):
        raise TopologyError(f"join {name!r}: foreign_key_extractor must be callable")
    join = ForeignKeyJoin(name, left[1], right[1], foreign_key_extractor, joiner, kind, serdes)
    subscriptions = SubscriptionSerde(serdes.left_key)
    responses = ResponseSerde(serdes.right_value)
    topology.add_store(name, serdes.left_key, serdes.result_value)
    topology.add_store(join.fk_store, serdes.left_key, serdes.right_key)
    topology.add_store(join.subscription_store, BYTES, BYTES)
    # the left side: subscriptions out, immediate results
    topology.add_processor(f"{name}-subscribe", join.subscribe, [left[0]], [join.fk_store, left[1]])
    topology.add_sink(
        join.subscription_sink,
        topics.subscription,
        [f"{name}-subscribe"],
        serdes.right_key,
        subscriptions,
    )
    topology.add_processor(f"{name}-left", join.left_changed, [left[0]], [name])
    # the right side: subscriptions in, responses out
    source = f"{name}-subscription-source"
    topology.add_source(
        source, topics.subscription, serdes.right_key, subscriptions, partitioned_as_reader=True
    )
    topology.add_processor(
        f"{name}-subscription", join.subscription, [source], [join.subscription_store, right[1]]
    )
    topology.add_processor(
        f"{name}-right", join.right_changed, [right[0]], [join.subscription_store]
    )
    topology.add_sink(
        join.response_sink,
        topics.response,
        [f"{name}-subscription", f"{name}-right"],
        serdes.left_key,
        responses,
    )
    # the left side again: responses in, results out
    source = f"{name}-response-source"
    topology.add_source(
        source, topics.response, serdes.left_key, responses, partitioned_as_reader=True
    )
    return topology.add_processor(f"{name}-response", join.respond, [source], [left[1], name])


def result_parents(name: str) -> list[str]:
    """The nodes that forward foreign-key join ``name``'s result changes."""
    return [f"{name}-left", f"{name}-response"]


def internal_sinks(name: str) -> tuple[str, str]:
    """The sinks writing foreign-key join ``name``'s subscription and response topics."""
    return f"{name}-subscription-sink", f"{name}-response-sink"
