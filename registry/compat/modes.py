"""OpenSchema compatibility modes over the JSON Schema and Avro comparisons."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, Literal

from changebroker.registry.compat.avro import avro_violations
from changebroker.registry.compat.avro import parse as parse_avro
from changebroker.registry.compat.json_schema import json_schema_violations
from changebroker.registry.compat.model import Mode, SchemaError, Violation
from changebroker.registry.compat.rules import Rule

Format = Literal["JSON", "AVRO"]

_BACKWARD = {Mode.BACKWARD, Mode.BACKWARD_TRANSITIVE, Mode.FULL, Mode.FULL_TRANSITIVE}
_FORWARD = {Mode.FORWARD, Mode.FORWARD_TRANSITIVE, Mode.FULL, Mode.FULL_TRANSITIVE}


def comparison(fmt: Format, *, examples: bool = True) -> Callable[[Any, Any], list[Violation]]:
    """``(reader, writer) -> violations`` for ``fmt``, for the comparisons of one check;
    ``examples=False`` builds no example for them."""
    if fmt == "JSON":
        return functools.partial(json_schema_violations, unchanged={}, examples=examples, shown={})
    if fmt == "AVRO":
        return functools.partial(avro_violations, examples=examples)
    raise ValueError(f"no compatibility rules for format {fmt!r}: use JSON or AVRO")


def check(
    mode: Mode, new: Any, history: Sequence[Any], fmt: Format, *, examples: bool = True
) -> list[Violation]:
    """Violations of ``mode`` by ``new`` against ``history`` (oldest first); [] = compatible.
    Each carries the example that shows it where the engine proves one (``examples``)."""
    labels = [
        "the latest schema" if index == len(history) - 1 else f"earlier schema #{index + 1}"
        for index in range(len(history))
    ]
    return check_labelled(
        mode, new, list(zip(labels, history, strict=True)), fmt, examples=examples
    )


def check_labelled(
    mode: Mode,
    new: Any,
    history: Sequence[tuple[str, Any]],
    fmt: Format,
    *,
    examples: bool = True,
) -> list[Violation]:
    """As ``check``, with each historical schema named (e.g. "version 3") in the messages."""
    mode = Mode(mode)
    if mode is Mode.NONE or not history:
        return []
    compare = comparison(fmt, examples=examples)
    against = history if mode.transitive else history[-1:]
    invalid = _invalid_now(new, "the new schema", fmt)  # a stored one, replayed in order
    if invalid is not None:
        return [invalid]
    found: list[Violation] = []
    for label, old in reversed(against):  # newest first: the likeliest culprit leads
        stale = _invalid_now(old, label, fmt)
        if stale is not None:
            found.append(stale)
            continue
        if mode in _BACKWARD:
            found += [
                v.relabelled(f"{v.message} (new schema reading data of {label})")
                for v in compare(new, old)
            ]
        if mode in _FORWARD:
            found += [
                v.relabelled(f"{v.message} ({label} reading data of the new schema)")
                for v in compare(old, new)
            ]
    return found


def _invalid_now(old: Any, label: str, fmt: Format) -> Violation | None:
    """A historical schema stored under older, laxer rules: nothing can be promised about it."""
    if fmt != "AVRO":
        return None  # the JSON Schema comparison takes any schema it is given
    try:
        parse_avro(old)
    except SchemaError as error:
        return Violation(
            "#",
            Rule.SCHEMA_INVALID,
            f"{label} is not a valid schema by the current rules ({error}); set the subject's"
            " compatibility to NONE to register past it",
        )
    return None
