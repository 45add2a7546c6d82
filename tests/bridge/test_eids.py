"""Eids are uuid5 of a name in the bridge's namespace: the fast spelling gives the same."""

from __future__ import annotations

import uuid

from changebroker.bridge.data_events import EID_NAMESPACE, eid


def test_eid_is_uuid5_of_the_name() -> None:
    named = ["public.t/0.1a.2", "public.t/0.1a.2/old", 'public.t/snapshot/r/["1","x"]', "ü"]
    # Enough names that every value of the digest's version and variant digits comes up.
    for name in [*named, *(f"public.t/0.{n:x}.0" for n in range(1000))]:
        assert eid(name) == str(uuid.uuid5(EID_NAMESPACE, name))
