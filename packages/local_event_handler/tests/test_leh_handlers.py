"""Handlers, envelopes, the handler registry and backoff: no database."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta

import pytest

from ekbatan.core import ModelEvent
from ekbatan.local_event_handler import (
    EventEnvelope,
    EventHandler,
    EventHandlerRegistry,
    backoff_delay,
    event_handler,
    is_event_handler,
)


class FooEvent(ModelEvent):
    value: int = 0


class BarEvent(ModelEvent):
    pass


class Handler(EventHandler[ModelEvent]):
    def __init__(self, name, event_class=FooEvent, aliases=()):
        self._name, self._event_class, self._aliases = name, event_class, aliases

    def name(self):
        return self._name

    def aliases(self):
        return self._aliases

    def event_type(self):
        return self._event_class

    def handle(self, envelope):
        return None


def registry(*handlers):
    return EventHandlerRegistry.builder().with_handlers(handlers).build()


def test_handlers_are_indexed_by_name_and_event_type():
    alpha, beta, gamma = Handler("alpha"), Handler("beta"), Handler("gamma", BarEvent)
    built = registry(alpha, beta, gamma)
    assert built.subscribers_for("FooEvent") == ("alpha", "beta")
    assert built.subscribers_for("BarEvent") == ("gamma",)
    assert built.subscribers_for("Unknown") == ()
    assert set(built.handled_event_types()) == {"FooEvent", "BarEvent"}
    assert built.handler_for("beta") is beta
    assert built.handler_for("missing") is None


def test_aliases_resolve_for_lookup_but_are_never_subscribers():
    renamed = Handler("email", aliases=("mailer", "old-mailer"))
    built = registry(renamed)
    assert built.handler_for("mailer") is renamed and built.handler_for("old-mailer") is renamed
    assert built.subscribers_for("FooEvent") == ("email",)


def test_an_alias_equal_to_its_own_name_is_refused():
    with pytest.raises(ValueError, match="Handler alias duplicates canonical name: email"):
        registry(Handler("email", aliases=("email",)))


@pytest.mark.parametrize(
    ("first", "second", "taken"),
    [
        (Handler("email"), Handler("other", aliases=("email",)), "email"),  # alias on an existing name
        (Handler("email", aliases=("mailer",)), Handler("mailer"), "mailer"),  # name on an existing alias
        (Handler("a", aliases=("shared",)), Handler("b", aliases=("shared",)), "shared"),  # alias on alias
        (Handler("email"), Handler("email", BarEvent), "email"),  # the same name twice
    ],
)
def test_names_and_aliases_are_globally_unique(first, second, taken):
    with pytest.raises(ValueError, match=f"Handler name or alias already registered: {taken} "):
        registry(first, second)


def test_two_event_classes_with_one_simple_name_are_refused():
    from types import new_class

    twin = new_class("FooEvent", (ModelEvent,))
    twin.__module__ = "elsewhere.events"
    with pytest.raises(ValueError) as raised:
        registry(Handler("alpha"), Handler("beta", twin))
    message = str(raised.value)
    assert "Event type simple name collision: FooEvent" in message
    assert f"{FooEvent.__module__}.FooEvent" in message and "elsewhere.events.FooEvent" in message


def test_several_handlers_of_one_class_are_fine():
    built = registry(Handler("a"), Handler("b"), Handler("c"))
    assert built.subscribers_for("FooEvent") == ("a", "b", "c")
    assert built.handler_names() == ("a", "b", "c")


@pytest.mark.parametrize("blank", ["", "   ", "\t"])
def test_a_blank_name_is_refused_naming_the_class(blank):
    with pytest.raises(ValueError, match=r"test_leh_handlers\.Handler returned a blank name\(\)"):
        registry(Handler(blank))


def test_bad_event_types_and_arguments_are_refused():
    with pytest.raises(ValueError, match="returned None from event_type"):
        registry(Handler("a", None))
    with pytest.raises(TypeError, match="must return a ModelEvent subclass"):
        registry(Handler("a", dict))
    with pytest.raises(ValueError, match="blank alias"):
        registry(Handler("a", aliases=(" ",)))
    with pytest.raises(ValueError, match="handler cannot be None"):
        EventHandlerRegistry.builder().with_handler(None)
    with pytest.raises(ValueError, match="handlers cannot be None"):
        EventHandlerRegistry.builder().with_handlers(None)
    with pytest.raises(ValueError, match="handler cannot be None"):
        EventHandlerRegistry.builder().with_handlers([Handler("a"), None])
    with pytest.raises(TypeError, match="EventHandler instances"):
        EventHandlerRegistry.builder().with_handler(object())


def test_the_marker_only_tags_event_handler_classes():
    @event_handler
    class Marked(Handler):
        pass

    class Unmarked(Marked):
        pass

    assert is_event_handler(Marked) and not is_event_handler(Unmarked) and not is_event_handler(Marked("x"))
    with pytest.raises(TypeError, match=r"test_leh_handlers\..*NotAHandler is not one"):

        @event_handler
        class NotAHandler:
            pass

    with pytest.raises(TypeError, match=r"write @event_handler, not @event_handler\(\)"):
        event_handler()  # type: ignore[call-arg]


def envelope_fields(**overrides):
    now = datetime(2026, 1, 1, tzinfo=UTC)
    fields = {
        "event": FooEvent(value=1),
        "event_id": uuid.uuid4(),
        "namespace": "shop",
        "action_id": uuid.uuid4(),
        "action_name": "CreateFoo",
        "action_params": {},
        "started_date": now,
        "completion_date": now,
        "event_date": now,
    }
    return {**fields, **overrides}


def test_an_envelope_is_frozen_and_needs_every_required_field():
    envelope = EventEnvelope(**envelope_fields())
    assert envelope.model_id is None and envelope.model_type is None
    with pytest.raises(AttributeError):
        envelope.namespace = "other"  # type: ignore[misc]
    for required in (
        "event",
        "event_id",
        "namespace",
        "action_id",
        "action_name",
        "action_params",
        "event_date",
    ):
        with pytest.raises(ValueError, match=f"needs {required}"):
            EventEnvelope(**envelope_fields(**{required: None}))
    with pytest.raises(TypeError):
        EventEnvelope(**{k: v for k, v in envelope_fields().items() if k != "started_date"})
    assert not hasattr(envelope, "attempts") and not hasattr(envelope, "state")


@pytest.mark.parametrize(
    ("attempts", "cap", "expected"),
    [
        (1, timedelta(minutes=5), timedelta(seconds=30)),
        (2, timedelta(minutes=5), timedelta(minutes=1)),
        (3, timedelta(minutes=5), timedelta(minutes=2)),
        (4, timedelta(minutes=5), timedelta(minutes=4)),
        (5, timedelta(minutes=5), timedelta(minutes=5)),
        (7, timedelta(minutes=5), timedelta(minutes=5)),
        (7, timedelta(days=1), timedelta(minutes=32)),
        (1, timedelta(milliseconds=5), timedelta(milliseconds=5)),
        (10_000, timedelta(days=365), timedelta(days=365)),
    ],
)
def test_backoff_doubles_from_30_seconds_and_is_capped(attempts, cap, expected):
    assert backoff_delay(attempts, cap) == expected


def test_backoff_refuses_nonsense():
    with pytest.raises(ValueError, match="at least 1"):
        backoff_delay(0, timedelta(minutes=5))
    with pytest.raises(ValueError, match="cap must be positive"):
        backoff_delay(1, timedelta(0))


def test_a_refused_handler_leaves_nothing_behind():
    builder = EventHandlerRegistry.builder().with_handler(Handler("email", aliases=("mailer",)))
    with pytest.raises(ValueError, match="already registered: mailer"):
        builder.with_handler(Handler("indexer", aliases=("search", "mailer")))
    with pytest.raises(ValueError, match="lists an alias twice"):
        builder.with_handler(Handler("indexer", aliases=("search", "search")))
    built = builder.with_handler(Handler("indexer", aliases=("search",))).build()
    assert built.subscribers_for("FooEvent") == ("email", "indexer")
    assert built.handler_for("search").name() == "indexer"
