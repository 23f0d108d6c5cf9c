"""The policy file: read, checked, reloaded."""

from __future__ import annotations

from pathlib import Path

import pytest

from controller.errors import InputError
from controller.service.auth import Identity, PolicyStore, load_policy


def test_a_policy_file_not_utf8_is_refused_and_a_reload_keeps_the_old_one(
    tmp_path: Path,
) -> None:
    """The defect: bytes that are not UTF-8 raised UnicodeDecodeError out of the loader, a
    traceback at `tectl serve` and out of SIGHUP's reload, instead of the file named."""
    path = tmp_path / "policy.yaml"
    path.write_text("identities:\n  CN=ops: [admin]\n")
    store = PolicyStore(path)
    path.write_bytes(b"identities:\n  \xff\xfe: [admin]\n")
    with pytest.raises(InputError, match="not UTF-8"):
        load_policy(path)
    assert store.reload() is False
    assert store.policy.allows(Identity("CN=ops", ("CN=ops",)), "ApplyRoutes")
