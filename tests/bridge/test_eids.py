"""Eids are uuid5 of a name in the bridge's namespace: the fast spelling gives the same."""

from __future__ import annotations

import uuid

from broker.bridge.bridge import EID_NAMESPACE, eid


def test_eid_is_uuid5_of_the_name() -> None:
    for name in ("public.t/0.1a.2", "public.t/0.1a.2/old", 'public.t/snapshot/r/["1","x"]', "ü"):
        assert eid(name) == str(uuid.uuid5(EID_NAMESPACE, name))
