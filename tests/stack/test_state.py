"""Where the stack keeps its state when run from a checkout (tests/test_packaging.py runs
it from an installed wheel, where the default is the user's XDG state folder)."""

from __future__ import annotations

from pathlib import Path

import pytest

from changebroker.state import default_state_dir
from tests.support import REPO_ROOT


def test_a_checkout_keeps_its_state_in_its_own_state_folder(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.delenv("CHANGEBROKER_STATE_DIR", raising=False)
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    assert default_state_dir() == REPO_ROOT / ".state"


def test_the_state_dir_variable_overrides_every_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CHANGEBROKER_STATE_DIR", str(tmp_path / "mine"))
    assert default_state_dir() == tmp_path / "mine"
