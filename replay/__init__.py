"""The replay job: the bridge's data-change events -> Parquet snapshots and their manifest."""

from changebroker.replay.job import ReplayOptions, run_replay
from changebroker.replay.snapshots import Manifest

__all__ = ["Manifest", "ReplayOptions", "run_replay"]
