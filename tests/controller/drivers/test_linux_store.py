"""The linux driver's on-disk wanted tables: made inside the lab's directory, never the
lab's directory itself (a lab taken down stays down)."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.drivers.linux_store import IntentStore
from controller.errors import DriverUnavailable


def test_a_store_whose_lab_directory_is_gone_is_unavailable(tmp_path: Path) -> None:
    IntentStore(tmp_path / "te").save("rtsw-p0-r0", {}, lambda owner: 0)
    assert (tmp_path / "te" / "rtsw-p0-r0.npy").exists()
    gone = IntentStore(tmp_path / "lab" / "te")
    with pytest.raises(DriverUnavailable, match="lab.* is gone"):
        gone.save("rtsw-p0-r0", {}, lambda owner: 0)
    with pytest.raises(DriverUnavailable, match="is gone"), gone.locked("rtsw-p0-r0"):
        pass
    assert not (tmp_path / "lab").exists()
