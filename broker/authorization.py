"""Who may do what on the broker, as Nakadi decides it.

Three layers, each answering 403 (after authentication answered 401):

- OAuth2 scopes per endpoint (``Scopes.table``), as the Nakadi API's ``security`` sections list
  them; the scope names are configurable.
- Per-resource authorization: an event type's ``authorization`` has ``admins`` (update,
  delete), ``readers`` (streams, cursors) and ``writers`` (publishing); a subscription's has
  ``admins`` and ``readers``. Each is a list of attributes ``{"data_type", "value"}``; a caller
  matches one when the data type is its type (or ``*``) and the value its subject (or ``*``).
  A resource without an ``authorization`` section is open to every authenticated caller.
- The broker's administrators (``/settings/admins``, see ``changebroker.broker.admin_settings``),
  who pass every per-resource check.

With authentication off every caller is unrestricted and nothing here refuses.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from changebroker.auth import Forbidden, Principal, ScopeTable, audit, rule
from changebroker.broker.errors import BadRequest

# Served to every caller, credentials or none: load balancers probe /health without them.
OPEN_PATHS = frozenset({"/health"})

Operation = Literal["admin", "read", "write"]
LISTS: dict[Operation, str] = {"admin": "admins", "read": "readers", "write": "writers"}


@dataclass(frozen=True)
class Scopes:
    """Nakadi's scope names (configurable: an issuer may name them otherwise)."""

    config_write: str = "nakadi.config.write"
    event_type_write: str = "nakadi.event_type.write"
    event_stream_write: str = "nakadi.event_stream.write"
    event_stream_read: str = "nakadi.event_stream.read"

    def table(self) -> ScopeTable:
        """The scope each route needs, as the API's ``security`` sections say (None: any
        authenticated caller; the settings' own administrators decide there). Every route the
        broker serves has its rule here, or is one of ``OPEN_PATHS``
        (tests/broker/test_route_scopes.py walks them); any other method or path needs
        ``config_write``, the strictest: Nakadi's scope for deleting event types and its
        configuration, the one no reader or writer holds."""
        name = r"/event-types/[^/]+"
        subscription = r"/subscriptions/[^/]+"
        read, write = self.event_stream_read, self.event_stream_write
        return ScopeTable(
            (
                # Publishing first: the most frequent request.
                rule("POST", name + "/events", write),
                rule("GET", name + "/events", read),
                rule("GET", r"/event-types/?", None),
                rule("POST", r"/event-types/?", self.event_type_write),
                rule("GET", name, None),
                rule("PUT", name, self.event_type_write),
                rule("DELETE", name, self.config_write),
                rule("GET", name + r"/(schemas(/[^/]+)?|timelines)", None),
                rule("POST", name + "/schemas", self.event_type_write),
                rule("POST", name + "/deleted-events", write),
                rule("GET", name + r"/partitions(/[^/]+)?", read),
                rule("POST", name + "/(cursor-distances|cursors-lag|shifted-cursors)", read),
                rule("GET POST", r"/subscriptions", read),
                rule("GET PUT DELETE", subscription, read),
                rule("GET POST", subscription + "/events", read),
                rule("GET POST PATCH", subscription + "/cursors", read),
                rule("GET", subscription + "/stats", read),
                rule("GET", r"/registry/(enrichment|partition)-strategies", read),
                rule("GET POST", r"/settings/(admins|features)", None),
                rule("GET", r"/settings/blacklist", None),
                rule("PUT DELETE", r"/settings/blacklist/[^/]+/[^/]+", None),
                rule("GET", r"/(metrics|status)", None),
                # Nakadi's envelope schemas for Avro clients: any authenticated caller.
                rule("GET", r"/avro-schemas/[^/]+/versions(/[^/]+)?", None),
                # Storages, timelines and repartitioning: no scope, the broker's administrators
                # decide (broker/timelines/api.py), as Nakadi's API names no scope there.
                rule("GET POST", r"/storages", None),
                rule("GET DELETE", r"/storages/[^/]+", None),
                rule("PUT", r"/storages/default/[^/]+", None),
                rule("POST", name + "/timelines", None),
                rule("PUT", name + "/partition-count", None),
            ),
            strictest=self.config_write,
        )


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
