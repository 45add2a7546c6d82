"""The state folder: where the local stack keeps data, logs, pids and caches."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path


def _checkout_root() -> Path | None:
    """The source checkout this code runs from (a clone, or an editable install of one), or
    None when it runs from an installed wheel."""
    root = Path(__file__).resolve().parents[1]
    return root if (root / "pyproject.toml").is_file() else None


def default_state_dir() -> Path:
    """``CHANGEBROKER_STATE_DIR``; else the checkout's ``.state/`` when run from one; else the
    user's XDG state folder, ``$XDG_STATE_HOME/changebroker`` (``~/.local/state/changebroker``).
    """
    chosen = os.environ.get("CHANGEBROKER_STATE_DIR")
    if chosen:
        return Path(chosen)
    checkout = _checkout_root()
    if checkout is not None:
        return checkout / ".state"
    # The XDG Base Directory spec: a relative value is invalid and ignored.
    xdg = os.environ.get("XDG_STATE_HOME", "")
    base = Path(xdg) if os.path.isabs(xdg) else Path.home() / ".local" / "state"
    return base / "changebroker"


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
