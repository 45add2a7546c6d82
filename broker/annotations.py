"""Annotations and labels of a resource (event type or subscription): string -> string
objects, keys and values as Nakadi allows them (Kubernetes-like: an optional lowercase domain
prefix and a name).

``annotations_problems("labels", body.get("labels"))`` lists every rule the value breaks, in
Nakadi's words (``Field "labels[]" Key cannot be empty``); empty when it is acceptable or
absent.
"""

from __future__ import annotations

import re
from typing import Literal

Kind = Literal["annotations", "labels"]
KINDS: tuple[Kind, ...] = ("annotations", "labels")

# Each key rule in Nakadi's order, with its words (its AnnotationKey and LabelKey constraints).
_KEY_RULES = (
    (
        re.compile(r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[^/]*"),
        "Key name should be an optional lowercase domain name with path",
    ),
    (re.compile(r"([-.a-z0-9]{0,253}/)?[^/]*"), "Key prefix cannot be more than 253 characters."),
    (re.compile(r"([-.a-z0-9]+/)?[^/]{0,63}"), "Key name cannot be more than 63 characters."),
    (
        re.compile(r"([^/]+/)?[a-zA-Z0-9]([a-zA-Z0-9_.-]*[a-zA-Z0-9])?"),
        "Key name should start and end with a letter or a digit",
    ),
)
_LABEL_VALUE = re.compile(r"([a-zA-Z0-9]([a-zA-Z0-9_.-]*[a-zA-Z0-9])?)?")
_LONGEST_VALUE = {"annotations": 1000, "labels": 63}


def annotations_problems(kind: Kind, value: object) -> list[str]:
    """Every rule ``value`` breaks as a ``kind`` object (none when it is None)."""
    if value is None:
        return []
    if not isinstance(value, dict):
        return [f'Field "{kind}" must be an object of string values']
    broken = []
    for key, text in value.items():
        if key == "":
            broken.append(f'Field "{kind}[]" Key cannot be empty')
        broken += [
            f'Field "{kind}[]" {words}' for rule, words in _KEY_RULES if not rule.fullmatch(key)
        ]
        where = f'Field "{kind}[{key}]"'
        if not isinstance(text, str):
            broken.append(f"{where} must be a string")
            continue
        longest = _LONGEST_VALUE[kind]
        if len(text) > longest:
            broken.append(f"{where} size must be between 0 and {longest}")
        if kind == "labels" and not _LABEL_VALUE.fullmatch(text):
            broken.append(f"{where} Should contain only allowed symbols")
    return broken
