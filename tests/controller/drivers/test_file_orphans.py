"""The file driver removes temporary tables left by a writer killed mid-apply, and only those."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

from controller.drivers.file import FileDriver
from controller.model.fabric import Fabric


def test_orphans_of_a_killed_writer_are_removed_live_ones_kept(
    tiny: Fabric, tmp_path: Path
) -> None:
    tables = tmp_path / "tables"
    tables.mkdir()
    orphan = tables / ".rtsw-p0-r0.x1.tmp"
    orphan.write_text('{"switch": "rtsw-p0-r0", "entr')  # cut short by kill -9
    live = tables / ".rtsw-p0-r1.x2.tmp"
    live.write_text("{")
    fd = os.open(live, os.O_RDONLY)
    fcntl.flock(fd, fcntl.LOCK_EX)  # a writer still at work holds its lock
    try:
        driver = FileDriver(tables, fabric=tiny)
        assert driver.orphans_removed == 1
        assert not orphan.exists() and live.exists()
        assert driver.read("rtsw-p0-r0") == ()
    finally:
        os.close(fd)
