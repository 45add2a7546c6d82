"""What the client raises: each error says what happened and what to do about it."""

from __future__ import annotations


class ClientError(Exception):
    """Something the client cannot work around by retrying."""


class ChangeFeedError(ClientError):
    """The changeserver refused a request for good (a bad selector, no permission, an
    unsupported format), or answered what is not its API."""


class PositionLost(ChangeFeedError):
    """``SNAPSHOT_TOO_OLD`` with ``on_too_old="raise"``: the change log no longer holds the
    changes after the feed's position."""


class SnapshotUnavailable(ChangeFeedError):
    """No snapshot to start from within ``snapshot_wait``: none published for the selectors,
    or the newest is older than what the change log still holds."""


class PositionMismatch(ChangeFeedError):
    """The position store holds a position for other selectors than the feed reads."""


class SubscriptionError(ClientError):
    """The broker refused the subscription's stream or its commits for good."""


class SubscriptionRefused(SubscriptionError):
    """A subscription could not be created as asked."""
