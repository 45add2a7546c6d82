"""Garbage collection tuned for a server: what start-up made left out of it, and a cycle
collector that runs less often in processes that allocate per event."""

from __future__ import annotations

import gc


def freeze_startup_objects() -> None:
    """Leave what start-up made (modules, settings, the app) out of every later garbage
    collection. Python's full collections walk every object the process holds: with the
    start-up's among them, the bridge spent a fifth of its CPU in them during a burst (one
    full collection ~66 ms, ~9 ms without; measured with gc.callbacks)."""
    gc.freeze()


def tune_gc() -> None:
    """For a process that allocates thousands of short-lived dicts a batch, which refcounting
    frees (the broker's publishing, the bridge's changes): at the default threshold (700) the
    cycle collector ran every few events, and each collection walked the batch in hand (the
    broker: ~1 us per published event, 5%; the bridge: 4-5% of its CPU over a burst, a full
    collection every ~15,000 changes). Cycles are still collected, once 20,000 objects
    accumulate, and what start-up created is frozen out of the full collections."""
    gc.freeze()
    gc.set_threshold(20_000, 10, 10)
