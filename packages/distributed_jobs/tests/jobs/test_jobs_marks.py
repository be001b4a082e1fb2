"""``ClassMark`` and ``ValueMark``: the one mechanism behind ``@distributed_job``,
``@event_handler`` and the task decorators. A mark is its object's own: a subclass or an
instance of a marked class is not marked. No database."""

from __future__ import annotations

import pytest

from ekbatan.distributed_jobs import (
    ClassMark,
    DistributedJob,
    ValueMark,
    distributed_job,
    one_time_task,
    task_definition_of,
)
from ekbatan.distributed_jobs.scheduler import OneTimeTask


class Base:
    pass


MARK = ClassMark("__test_mark__", Base, "thing", "subclass tests.Base")


def test_a_class_mark_tags_the_class_itself_only():
    class Marked(Base):
        pass

    class Sub(Marked):
        pass

    before = dict(vars(Marked))
    assert MARK.mark(Marked) is Marked
    assert set(vars(Marked)) - set(before) == {"__test_mark__"} and Marked.__test_mark__ is True  # type: ignore[attr-defined]
    assert MARK.marked(Marked)
    assert not MARK.marked(Sub)  # inherited through the class, but not its own
    assert not MARK.marked(Marked())  # an instance sees the class attribute: still not marked
    assert not MARK.marked(Base)
    assert MARK.on(Sub) is None and MARK.on(Marked) is True
    assert MARK.mark(Sub) is Sub and MARK.marked(Sub)


def test_a_class_mark_refuses_what_is_not_a_subclass_of_its_base():
    class Other:
        pass

    with pytest.raises(TypeError) as raised:
        MARK.mark(Other)
    assert str(raised.value) == (
        f"@thing marks Base subclasses; {__name__}.test_a_class_mark_refuses_what_is_not_a_subclass_of_its_base"
        ".<locals>.Other is not one — subclass tests.Base"
    )
    assert "__test_mark__" not in vars(Other)


@pytest.mark.parametrize("target", [None, "Base", Base(), lambda cls: cls])
def test_a_class_mark_refuses_what_is_not_a_class_and_says_to_drop_the_parentheses(target):
    with pytest.raises(TypeError) as raised:
        MARK.mark(target)
    assert str(raised.value) == (
        f"@thing decorates Base subclasses and takes no arguments; got {target!r} (write @thing, not @thing())"
    )


def test_distributed_job_is_a_class_mark():
    class NotAJob:
        pass

    with pytest.raises(
        TypeError, match=r"@distributed_job marks DistributedJob subclasses; .*NotAJob is not one"
    ):
        distributed_job(NotAJob)
    with pytest.raises(TypeError, match=r"write @distributed_job, not @distributed_job\(\)"):
        distributed_job(DistributedJob.__name__)  # type: ignore[type-var]


def test_a_value_mark_carries_its_value_on_the_object_itself():
    mark: ValueMark[str] = ValueMark("__test_value__", str)

    class Tagged:
        pass

    class Sub(Tagged):
        pass

    assert mark.put(Tagged, "hello") is Tagged
    assert mark.on(Tagged) == "hello"
    assert mark.on(Sub) is None and mark.on(Tagged()) is None
    plain = Sub()
    assert mark.put(plain, "instance") is plain and mark.on(plain) == "instance"
    assert mark.on(Sub) is None  # marking an instance leaves its class alone


def test_a_value_mark_ignores_values_of_another_kind_and_objects_without_a_dict():
    mark: ValueMark[str] = ValueMark("__test_value__", str)

    class Wrong:
        __test_value__ = 42

    assert mark.on(Wrong) is None
    assert mark.on(3) is None and mark.on(None) is None and mark.on(object()) is None


def test_the_task_mark_is_a_value_mark_on_the_task_and_on_the_class():
    @one_time_task("marks-fn")
    def fn(instance, ctx):
        pass

    @one_time_task("marks-cls")
    class Cls:
        def execute(self, instance, ctx):
            pass

    class Sub(Cls):
        pass

    assert isinstance(fn, OneTimeTask)
    assert task_definition_of(fn).name == "marks-fn"  # type: ignore[union-attr]
    assert task_definition_of(Cls).name == "marks-cls"  # type: ignore[union-attr]
    assert task_definition_of(Sub) is None
    assert task_definition_of(Cls()) is None  # an instance of a task class is not a task
    assert task_definition_of(fn.handler) is None
