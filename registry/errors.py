"""OpenSchema error bodies: ``{"errorCode": 40401, "errorMessage": "..."}``.

As docs/specs/openschema-spec-cn.txt, chapter 4, has them.

The code's first three digits are the HTTP status. Compatibility failures also
carry ``violations``: each reason with its path, rule and, where the engine built one, an
example that shows it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from changebroker.registry.compat import Violation

UNAUTHORIZED = 40101
SUBJECT_NOT_FOUND = 40401  # also: schema id not found
VERSION_NOT_FOUND = 40402
INCOMPATIBLE = 40901
INVALID_INPUT = 42201
INVALID_VERSION = 42202
STORAGE_ERROR = 50001
STORAGE_TIMEOUT = 50002
# Outside the spec's list, for HTTP situations it does not cover.
ROUTE_NOT_FOUND = 40403
METHOD_NOT_ALLOWED = 40501
NOT_ACCEPTABLE = 40601
UNSUPPORTED_MEDIA_TYPE = 41501
PAYLOAD_TOO_LARGE = 41301
FORBIDDEN = 40301  # a valid token without the scope the call needs
# A delete of what the broker's event types still use, or a change of their subjects.
IN_USE = 40902


class RegistryError(Exception):
    """An answer other than success; the app turns it into the error body."""

    def __init__(self, code: int, message: str, violations: Sequence[Violation] = ()) -> None:
        super().__init__(message)
        self.code = code
        self.message = message
        self.violations = list(violations)

    @property
    def status(self) -> int:
        return self.code // 100

    def body(self) -> dict[str, Any]:
        body: dict[str, Any] = {"errorCode": self.code, "errorMessage": self.message}
        if self.violations:
            body["violations"] = violations_json(self.violations)
        return body


def violations_json(violations: Sequence[Violation]) -> list[dict[str, Any]]:
    """Each violation as the API answers it; ``example`` is null and ``proven`` false where the
    engine is only cautious (or the format's engine builds no examples)."""
    return [
        {
            "path": v.path,
            "rule": v.rule,
            "message": v.message,
            "example": v.example,
            "proven": v.proven,
        }
        for v in violations
    ]


def incompatible(violations: Sequence[Violation], what: str) -> RegistryError:
    first = violations[0]
    more = f" (and {len(violations) - 1} more)" if len(violations) > 1 else ""
    return RegistryError(INCOMPATIBLE, f"{what}: {first.message} at {first.path}{more}", violations)
