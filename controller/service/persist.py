"""The controller's inputs as store records: what is written before an API call is
acknowledged, and read back on start or from another replica's writes.

    jobs/<id>     {"format": 1, "job": {placement entry}, "generation": n}
    links         {"format": 1, "factors": {"<link name>": factor}}   (links not up only)
    assignment    {"format": 1, "inputs": digest, "flows": {...}, "path": ...}
    held          {"format": 1, "source": name, "flows": n, "entries": n,
                   "checkpoint": {"job_ids": [...], "flows": {...}, "path": ...} or null,
                   "checkpoint_inputs": digest, "checkpoint_source": name,
                   "fabric": fabric_key}
                  (only while routes applied from a file are held: controller.service.held)

`assignment` is the last assignment the leader pushed, with a digest of the inputs it answers
to: a controller that starts (or a replica that takes over) with the same inputs adopts it and
only reconciles the switches towards it, pushing nothing when they already agree.

`Persistence` keeps the mod revision of every key this replica has applied, so that its own
writes and the same changes coming back through `follow` are applied once, in store order,
and a digest of each value: writing the value a key already holds (the retry of a write
whose answer was lost, and which landed) writes nothing once a read confirms the revision.
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controller.errors import FabricTeError, StoreConflict, StoreCorrupt
from controller.formats.placement import dump_placement, parse_placement
from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.model.flows import FlowSet
from controller.model.health import LinkHealth
from controller.model.jobs import Job
from controller.service.held import Held
from controller.service.store import FORMAT, Change, Store

JOBS, LINKS, ASSIGNMENT, HELD = "jobs/", "links", "assignment", "held"


@dataclass
class Stored:
    """Inputs and assignment as read from a store."""

    revision: int
    jobs: dict[str, tuple[Job, int]] = field(default_factory=dict)
    health: LinkHealth | None = None
    assignment: Assignment | None = None
    assignment_inputs: str = ""  # digest of the inputs the assignment answers to
    held: Held | None = None  # routes applied from a file, held (and their checkpoint)


def fabric_key(fabric: Fabric) -> str:
    """The fabric's fingerprint (its shape, and an inventory's names and cables) and link
    speeds as a key: a fabric file edited to other speeds or other wiring under the same
    name (its store's) makes other inputs, so a stored assignment, whose flows and paths are
    ids, is solved again rather than adopted for devices its ids no longer name."""
    h = hashlib.sha256(fabric.fingerprint.encode() + b"\0")
    h.update(np.ascontiguousarray(fabric.capacity, np.float64).tobytes())
    return h.hexdigest()[:16]


def inputs_digest(jobs: Mapping[str, tuple[Job, int]], health: LinkHealth,
                  fabric: str = "") -> str:  # fmt: skip
    """A digest of (job ids, generations), link health and the fabric (`fabric_key`):
    equal digests, equal inputs."""
    return generations_digest(sorted((k, g) for k, (_, g) in jobs.items()), health, fabric)


def generations_digest(generations: Sequence[tuple[str, int]], health: LinkHealth,
                       fabric: str = "") -> str:  # fmt: skip
    """inputs_digest of the (job id, generation) pairs sorted by id."""
    h = hashlib.sha256(json.dumps(list(generations)).encode())
    h.update(np.ascontiguousarray(health.factor, dtype=np.float64).tobytes())
    if fabric:
        h.update(fabric.encode())
    return h.hexdigest()


def _digest(value: bytes | None) -> bytes:
    return hashlib.sha256(value).digest() if value is not None else b""


def _array(a: np.ndarray) -> dict[str, str]:
    return {"dtype": str(a.dtype), "data": base64.b64encode(zlib.compress(a.tobytes())).decode()}


def _unarray(doc: Mapping[str, str]) -> np.ndarray:
    raw = zlib.decompress(base64.b64decode(doc["data"]))
    return np.frombuffer(raw, dtype=np.dtype(doc["dtype"])).copy()


def _doc(body: Mapping[str, Any]) -> bytes:
    return json.dumps({"format": FORMAT, **body}, sort_keys=True).encode()


def _undoc(key: str, value: bytes) -> dict[str, Any]:
    try:
        doc = json.loads(value)
    except ValueError as err:
        raise StoreCorrupt(f"record {key!r}: not JSON ({err}); not read") from err
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        fmt = doc.get("format") if isinstance(doc, dict) else None
        raise StoreCorrupt(f"record {key!r}: format {fmt!r}, this controller reads {FORMAT}")
    return doc


def _assignment_doc(assignment: Assignment) -> dict[str, Any]:
    f = assignment.flows
    flows = {n: _array(getattr(f, n)) for n in ("src_nic", "dst_nic", "demand", "job", "qp")}
    return {"job_ids": list(f.job_ids), "flows": flows, "path": _array(assignment.path)}


def _assignment_of(doc: Mapping[str, Any]) -> Assignment:
    arrays = {n: _unarray(a) for n, a in doc["flows"].items()}
    flows = FlowSet(arrays["src_nic"], arrays["dst_nic"], arrays["demand"], arrays["job"],
                    tuple(doc["job_ids"]), arrays["qp"])  # fmt: skip
    return Assignment(flows, _unarray(doc["path"]).astype(np.int64))


class Persistence:
    """Encode, write and decode the controller's records on one store."""

    def __init__(self, store: Store, fabric: Fabric) -> None:
        self.store = store
        self.fabric = fabric
        self._lock = threading.Lock()
        self._revs: dict[str, int] = {}  # key -> newest mod revision applied here
        self._exists: set[str] = set()  # keys present after that revision
        self._digests: dict[str, bytes] = {}  # key -> digest of its value at that revision
        self.revision = 0  # the newest store revision applied here

    # ---- encoding -------------------------------------------------------------------
    def encode_job(self, job: Job, generation: int) -> bytes:
        return _doc(
            {"job": dump_placement(self.fabric, [job])["jobs"][0], "generation": generation}
        )

    def encode_health(self, health: LinkHealth) -> bytes:
        changed = health.changed(self.fabric)
        factors = {self.fabric.link_name(int(i)): float(health.factor[i]) for i in changed}
        doc: dict[str, Any] = {"factors": factors}
        if health.drained:  # and what their links are beneath (a record without: none)
            doc["drained"] = sorted(self.fabric.node_name(n) for n in health.drained)
            doc["beneath"] = {self.fabric.link_name(k): v
                              for k, v in sorted(health.beneath.items())}  # fmt: skip
        return _doc(doc)

    def encode_assignment(self, assignment: Assignment, digest: str) -> bytes:
        return _doc({"inputs": digest, **_assignment_doc(assignment)})

    def encode_held(self, held: Held) -> bytes:
        point = None if held.checkpoint is None else _assignment_doc(held.checkpoint)
        return _doc({"source": held.source, "flows": held.flows, "entries": held.entries,
                     "checkpoint": point, "checkpoint_inputs": held.checkpoint_inputs,
                     "checkpoint_source": held.checkpoint_source,
                     "fabric": held.fabric})  # fmt: skip

    def decode(self, key: str, value: bytes, into: Stored) -> None:
        """Decode one record into `into`; StoreCorrupt naming the key if it does not fit."""
        doc = _undoc(key, value)
        try:
            if key.startswith(JOBS):
                job = parse_placement(self.fabric, {"jobs": [doc["job"]]}, f"record {key!r}")[0]
                into.jobs[job.id] = (job, int(doc["generation"]))
            elif key == LINKS:
                factors = {self.fabric.link_by_name(n): float(v) for n, v in doc["factors"].items()}
                up = LinkHealth.all_up(self.fabric).with_factors(factors)
                into.health = LinkHealth(
                    up.factor,
                    frozenset(self.fabric.node_by_name(n) for n in doc.get("drained", [])),
                    {self.fabric.link_by_name(n): float(v)
                     for n, v in doc.get("beneath", {}).items()},
                )  # fmt: skip
            elif key == ASSIGNMENT:
                into.assignment = _assignment_of(doc)
                into.assignment_inputs = str(doc["inputs"])
            elif key == HELD:
                point = doc["checkpoint"]
                into.held = Held(str(doc["source"]), int(doc["flows"]), int(doc["entries"]),
                                 None if point is None else _assignment_of(point),
                                 str(doc["checkpoint_inputs"]),
                                 str(doc["checkpoint_source"]),
                                 str(doc.get("fabric", "")))  # fmt: skip
        except (FabricTeError, KeyError, TypeError, ValueError) as err:
            raise StoreCorrupt(f"record {key!r} does not fit fabric "
                               f"{self.fabric.name!r}: {err}") from err  # fmt: skip

    # ---- reading --------------------------------------------------------------------
    def load(self) -> Stored:
        """Every record, decoded; remembers their revisions."""
        loaded = self.store.load()
        stored = Stored(loaded.revision)
        for key, (value, _) in sorted(loaded.records.items()):
            self.decode(key, value, stored)
        if stored.health is None:
            stored.health = LinkHealth.all_up(self.fabric)
        with self._lock:
            self._revs = {k: rev for k, (_, rev) in loaded.records.items()}
            self._exists = set(loaded.records)
            self._digests = {k: _digest(v) for k, (v, _) in loaded.records.items()}
            self.revision = loaded.revision
        return stored

    def fresh(self, changes: Iterable[Change]) -> list[Change]:
        """The changes not yet applied here (newer than this replica's revision of their
        key), marked applied."""
        out = []
        with self._lock:
            for key, value, rev in changes:
                self.revision = max(self.revision, rev)
                if rev > self._revs.get(key, 0):
                    self._revs[key] = rev
                    if value is None:
                        self._exists.discard(key)
                        self._digests.pop(key, None)
                    else:
                        self._exists.add(key)
                        self._digests[key] = _digest(value)
                    out.append((key, value, rev))
        return out

    def newest(self, key: str) -> int:
        """The newest mod revision of `key` applied here (0: never)."""
        with self._lock:
            return self._revs.get(key, 0)

    # ---- writing (guarded by the revision this replica last applied) ------------------
    def _commit(self, key: str, value: bytes | None, fence: tuple[str, int] | None = None) -> int:
        with self._lock:
            expect = self._revs.get(key, 0) if key in self._exists else 0
            same = key in self._exists and self._digests.get(key) == _digest(value)
        if same and fence is None:  # a retry of a write that landed: confirm, write nothing
            _, current, _ = self.store.get(key)
            if current != expect:
                raise StoreConflict(f"{key}: changed at revision {current}, not {expect}")
            return expect
        rev = self.store.commit(key, value, expect, fence)
        self.fresh([(key, value, rev)])
        return rev

    def put_job(self, job: Job, generation: int) -> int:
        return self._commit(JOBS + job.id, self.encode_job(job, generation))

    def delete_job(self, job_id: str) -> int:
        return self._commit(JOBS + job_id, None)

    def put_health(self, health: LinkHealth) -> int:
        return self._commit(LINKS, self.encode_health(health))

    def put_assignment(
        self, assignment: Assignment, digest: str, fence: tuple[str, int] | None
    ) -> int:
        return self._commit(ASSIGNMENT, self.encode_assignment(assignment, digest), fence)

    def put_held(self, held: Held | None, fence: tuple[str, int] | None) -> int:
        """Store the routes held (None: none are, the record removed)."""
        return self._commit(HELD, None if held is None else self.encode_held(held), fence)

    def refresh(self, key: str) -> list[Change]:
        """Re-read one key after a lost guarded write (another replica wrote it first)."""
        value, rev, revision = self.store.get(key)
        with self._lock:
            self._revs.pop(key, None)
        return self.fresh([(key, value, rev or revision)])
