"""What the broker refuses, as one hierarchy: each error carries its Problem JSON.

Endpoints and the functions they call raise these; one handler in the app
(:func:`changebroker.broker.problems.render`) answers them as ``application/problem+json``
with the error's ``status``, ``title`` (the status phrase unless given) and
``detail``. Errors whose status depends on who asks (a cursor is 412 to the
stream and 422 to cursor operations) stay plain ``ValueError`` subclasses in
their modules, and the endpoint raises the one that fits.
"""

from __future__ import annotations

from typing import Any

# Nakadi's words when a PUT would drop an event type's or a subscription's authorization.
AUTHORIZATION_KEPT = "Changing authorization object to `null` is not possible due to existing one"


class BrokerError(Exception):
    """A request the broker does not serve, and the Problem that says why."""

    status = 500

    def __init_subclass__(cls, status: int | None = None, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if status is not None:
            cls.status = status

    def __init__(
        self, detail: str | None = None, *, status: int | None = None, title: str | None = None
    ) -> None:
        super().__init__(detail)
        if status is not None:
            self.status = status
        self.detail = detail
        self.title = title


class BadRequest(BrokerError, status=400): ...


class Forbidden(BrokerError, status=403):
    """A known caller not allowed to do this: refused by the gate (broker/access.py) alone."""


class NotFound(BrokerError, status=404): ...


class Conflict(BrokerError, status=409): ...


class PreconditionFailed(BrokerError, status=412): ...


class Unprocessable(BrokerError, status=422): ...


class FeatureNotAvailable(BrokerError, status=501):
    """Switched off by a feature (``/settings/features``), as Nakadi answers it."""


class Unavailable(BrokerError, status=503): ...


class EventTypeNotFound(NotFound):
    def __init__(self, name: str) -> None:
        super().__init__(f'EventType "{name}" does not exist.')


class SubscriptionNotFound(NotFound):
    def __init__(self, subscription_id: str) -> None:
        super().__init__(f'Subscription with id "{subscription_id}" does not exist')
