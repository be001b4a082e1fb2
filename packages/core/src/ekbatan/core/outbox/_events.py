"""``ModelEvent``: the base class of every event payload written to ``eventlog.events``.

An event is an immutable pydantic model. It names the model it is about (``model_id``,
``model_name``) and adds its own fields. Its ``event_type`` is the class's simple name.

On the wire (the ``payload`` column) field names are camelCase, as Ekbatan for Java writes them:
``{"modelId": "…", "modelName": "Widget", "name": "alpha", "color": "red"}``. Decoding accepts
camelCase and snake_case keys and ignores keys the class does not know, so an older reader can
decode a payload written by a newer version of the class.
"""

from __future__ import annotations

import uuid
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, field_validator
from pydantic.alias_generators import to_camel

from ekbatan.core.outbox._routing import instance_identity


class ModelEvent(BaseModel):
    """Subclass it for each kind of event; add fields as pydantic fields.

    ``model_id`` and ``model_name`` may be left out when the event is attached to an ORM change
    (``plan.add(widget, WidgetCreated(...))``): the executor fills them from that instance
    after the flush, so database-generated keys work. Values you set yourself are kept.
    A subclass can fix the model name with a default: ``model_name: str | None = "Widget"``.
    """

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        frozen=True,
        extra="ignore",
    )

    model_id: str | None = None
    model_name: str | None = None

    @field_validator("model_id", mode="before")
    @classmethod
    def _id_as_text(cls, value: Any) -> Any:
        # Ids are stored as text: accept UUIDs and integers as they are usually held.
        if isinstance(value, uuid.UUID | int) and not isinstance(value, bool):
            return str(value)
        return value

    @classmethod
    def event_type(cls) -> str:
        """The stored ``event_type``: the class's simple name (``WidgetCreated``)."""
        return cls.__name__

    @classmethod
    def about(cls, model: object, /, **fields: Any) -> Self:
        """An event about ``model`` (an ORM instance with its primary key set, or an object with ``id``).

        ``model_id`` is the primary key as text and ``model_name`` the model's class name.
        """
        model_id, model_name = instance_identity(model)
        if model_id is None:
            raise ValueError(
                f"{model_name} has no primary key yet; set it before the event is made, or attach "
                f"the event to the change (plan.add(instance, {cls.__name__}(...))) so that it is "
                "filled in after the flush"
            )
        return cls(model_id=model_id, model_name=model_name, **fields)
