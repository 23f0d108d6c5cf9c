"""`tectl certs`: the files it writes, and how."""

from __future__ import annotations

import stat
from pathlib import Path

from controller.cli.main import main


def test_keys_are_private_and_links_are_not_written_through(tmp_path: Path) -> None:
    """The defect: each key was written with the umask's mode (0644 commonly) and only then
    made 0600, and every file was written through a symbolic link in its place (one put
    there by whoever shares the directory): `--force` now replaces such a link, and a key
    is 0600 from its creation."""
    d, outside = tmp_path / "certs", tmp_path / "outside"
    d.mkdir()
    outside.write_text("not yours\n")
    for name in ("admin.key", "policy.yaml", "ca.pem"):
        (d / name).symlink_to(outside)
    assert main(["certs", str(d), "--force"]) == 0
    assert outside.read_text() == "not yours\n"
    for name in ("admin.key", "policy.yaml", "ca.pem"):
        assert not (d / name).is_symlink(), name
    for key in d.glob("*.key"):
        assert stat.S_IMODE(key.stat().st_mode) == 0o600, key
    assert "identities:" in (d / "policy.yaml").read_text()
