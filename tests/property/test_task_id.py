"""TaskId names are canonical: one task, one directory name, one parse."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from worker.assignment.task_id import TaskId

task_ids = st.builds(TaskId, st.integers(0, 10**6), st.integers(0, 10**6))


@given(task_ids)
def test_a_task_id_parses_back_from_its_name(task_id: TaskId) -> None:
    assert TaskId.parse(str(task_id)) == task_id
    assert TaskId.is_task_name(str(task_id))


@given(st.text(alphabet="0123456789_ +-\n\u0663x", max_size=8))
def test_only_the_canonical_name_of_a_task_parses(text: str) -> None:
    try:
        parsed = TaskId.parse(text)
    except ValueError:
        assert not TaskId.is_task_name(text)
    else:
        assert str(parsed) == text


@pytest.mark.parametrize("text", ["00_03", "0_03", "0_3\n", " 0_3", "+0_3", "\u0663_1", "0__3"])
def test_non_canonical_forms_are_not_task_ids(text: str) -> None:
    with pytest.raises(ValueError, match="not a task id"):
        TaskId.parse(text)
