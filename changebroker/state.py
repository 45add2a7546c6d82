"""The state folder: where the local stack keeps data, logs, pids and caches."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def default_state_dir() -> Path:
    return Path(os.environ.get("CHANGEBROKER_STATE_DIR") or REPO_ROOT / ".state")


def default_snapshots_dir() -> Path:
    return StateDir(default_state_dir()).snapshots


@dataclass(frozen=True)
class StateDir:
    root: Path
    # Downloaded jars; the test stack shares the main one so nothing downloads twice.
    cache_root: Path | None = None

    @property
    def logs(self) -> Path:
        return self._dir("logs")

    @property
    def run(self) -> Path:
        return self._dir("run")

    @property
    def cache(self) -> Path:
        """Downloaded jars; ``down --purge`` keeps them. CHANGEBROKER_CACHE_DIR moves them."""
        chosen = self.cache_root or os.environ.get("CHANGEBROKER_CACHE_DIR")
        if not chosen:
            return self._dir("cache")
        Path(chosen).mkdir(parents=True, exist_ok=True)
        return Path(chosen)

    @property
    def snapshots(self) -> Path:
        """Where the replay writes snapshots and the changeserver serves them from; the replay
        makes it, so that a changeserver never serves an empty directory by mistake."""
        return self.root / "snapshots"

    def data(self, name: str) -> Path:
        path = self._dir("data") / name
        path.mkdir(exist_ok=True)
        return path

    def log_file(self, name: str) -> Path:
        return self.logs / f"{name}.log"

    def pid_file(self, name: str) -> Path:
        return self.run / f"{name}.pid"

    def _dir(self, name: str) -> Path:
        path = self.root / name
        path.mkdir(parents=True, exist_ok=True)
        return path
