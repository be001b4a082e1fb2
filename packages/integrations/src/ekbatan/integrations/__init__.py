"""Ekbatan wiring for FastAPI, Flask and dependency-injector. Not built yet — see DESIGN.md."""

__all__: list[str] = []
