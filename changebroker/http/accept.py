"""The ``Accept`` header: which media types a client takes, preferred first."""

from __future__ import annotations


def accepted(accept: str) -> list[tuple[float, str]]:
    """An Accept header's media types (lower case) with their q values, the preferred first
    (equal q in the header's order); each service decides what it serves of them."""
    offers = []
    for position, part in enumerate(accept.split(",")):
        media, *params = (piece.strip() for piece in part.split(";"))
        quality = 1.0
        for param in params:
            key, _, value = param.partition("=")
            if key.strip() == "q":
                try:
                    quality = float(value)
                except ValueError:
                    quality = 0.0
        offers.append((-quality, position, media.lower()))
    return [(-negated, media) for negated, _, media in sorted(offers)]
