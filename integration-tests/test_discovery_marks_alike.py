"""Core keeps a copy of ``ekbatan.distributed_jobs.marks.ClassMark`` for ``@action`` (neither
package may import the other): the two must mark, refuse and word their errors alike, and the
four discovery decorators with them."""

from __future__ import annotations

import pytest

from ekbatan.core.outbox import Action, action, is_action
from ekbatan.core.outbox._marks import ClassMark as CoreClassMark
from ekbatan.distributed_jobs import ClassMark, DistributedJob, distributed_job, is_distributed_job
from ekbatan.local_event_handler import EventHandler, event_handler, is_event_handler


class Base:
    pass


class Good(Base):
    pass


class Bad:
    pass


def _outcome(mark: ClassMark | CoreClassMark, target: object) -> tuple[str, object]:
    try:
        return "marked", mark.mark(target)
    except TypeError as error:
        return "refused", str(error)


@pytest.mark.parametrize("target", [Good, Bad, None, "Good", Good()])
def test_core_copy_of_the_class_mark_behaves_as_the_original(target):
    args = ("__parity_mark__", Base, "thing", "subclass Base")
    original, copy = ClassMark(*args), CoreClassMark(*args)
    assert _outcome(copy, target) == _outcome(original, target)
    for probe in (Good, Bad, Good(), type("Sub", (Good,), {})):
        assert copy.marked(probe) == original.marked(probe)


@pytest.mark.parametrize(
    ("decorate", "is_marked", "base"),
    [
        (action, is_action, Action),
        (distributed_job, is_distributed_job, DistributedJob),
        (event_handler, is_event_handler, EventHandler),
    ],
)
def test_every_discovery_decorator_refuses_alike_and_marks_the_class_itself_only(decorate, is_marked, base):
    name, base_name = decorate.__name__, base.__name__
    with pytest.raises(
        TypeError, match=rf"^@{name} marks {base_name} subclasses; .*\.Bad is not one — subclass "
    ):
        decorate(Bad)
    with pytest.raises(
        TypeError,
        match=rf"^@{name} decorates {base_name} subclasses and takes no arguments; .*\(write @{name}, not @{name}\(\)\)$",
    ):
        decorate("Bad")
    marked = decorate(type("Marked", (base,), {}))
    assert is_marked(marked) and not is_marked(type("Sub", (marked,), {})) and not is_marked(base)
