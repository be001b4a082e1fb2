"""Building discovered classes: their constructor parameters come from the application's
dependency-injector container, then from Ekbatan's own objects.

A parameter is resolved by its name first (a provider of that name), then by its type
annotation (a provider whose product is of that type). The user's container is asked before
Ekbatan's objects in each step, so the application can override anything. A parameter that
cannot be resolved and has no default fails with the class, the parameter and what is on offer.
"""

from __future__ import annotations

import collections.abc
import inspect
import typing
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from ekbatan.integrations.discovery import describe


class ConstructionError(TypeError):
    """A discovered class could not be built."""


@dataclass(frozen=True)
class Offer:
    """One injectable thing: how to get it, and the type it is known to produce (or None)."""

    get: Callable[[], Any]
    produces: type | None


def offers_of_container(container: Any) -> dict[str, Offer]:
    """The providers of a dependency-injector container (or anything with a ``providers`` mapping)."""
    if container is None:
        return {}
    providers = getattr(container, "providers", None)
    if not isinstance(providers, Mapping):
        raise TypeError(
            f"container must be a dependency-injector container (with .providers); got {type(container).__name__}"
        )
    return {name: Offer(provider, _product_type(provider)) for name, provider in providers.items()}


def _product_type(provider: Any) -> type | None:
    provides = getattr(provider, "provides", None)
    if isinstance(provides, type):
        return provides  # Singleton, Factory, ... of a class
    if type(provider).__name__ == "Object" and provides is not None:
        return type(provides)
    if callable(provides):  # Resource or Callable of a function: its return annotation
        try:
            returned = typing.get_type_hints(provides).get("return")
        except Exception:
            return None
        origin = typing.get_origin(returned)
        if origin in (collections.abc.Iterator, collections.abc.Generator, collections.abc.AsyncIterator):
            returned = typing.get_args(returned)[0]
        return returned if isinstance(returned, type) else None
    return None


def construct(cls: type[Any], sources: list[Mapping[str, Offer]]) -> Any:
    """An instance of ``cls`` with every constructor parameter resolved from ``sources``."""
    try:
        signature = inspect.signature(cls)
    except (TypeError, ValueError):
        signature = None
    arguments: dict[str, Any] = {}
    if signature is not None:
        try:
            hints = typing.get_type_hints(cls.__init__)
        except Exception:
            hints = {}
        for name, parameter in signature.parameters.items():
            if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
                continue
            offer = _resolve(name, hints.get(name), sources)
            if offer is not None:
                arguments[name] = offer.get()
            elif parameter.default is parameter.empty:
                on_offer = sorted({n for source in sources for n in source})
                raise ConstructionError(
                    f"cannot build {describe(cls)}: nothing provides its parameter {name!r}"
                    f"{_annotation(hints.get(name))}. Add a provider named {name!r} (or one of that type) to "
                    f"your container; on offer: {', '.join(on_offer) or 'nothing (no container was given)'}"
                )
    try:
        return cls(**arguments)
    except Exception as error:
        raise ConstructionError(f"cannot build {describe(cls)}: {type(error).__name__}: {error}") from error


def _resolve(name: str, annotation: Any, sources: list[Mapping[str, Offer]]) -> Offer | None:
    for source in sources:
        if name in source:
            return source[name]
    if isinstance(annotation, type) and annotation is not object:
        for source in sources:
            for offer in source.values():
                if offer.produces is not None and issubclass(offer.produces, annotation):
                    return offer
    return None


def _annotation(annotation: Any) -> str:
    if annotation is None:
        return ""
    return f" ({getattr(annotation, '__qualname__', annotation)})"
