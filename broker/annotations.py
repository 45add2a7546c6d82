"""Annotations and labels of a resource: string -> string objects, keys and values as Nakadi
allows them (Kubernetes-like: an optional lowercase domain prefix and a name).

``annotations_problem("labels", body.get("labels"))`` is None for an acceptable value (absent
included), else the 422 detail in Nakadi's words.
"""

from __future__ import annotations

import re
from typing import Literal

Kind = Literal["annotations", "labels"]

# Each key rule in Nakadi's order, with its message.
_KEY_RULES = [
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
]
_LABEL_VALUE = re.compile(r"([a-zA-Z0-9]([a-zA-Z0-9_.-]*[a-zA-Z0-9])?)?")
MAX_ANNOTATION_VALUE = 1000
MAX_LABEL_VALUE = 63


def annotations_problem(kind: Kind, value: object) -> str | None:
    """Why ``value`` is not a valid ``kind`` object, or None (also when it is None)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        return f'Field "{kind}" must be an object of string values'
    for key, text in value.items():
        if not key:
            return f'Field "{kind}" Key cannot be empty'
        for pattern, message in _KEY_RULES:
            if not pattern.fullmatch(key):
                return f'Field "{kind}" key "{key}": {message}'
        if kind == "annotations" and len(text) > MAX_ANNOTATION_VALUE:
            return f'Field "{kind}" value of "{key}": size must be between 0 and 1000'
        if kind == "labels" and len(text) > MAX_LABEL_VALUE:
            return f'Field "{kind}" value of "{key}": size must be between 0 and 63'
        if kind == "labels" and not _LABEL_VALUE.fullmatch(text):
            return f'Field "{kind}" value of "{key}": Should contain only allowed symbols'
    return None
