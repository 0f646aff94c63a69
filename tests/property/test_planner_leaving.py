"""Invariants of the planner's step g (leaving clients) over random groups."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tests.property.test_planner import NOW, Case, _intended, _owners, cases, prints_blob
from worker.assignment.planner import plan


@prints_blob
@given(cases(), st.data())
def test_leaving_clients_get_nothing_and_every_task_goes_to_a_staying_one(
    case: Case, data: st.DataObject
) -> None:
    names = sorted(case.clients)
    leaving = data.draw(st.frozensets(st.sampled_from(names), max_size=len(names)))
    result = plan(
        case.tasks, case.clients, case.config, NOW, case.stateless, case.moves, leaving=leaving
    )
    if leaving == set(names):
        assert result == case.run(), "everyone leaving: planned as usual"
        return
    for name in leaving:
        assert not (result.active[name] | result.standby[name] | result.warmup[name]), name
    intended = _intended(result)
    assert set(intended) == set(case.tasks)
    assert not set(intended.values()) & leaving, intended
    for task, owner in _owners(result).items():
        claimers = [n for n, c in case.clients.items() if task in c.prev_active]
        assert not claimers or owner in claimers, f"{task} on {owner}, claimed by {claimers}"
