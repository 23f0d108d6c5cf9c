"""The embedded directory store: guarded writes, durable records, and state that cannot be
trusted (truncated, older format, another fabric) reported, never half-read."""

from __future__ import annotations

import json
import logging
import os
from pathlib import Path

import pytest

from controller.errors import StoreConflict, StoreCorrupt, StoreUnavailable
from controller.service.store import FORMAT, DirStore, open_store


def test_guarded_writes_round_trip_and_revisions_only_grow(tmp_path: Path) -> None:
    store = DirStore(tmp_path / "s", "tiny")
    r1 = store.commit("jobs/a", b'{"x": 1}', 0)
    r2 = store.commit("jobs/b/with/slashes", b"{}", 0)
    with pytest.raises(StoreConflict, match="changed at revision"):
        store.commit("jobs/a", b"{}", 0)  # someone else created it first
    r3 = store.commit("jobs/a", b'{"x": 2}', r1)
    r4 = store.commit("jobs/b/with/slashes", None, r2)  # delete
    assert r1 < r2 < r3 < r4
    store.close()
    again = DirStore(tmp_path / "s", "tiny")
    loaded = again.load()
    assert loaded.revision == r4  # a tombstone keeps the counter
    assert loaded.records == {"jobs/a": (b'{"x": 2}', r3)}
    assert again.commit("jobs/c", b"{}", 0) == r4 + 1
    again.close()


def test_one_controller_per_directory(tmp_path: Path) -> None:
    first = DirStore(tmp_path / "s", "tiny")
    with pytest.raises(StoreUnavailable, match="in use by another controller"):
        DirStore(tmp_path / "s", "tiny")
    first.close()
    DirStore(tmp_path / "s", "tiny").close()


def _written(tmp_path: Path) -> Path:
    store = DirStore(tmp_path / "s", "tiny")
    store.commit("jobs/a", b'{"job": 1}', 0)
    store.commit("links", b'{"factors": {}}', 0)
    store.close()
    return tmp_path / "s"


def test_a_record_truncated_mid_write_is_reported_not_half_read(tmp_path: Path) -> None:
    path = _written(tmp_path)
    record = path / "jobs%2Fa.rec"
    text = record.read_bytes()
    record.write_bytes(text[: len(text) // 2])
    with pytest.raises(StoreCorrupt, match=r"jobs%2Fa.rec: truncated or corrupt"):
        DirStore(path, "tiny")


def test_a_flipped_value_fails_its_checksum(tmp_path: Path) -> None:
    path = _written(tmp_path)
    record = path / "links.rec"
    doc = json.loads(record.read_text())
    doc["value"] = doc["value"].replace("{}", '{"x": 0}')
    record.write_text(json.dumps(doc))
    with pytest.raises(StoreCorrupt, match="checksum mismatch"):
        DirStore(path, "tiny")


def test_an_older_format_or_another_fabric_is_refused(tmp_path: Path) -> None:
    path = _written(tmp_path)
    with pytest.raises(StoreCorrupt, match="fabric 'tiny', not 'small'"):
        DirStore(path, "small")
    marker = path / "format.json"
    marker.write_text(json.dumps({"format": FORMAT - 1, "fabric": "tiny"}))
    with pytest.raises(StoreCorrupt, match=f"format {FORMAT - 1}, this controller reads"):
        DirStore(path, "tiny")
    marker.unlink()  # a layout from before the marker existed
    with pytest.raises(StoreCorrupt, match="older format"):
        DirStore(path, "tiny")


def test_a_write_cut_before_its_rename_is_dropped(tmp_path: Path) -> None:
    path = _written(tmp_path)
    (path / ".jobs%2Fb.rec.tmp").write_text('{"format": 1, "key": "jo')  # never acknowledged
    store = DirStore(path, "tiny")
    assert sorted(store.load().records) == ["jobs/a", "links"]
    assert not list(path.glob(".*.tmp"))
    store.close()


def test_store_urls(tmp_path: Path) -> None:
    store = open_store(f"dir:{tmp_path / 'x'}", "tiny")
    assert isinstance(store, DirStore)
    store.close()
    with pytest.raises(ValueError, match="is none of memory .*, dir:PATH and etcd://"):
        open_store("redis://x", "tiny")


def test_keys_past_a_file_name_s_length_are_stored_and_read_back(tmp_path: Path) -> None:
    """The defect: a valid 128-character job id of '/' (or of non-ASCII letters) quoted to
    a file name past 255 bytes: PutJob failed INTERNAL with a traceback. Such a key is named
    by its start and a digest; two that share the start stay apart; short keys keep their
    names (a store written before reads the same)."""
    store = DirStore(tmp_path / "s", "tiny")
    keys = ["jobs/" + "/" * 128, "jobs/" + "é" * 128, "jobs/" + "é" * 127 + "x", "jobs/a"]
    for i, key in enumerate(keys):
        store.commit(key, f'{{"i": {i}}}'.encode(), 0)
    names = sorted(p.name for p in (tmp_path / "s").glob("*.rec"))
    assert len(names) == 4 and max(len(n.encode()) for n in names) <= 250
    assert "jobs%2Fa.rec" in names
    store.close()
    again = DirStore(tmp_path / "s", "tiny")
    assert {k: v for k, (v, _) in again.load().records.items()} == {
        key: f'{{"i": {i}}}'.encode() for i, key in enumerate(keys)}
    again.close()


def test_deletes_keep_one_tombstone_while_open(tmp_path: Path) -> None:
    """A service that puts and deletes jobs for months: one file per live key and one
    tombstone, not one per key ever deleted; a key put again after its delete is kept."""
    store = DirStore(tmp_path / "s", "tiny")
    revs = {f"jobs/j{i}": store.commit(f"jobs/j{i}", b"{}", 0) for i in range(50)}
    for i in range(0, 50, 2):
        revs[f"jobs/j{i}"] = store.commit(f"jobs/j{i}", None, revs[f"jobs/j{i}"])
    files = sorted(p.name for p in (tmp_path / "s").glob("*.rec"))
    assert len(files) == 25 + 1  # the odd jobs, and the newest tombstone (j48)
    again = store.commit("jobs/j48", b'{"back": 1}', 0)  # its tombstone file is live again
    last = store.commit("jobs/j1", None, revs["jobs/j1"])
    assert len(list((tmp_path / "s").glob("*.rec"))) == 24 + 1 + 1  # j48 live, j1 a tombstone
    store.close()
    reopened = DirStore(tmp_path / "s", "tiny")
    loaded = reopened.load()
    assert loaded.revision == last and loaded.records["jobs/j48"] == (b'{"back": 1}', again)
    assert sorted(loaded.records) == sorted(
        [f"jobs/j{i}" for i in range(3, 50, 2)] + ["jobs/j48"])
    reopened.close()


def test_a_store_refusing_writes_says_so_until_it_takes_them_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The directory refusing writes (a read-only or full disk): every input was refused
    with UNAVAILABLE while Status (`store_ok`, this `healthy`) said the store was ok and the
    log said nothing. Now it is not ok from the first refused write, logged once, and ok
    again as soon as the directory takes writes, without waiting for the next input."""
    store = DirStore(tmp_path / "s", "tiny")
    assert store.healthy
    real = os.replace

    def refuse(src: str, dst: str) -> None:
        raise PermissionError(1, "Operation not permitted", str(src))

    monkeypatch.setattr(os, "replace", refuse)
    with caplog.at_level(logging.INFO, logger="fabric_te.store"):
        with pytest.raises(StoreUnavailable, match="cannot write"):
            store.commit("jobs/a", b"{}", 0)
        assert not store.healthy and not store.healthy
        with pytest.raises(StoreUnavailable):
            store.commit("jobs/b", b"{}", 0)
        refused = [r for r in caplog.records if "refusing writes" in r.getMessage()]
        assert len(refused) == 1 and refused[0].levelno == logging.WARNING
        monkeypatch.setattr(os, "replace", real)
        assert store.healthy
        assert any("takes writes again" in r.getMessage() for r in caplog.records)
    assert store.load().records == {}  # nothing refused was kept
    assert store.commit("jobs/a", b"{}", 0) > 0 and store.healthy
    store.close()
