"""Events, the codec, the simple-name guard and namespaces (no database)."""

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone
from decimal import Decimal

import outbox_support
import pytest
from pydantic import model_serializer

from ekbatan.core import (
    Action,
    ActionExecutor,
    ConnectionProvider,
    DatabaseRegistry,
    EventCodec,
    EventTypeCollisionError,
    ModelEvent,
    ShardIdentifier,
    TransactionManager,
)
from ekbatan.core.outbox import (
    EventTypeRegistry,
    InvalidEventError,
    default_codec,
    default_event_types,
    validate_namespace,
)
from testsupport.sample_domain import Dimensions, Gadget, GadgetCreated, GadgetPriced, Memo, Shade


def test_encoding_uses_camel_case_keys_and_the_class_simple_name():
    event = GadgetCreated(model_id="g-1", model_name="Gadget", name="alpha", color="red")

    encoded = EventCodec(EventTypeRegistry()).encode(event)

    assert encoded.event_type == "GadgetCreated" == GadgetCreated.event_type()
    assert (encoded.model_id, encoded.model_type) == ("g-1", "Gadget")
    assert encoded.payload == {"modelId": "g-1", "modelName": "Gadget", "name": "alpha", "color": "red"}


def test_every_value_type_round_trips_through_json_text():
    codec = EventCodec(EventTypeRegistry())
    event = GadgetPriced(
        model_id=uuid.UUID("0191d6a4-7000-7000-8000-000000000001"),
        model_name="Gadget",
        price=Decimal("1234567890.123456789"),
        priced_at=datetime(2026, 3, 1, 13, 0, 0, 7, tzinfo=timezone(timedelta(hours=3, minutes=30))),
        catalog_id=uuid.uuid4(),
        shade=Shade.BLUE,
        dimensions=Dimensions(width_mm=1, height_mm=2),
        tags=[],
        discount=Decimal("0.10"),
    )
    text = json.dumps(codec.encode(event).payload)

    decoded = codec.decode(text, GadgetPriced)
    assert decoded == event
    assert decoded.model_id == "0191d6a4-7000-7000-8000-000000000001"
    assert decoded.priced_at == datetime(2026, 3, 1, 9, 30, 0, 7, tzinfo=UTC)
    assert isinstance(decoded.price, Decimal) and isinstance(decoded.shade, Shade)


def test_decoding_accepts_snake_case_and_ignores_unknown_keys():
    decoded = default_codec.decode(
        {"model_id": "1", "modelName": "Gadget", "name": "a", "color": "red", "addedLater": True},
        GadgetCreated,
    )
    assert decoded == GadgetCreated(model_id="1", model_name="Gadget", name="a", color="red")
    with pytest.raises(InvalidEventError, match="payload does not decode as GadgetCreated"):
        default_codec.decode({"name": "a"}, GadgetCreated)
    with pytest.raises(InvalidEventError, match="must be a JSON object; got list"):
        default_codec.decode("[1]", GadgetCreated)


class Scalar(ModelEvent):
    value: int

    @model_serializer
    def _as_number(self) -> int:
        return self.value


def test_an_event_that_does_not_serialize_to_an_object_is_refused():
    with pytest.raises(
        InvalidEventError, match="event must serialize to a JSON object; Scalar serialized to int"
    ):
        EventCodec(EventTypeRegistry()).encode(Scalar(value=3))
    with pytest.raises(InvalidEventError, match="events must be ModelEvent instances; got dict"):
        default_codec.encode({"modelId": "1"})


def test_decode_named_finds_classes_the_codec_has_seen():
    codec = EventCodec(EventTypeRegistry())
    with pytest.raises(LookupError, match="no event class is known for event_type 'GadgetCreated'"):
        codec.decode_named("GadgetCreated", {})
    codec.register(GadgetCreated)
    assert codec.decode_named("GadgetCreated", {"name": "a", "color": "b"}) == GadgetCreated(
        name="a", color="b"
    )


# The same simple name as outbox_support.OutboxTwinEvent, in another module.
class OutboxTwinEvent(ModelEvent):
    note: str


def test_two_classes_with_one_simple_name_are_refused_naming_both():
    registry = EventTypeRegistry()
    assert registry.register(outbox_support.OutboxTwinEvent) == "OutboxTwinEvent"
    assert registry.register(outbox_support.OutboxTwinEvent) == "OutboxTwinEvent"  # same class: fine

    with pytest.raises(EventTypeCollisionError) as raised:
        registry.register(OutboxTwinEvent)

    assert str(raised.value).startswith(
        "Event type simple name collision: OutboxTwinEvent maps to both "
        "outbox_support.OutboxTwinEvent and test_outbox_events.OutboxTwinEvent"
    )
    assert registry.lookup("OutboxTwinEvent") is outbox_support.OutboxTwinEvent


def test_a_class_defined_again_under_the_same_qualified_name_replaces_the_first():
    registry = EventTypeRegistry()

    def define():
        class Redefined(ModelEvent):
            pass

        return Redefined

    first, second = define(), define()
    assert first is not second
    registry.register(first)
    registry.register(second)
    assert registry.lookup("Redefined") is second


def test_the_process_wide_guard_stops_an_action_and_rolls_back_its_changes(shard_db):
    # The default codec shares default_event_types: the first class seen owns the name.
    default_codec.register(outbox_support.OutboxTwinEvent)

    class CreateWithTwin(Action[dict, None]):
        def perform(self, principal, params):
            self.plan.add(Gadget(id=uuid.uuid4(), name="twin", color="red"), OutboxTwinEvent(note="collides"))

    executor = ActionExecutor(DatabaseRegistry([shard_db.manager]), namespace="test")
    with pytest.raises(EventTypeCollisionError, match="OutboxTwinEvent maps to both"):
        executor.execute(CreateWithTwin(), {})

    assert shard_db.count(Gadget) == 0
    assert shard_db.event_rows() == []
    assert default_event_types.lookup("OutboxTwinEvent") is outbox_support.OutboxTwinEvent


def test_about_takes_the_model_id_and_name_from_an_instance():
    gadget_id = uuid.uuid4()
    event = GadgetCreated.about(Gadget(id=gadget_id, name="a", color="red"), name="a", color="red")
    assert (event.model_id, event.model_name) == (str(gadget_id), "Gadget")
    with pytest.raises(ValueError, match=r"Memo has no primary key yet; .*plan.add\(instance, GadgetCreated"):
        GadgetCreated.about(Memo(text="unsaved"), name="a", color="b")


def test_model_id_accepts_uuids_and_integers_as_text():
    assert GadgetCreated(model_id=7, name="a", color="b").model_id == "7"
    with pytest.raises(ValueError):
        GadgetCreated(model_id=True, name="a", color="b")


ACCEPTED = ["wallet", "test.local_event_handler", "_leading.underscore", "a1.b2.c3", "A.B"]
REJECTED = [
    "my-service",
    "9leading.digit",
    "trailing.",
    ".leading",
    "double..dot",
    "has space",
    "",
    "x" * 256,
]


@pytest.mark.parametrize("namespace", ACCEPTED)
def test_dotted_identifiers_are_accepted_as_namespace(namespace):
    assert validate_namespace(namespace) == namespace


@pytest.mark.parametrize("namespace", REJECTED)
def test_other_namespaces_are_refused(namespace):
    with pytest.raises(ValueError, match="is not a dotted identifier"):
        validate_namespace(namespace)


def test_a_hyphenated_namespace_gets_the_underscore_hint_from_the_executor():
    registry = DatabaseRegistry(
        [TransactionManager(ConnectionProvider.from_url("sqlite://"), shard=ShardIdentifier(0, 0))]
    )
    with registry, pytest.raises(ValueError, match="hyphens are not allowed, write 'my_service.orders'"):
        ActionExecutor(registry, namespace="my-service.orders")
    with pytest.raises(TypeError, match="namespace must be a string"):
        validate_namespace(None)
