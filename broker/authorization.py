"""Who may do what on the broker, as Nakadi decides it.

Three layers, each answering 403 (after authentication answered 401):

- OAuth2 scopes per endpoint (``Scopes.of``), as the Nakadi API's ``security`` sections list
  them; the scope names are configurable.
- Per-resource authorization: an event type's ``authorization`` has ``admins`` (update,
  delete), ``readers`` (streams, cursors) and ``writers`` (publishing); a subscription's has
  ``admins`` and ``readers``. Each is a list of attributes ``{"data_type", "value"}``; a caller
  matches one when the data type is its type (or ``*``) and the value its subject (or ``*``).
  A resource without an ``authorization`` section is open to every authenticated caller.
- The broker's administrators (``/settings/admins``, see ``broker.admin_settings``), who pass
  every per-resource check.

With authentication off every caller is unrestricted and nothing here refuses.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from broker.errors import BadRequest
from changebroker.auth import Forbidden, Principal, audit

Operation = Literal["admin", "read", "write"]
LISTS: dict[Operation, str] = {"admin": "admins", "read": "readers", "write": "writers"}


@dataclass(frozen=True)
class Scopes:
    """Nakadi's scope names (configurable: an issuer may name them otherwise)."""

    config_write: str = "nakadi.config.write"
    event_type_write: str = "nakadi.event_type.write"
    event_stream_write: str = "nakadi.event_stream.write"
    event_stream_read: str = "nakadi.event_stream.read"

    def of(self, method: str, path: str) -> str | None:
        """The scope a request needs, as the API's ``security`` sections say; None: any
        authenticated caller."""
        for methods, pattern, attribute in _SCOPED:
            if method in methods and pattern.fullmatch(path):
                scope: str = getattr(self, attribute)
                return scope
        return None


_NAME = r"/event-types/[^/]+"
_SCOPED: list[tuple[frozenset[str], re.Pattern[str], str]] = [
    (frozenset({"POST"}), re.compile(r"/event-types/?"), "event_type_write"),
    (frozenset({"PUT"}), re.compile(_NAME), "event_type_write"),
    (frozenset({"DELETE"}), re.compile(_NAME), "config_write"),
    (frozenset({"POST"}), re.compile(_NAME + "/schemas"), "event_type_write"),
    (frozenset({"POST"}), re.compile(_NAME + "/(events|deleted-events)"), "event_stream_write"),
    (frozenset({"GET"}), re.compile(_NAME + "/events"), "event_stream_read"),
    (
        frozenset({"POST"}),
        re.compile(_NAME + "/(cursor-distances|cursors-lag|shifted-cursors)"),
        "event_stream_read",
    ),
    (frozenset({"GET"}), re.compile(_NAME + r"/partitions(/[^/]+)?"), "event_stream_read"),
    (
        frozenset({"GET", "POST", "PUT", "PATCH", "DELETE"}),
        re.compile(r"/subscriptions(/.*)?"),
        "event_stream_read",
    ),
    (frozenset({"GET"}), re.compile(r"/registry/.+"), "event_stream_read"),
]


def matches(attribute: Mapping[str, Any], principal: Principal) -> bool:
    data_type, value = attribute.get("data_type"), attribute.get("value")
    return data_type in ("*", principal.type) and value in ("*", principal.sub)


def attribute_query(text: str) -> Principal:
    """A listing's ``writer`` / ``reader`` parameter, ``<data_type>:<value>``, as the caller it
    names; 400 when it is not that."""
    data_type, colon, value = text.partition(":")
    if not colon or not data_type or not value or ":" in value:
        raise BadRequest(f"{text!r} is not <data_type>:<value>, e.g. service:shop")
    return Principal(value, data_type)


def section_problem(section: object, names: Sequence[str]) -> str | None:
    """Why ``section`` is not an ``authorization`` object whose lists ``names`` each hold at
    least one attribute, or None; as Nakadi words it."""
    if not isinstance(section, Mapping):
        return 'Field "authorization" must be an object'
    for name in names:
        attributes = section.get(name)
        if not isinstance(attributes, list) or not attributes:
            return f'Field "authorization.{name}" must contain at least one attribute'
        for attribute in attributes:
            if not (
                isinstance(attribute, Mapping)
                and isinstance(attribute.get("data_type"), str)
                and isinstance(attribute.get("value"), str)
            ):
                return f'Field "authorization.{name}" items must have string data_type and value'
    return None


def lists(authorization: Mapping[str, Any] | None, operation: Operation, who: Principal) -> bool:
    """Does the section's list for ``operation`` name ``who``, by name or by a wildcard? (A
    resource without a section lists nobody: the listings' filters ask who is named.)"""
    return any(matches(a, who) for a in (authorization or {}).get(LISTS[operation]) or ())


def listed(principal: Principal, attributes: Sequence[Mapping[str, Any]] | None) -> bool:
    return principal.unrestricted or any(matches(a, principal) for a in attributes or ())


def allowed(
    principal: Principal,
    authorization: Mapping[str, Any] | None,
    operation: Operation,
    *,
    admin: bool = False,
) -> bool:
    """May ``principal`` do ``operation`` on a resource with this ``authorization`` section?
    ``admin``: the caller is one of the broker's administrators."""
    if principal.unrestricted or admin or not authorization:
        return True
    return listed(principal, authorization.get(LISTS[operation]))


def require(
    principal: Principal,
    authorization: Mapping[str, Any] | None,
    operation: Operation,
    resource: str,
    *,
    admin: bool = False,
) -> None:
    """``Forbidden`` (403), with an audit line, unless ``allowed``."""
    if not allowed(principal, authorization, operation, admin=admin):
        refuse(principal, f"{operation} {resource}", f"not one of the {LISTS[operation]}")


def refuse(principal: Principal, action: str, reason: str, *, detail: str | None = None) -> None:
    """Refuse ``action`` with a 403 and an audit line naming who, what and why; ``detail``:
    what the Problem says, when Nakadi has its own words for it."""
    audit("refused", principal, action, status=403, reason=reason)
    raise Forbidden(detail or f"Access on {action} denied: {reason}")
