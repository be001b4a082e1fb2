"""How RESULTS.md prints figures: numbers, ratios, verdicts and Markdown tables."""

from __future__ import annotations

from typing import Any


def num(x: Any, digits: int = 0, unit: str = "") -> str:
    if x is None:
        return "–"
    if isinstance(x, int | float):
        if digits == 0:
            return f"{x:,.0f}{unit}"
        return f"{x:,.{digits}f}{unit}"
    return str(x)


def r2(x: float | None) -> str:
    return "–" if x is None else f"{x:.2f}"


def ratio_of(a: float | None, b: float | None) -> float | None:
    if a is None or not b:
        return None
    return a / b


def table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join(r) + " |" for r in rows]
    return out


def verdict(r: float | None) -> str:
    return "–" if r is None else f"{r:.2f} {'✅' if r >= 1 else '❌'}"
