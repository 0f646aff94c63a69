"""The generic state machine every lifecycle uses: guard, log line, counter and gauge."""

from __future__ import annotations

import enum

import pytest
import structlog
from prometheus_client import CollectorRegistry, Counter, Gauge
from structlog.testing import capture_logs

from worker.errors import FatalError
from worker.lifecycle import IllegalTransition, StateMachine


class Light(enum.Enum):
    OFF = "off"
    ON = "on"
    BROKEN = "broken"


TABLE = {
    Light.OFF: frozenset({Light.ON, Light.BROKEN}),
    Light.ON: frozenset({Light.OFF, Light.BROKEN}),
    Light.BROKEN: frozenset(),
}


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def machine(registry: CollectorRegistry, repeat_ok: bool = False) -> StateMachine[Light]:
    transitions = Counter("light_transitions", "", ["to"], registry=registry)
    gauge = Gauge("light_state", "", ["state"], registry=registry)
    return StateMachine(
        "light",
        Light.OFF,
        TABLE,
        structlog.get_logger().bind(room="hall"),
        transitions=transitions,
        gauge=gauge,
        repeat_ok=repeat_ok,
    )


def gauge_of(registry: CollectorRegistry) -> dict[str, float | None]:
    return {s.value: registry.get_sample_value("light_state", {"state": s.value}) for s in Light}


def test_the_gauge_shows_the_initial_state_before_any_move(registry: CollectorRegistry) -> None:
    machine(registry)

    assert gauge_of(registry) == {"off": 1, "on": 0, "broken": 0}


def test_an_allowed_move_is_logged_with_the_bound_context_counted_and_gauged(
    registry: CollectorRegistry,
) -> None:
    light = machine(registry)

    with capture_logs() as logs:
        light.transition(Light.ON, reason="switch", generation=3)

    assert light.state is Light.ON
    assert logs == [
        {
            "event": "light.transition",
            "log_level": "info",
            "room": "hall",
            "src": "off",
            "dst": "on",
            "reason": "switch",
            "generation": 3,
        }
    ]
    assert registry.get_sample_value("light_transitions_total", {"to": "on"}) == 1
    assert gauge_of(registry) == {"off": 0, "on": 1, "broken": 0}


def test_a_forbidden_move_raises_a_fatal_error_and_changes_nothing(
    registry: CollectorRegistry,
) -> None:
    light = machine(registry)
    light.transition(Light.BROKEN)

    with capture_logs() as logs, pytest.raises(IllegalTransition, match="light: broken -> on"):
        light.transition(Light.ON)

    assert issubclass(IllegalTransition, FatalError)
    assert light.state is Light.BROKEN
    assert logs == []
    assert registry.get_sample_value("light_transitions_total", {"to": "on"}) is None


def test_a_move_to_the_current_state_is_illegal_unless_repeats_are_allowed(
    registry: CollectorRegistry,
) -> None:
    strict = machine(registry)
    with pytest.raises(IllegalTransition):
        strict.transition(Light.OFF)

    sampled = machine(CollectorRegistry(), repeat_ok=True)
    with capture_logs() as logs:
        sampled.transition(Light.OFF)
    assert sampled.state is Light.OFF
    assert logs == []


def test_a_table_without_a_row_for_every_state_is_refused() -> None:
    with pytest.raises(ValueError, match="BROKEN"):
        StateMachine("light", Light.OFF, {Light.OFF: frozenset(), Light.ON: frozenset()}, None)
