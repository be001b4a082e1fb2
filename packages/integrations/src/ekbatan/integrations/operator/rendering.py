"""The pages' Jinja2 environment: templates shipped with the package, autoescape on for every
template (a task name, instance or datum from the database is text, never markup), and the
filters and links the templates share. Links start at the mount's ``root_path``."""

from __future__ import annotations

import importlib.metadata
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

import jinja2
from starlette.requests import Request
from starlette.templating import Jinja2Templates

__all__ = ["STATIC_DIRECTORY", "Links", "templates"]

_HERE = Path(__file__).resolve().parent


def _release() -> str:
    try:
        return importlib.metadata.version("ekbatan-integrations")
    except importlib.metadata.PackageNotFoundError:  # pragma: no cover - run from a source tree
        return "dev"


#: the release the static files (the stylesheet, live.js) come with
ASSETS_VERSION = _release()
STATIC_DIRECTORY = _HERE / "static"


def _when(value: datetime | None) -> str:
    return "—" if value is None else value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _typed(value: datetime | None) -> str:
    """A time as a ``datetime-local`` input shows and sends it, in UTC."""
    return "" if value is None else value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S")


def _age(value: timedelta | None) -> str:
    if value is None:
        return "—"
    seconds = int(value.total_seconds())
    if seconds < 0:
        # a time in the page's future: written by a clock ahead of the page's
        return "-" + _age(-value)
    if seconds < 120:
        return f"{seconds}s"
    if seconds < 7200:
        return f"{seconds // 60}m {seconds % 60}s"
    return f"{seconds // 3600}h {seconds % 3600 // 60}m"


def _millis(value: float | None) -> str:
    """A duration in milliseconds, as a person reads it."""
    if value is None:
        return "—"
    return f"{value:.0f} ms" if value < 10_000 else f"{value / 1000:.1f} s"


def templates() -> Jinja2Templates:
    environment = jinja2.Environment(
        loader=jinja2.FileSystemLoader(_HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
    )
    environment.filters["when"] = _when
    environment.filters["age"] = _age
    environment.filters["typed"] = _typed
    environment.filters["millis"] = _millis
    return Jinja2Templates(env=environment)


class Links:
    """The pages' addresses under the mount point of this request."""

    def __init__(self, request: Request) -> None:
        self.base = str(request.scope.get("root_path", "")).rstrip("/")

    def page(self, path: str, **query: Any) -> str:
        shown = {k: v for k, v in query.items() if v is not None and v != ""}
        return self.base + path + ("?" + urlencode(shown) if shown else "")

    def overview(self) -> str:
        return self.base + "/"

    def executions(self, **query: Any) -> str:
        return self.page("/executions", **query)

    def execution(self, task: str, instance: str) -> str:
        return f"{self.base}/executions/{quote(task, safe='')}/{quote(instance, safe='')}"

    def action(self, name: str) -> str:
        return f"{self.base}/actions/{quote(name, safe='')}"

    def live(self) -> str:
        return self.base + "/live"

    def static(self, name: str) -> str:
        # the release in the address: a browser never keeps an older release's script or style
        return f"{self.base}/static/{quote(name)}?v={quote(ASSETS_VERSION)}"
