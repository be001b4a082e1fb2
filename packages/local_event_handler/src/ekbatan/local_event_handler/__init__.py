"""Ekbatan's local event handlers: outbox events fanned out to in-process handlers by two
distributed jobs. Not built yet — see DESIGN.md; the outbox write path is ``ekbatan.core.outbox``."""

__all__: list[str] = []
