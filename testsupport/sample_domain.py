"""The sample domain the outbox is exercised with, by core's tests and the event pipeline's:
tables, the events their changes record, and two actions.

- ``Gadget`` (a sharded UUID key): created, recoloured, removed, priced (``GadgetPriced`` carries
  every value type the event codec must round-trip);
- ``Memo`` (an integer key the database assigns): written;
- ``Note`` of a gadget and its ``AuditEntry``: a chain of actions run from handlers.

Imported by name (``from testsupport.sample_domain import Gadget``), not from the package, so the
tests that never touch the outbox do not load ``ekbatan.core``. Only ``ekbatan.core`` is used here:
core's tests import this module and must not depend on any package above core. The demo
(``ekbatan.integrations.demo``) has a shop of its own: it is shipped, and this is not.
"""

from __future__ import annotations

import enum
import uuid
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

import sqlalchemy as sa
from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

from ekbatan.core import Action, ModelEvent, ShardedUUID, ShardIdentifier


class Base(DeclarativeBase):
    pass


class Gadget(Base):
    __tablename__ = "gadgets"

    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(50))
    color: Mapped[str] = mapped_column(sa.String(20))


class Memo(Base):
    __tablename__ = "memos"

    id: Mapped[int] = mapped_column(sa.Integer, primary_key=True, autoincrement=True)
    text: Mapped[str] = mapped_column(sa.String(200))


class Note(Base):
    __tablename__ = "notes"

    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    gadget_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid)
    text: Mapped[str] = mapped_column(sa.String(200))


class AuditEntry(Base):
    __tablename__ = "audit_entries"

    id: Mapped[uuid.UUID] = mapped_column(sa.Uuid, primary_key=True)
    note_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid)
    gadget_id: Mapped[uuid.UUID] = mapped_column(sa.Uuid)


class Shade(enum.Enum):
    RED = "red"
    BLUE = "blue"


class Dimensions(BaseModel):
    """A value object nested inside an event."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)

    width_mm: int
    height_mm: int


class GadgetCreated(ModelEvent):
    name: str
    color: str


class GadgetRecolored(ModelEvent):
    old_color: str
    new_color: str


class GadgetRemoved(ModelEvent):
    reason: str


class MemoWritten(ModelEvent):
    text: str


class GadgetPriced(ModelEvent):
    """Every value type the codec must round-trip."""

    price: Decimal
    priced_at: datetime
    catalog_id: uuid.UUID
    shade: Shade
    dimensions: Dimensions
    tags: list[str]
    discount: Decimal | None = None


class NoteCreated(ModelEvent):
    gadget_id: uuid.UUID
    text: str


@dataclass(frozen=True)
class NewGadget:
    shard: ShardIdentifier
    name: str
    color: str


class GadgetCreateAction(Action[NewGadget, uuid.UUID]):
    def perform(self, principal: Any, params: NewGadget) -> uuid.UUID:
        gadget = Gadget(id=ShardedUUID.generate(params.shard), name=params.name, color=params.color)
        self.plan.add(gadget, GadgetCreated(name=params.name, color=params.color))
        return gadget.id


@dataclass(frozen=True)
class NewNote:
    gadget_id: uuid.UUID
    text: str


class NoteCreateAction(Action[NewNote, uuid.UUID]):
    def perform(self, principal: Any, params: NewNote) -> uuid.UUID:
        # on its gadget's shard: the note and its event are written where the gadget lives
        shard = ShardedUUID.shard_of(params.gadget_id) or ShardIdentifier.DEFAULT
        note = Note(id=ShardedUUID.generate(shard), gadget_id=params.gadget_id, text=params.text)
        self.plan.add(note, NoteCreated(gadget_id=params.gadget_id, text=params.text))
        return note.id
