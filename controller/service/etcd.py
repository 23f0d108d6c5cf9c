"""The etcd backend of the store, and leader election on it.

Client. etcd v3's JSON gateway (HTTP/1.1 POST of JSON to /v3/kv/range, /v3/kv/txn,
/v3/lease/grant, /v3/lease/keepalive, /v3/lease/revoke, /v3/watch; keys and values base64),
spoken with the standard library's http.client. Why not a client package: `etcd3` has had no
release since 2020 and pins a protobuf older than the one the gRPC API needs; `etcd3gw`
wraps the same gateway but adds pbr/futurist and a requests stack for what is a handful of
POSTs here; generating gRPC stubs from etcd's protos would mean vendoring them and their
gogoproto/googleapis imports. The gateway is part of every etcd 3.4+ server.

Layout under the prefix P (`etcd://HOST:PORT[,HOST:PORT..]/P`):

    P/format            {"format": 1, "fabric": NAME}, checked on open
    P/rec/<key>         the records of controller.service.persist, one per key
    P/election/leader   the leader's replica id, attached to its lease

Every write is a transaction guarded by the key's mod revision (no lost update between
replicas); a leader-only write (the assignment) is also guarded by the create revision of
the election key, so a deposed leader cannot write it. `follow` watches P/rec/ from a revision.

Election. A replica grants a lease of `ttl` seconds and creates the election key with it if
the key does not exist; the holder keeps the lease alive every ttl/4 and believes it leads only
until 3/4 of the ttl after the last keepalive it sent that etcd answered, so a leader cut off
from etcd (or paused) stops pushing before its lease can expire and another replica win. It
keeps renewing until a full ttl has passed without an answer: a renewal answered late (the
lease still alive, so the key still ours) resumes its leadership without a stepdown.
`check` (the fence before each push batch) is a linearizable read of the election key: a
replica resumed after a SIGSTOP learns there that it was deposed, before it reaches a switch.
etcd refuses TTLs below its minimum (3/2 of the election timeout, rounded up to seconds: 2 s
with the defaults, 1 s with --election-timeout 500 or less); the granted TTL is used.
"""

from __future__ import annotations

import base64
import http.client
import json
import logging
import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

from controller.errors import (
    Fenced,
    InputError,
    StoreAmbiguous,
    StoreConflict,
    StoreCorrupt,
    StoreUnavailable,
)
from controller.service.store import FORMAT, Change, Leadership, Loaded, Store

log = logging.getLogger("fabric_te.etcd")


def _b64(text: str | bytes) -> str:
    raw = text.encode() if isinstance(text, str) else text
    return base64.b64encode(raw).decode()


def _unb64(text: str) -> bytes:
    return base64.b64decode(text)


def _range_end(prefix: str) -> str:
    """The key just past every key starting with `prefix`."""
    raw = bytearray(prefix.encode())
    raw[-1] += 1
    return _b64(bytes(raw))


def _closed_by_peer(sock: socket.socket) -> bool:
    """Whether an idle kept-alive connection was closed by the other end: it is readable
    (its end of stream, or a reset) with no request under way."""
    try:
        return bool(select.select([sock], [], [], 0)[0])
    except (OSError, ValueError):
        return True


class Gateway:
    """POST JSON to etcd's gateway, trying each endpoint in turn; one connection per thread."""

    def __init__(self, endpoints: list[tuple[str, int]], timeout: float = 2.0) -> None:
        self.endpoints = endpoints
        self.timeout = timeout
        self._local = threading.local()
        self._current = 0
        self.healthy = True

    def _conn(self, index: int, timeout: float) -> http.client.HTTPConnection:
        conns: dict[int, http.client.HTTPConnection] = self._local.__dict__.setdefault("c", {})
        conn = conns.get(index)
        if conn is None:
            host, port = self.endpoints[index]
            conn = conns[index] = http.client.HTTPConnection(host, port, timeout=timeout)
        conn.timeout = timeout
        if conn.sock is not None and _closed_by_peer(conn.sock):
            conn.close()  # etcd restarted since: a request sent on it would be lost, and a
            # write then ambiguous; the next request opens a fresh connection
        if conn.sock is not None:
            conn.sock.settimeout(timeout)
        return conn

    def _drop(self, index: int) -> None:
        conn = self._local.__dict__.get("c", {}).pop(index, None)
        if conn is not None:
            conn.close()

    def post(
        self, path: str, body: dict[str, Any], timeout: float | None = None, write: bool = False
    ) -> Any:
        """The JSON answer; StoreUnavailable when no endpoint answers. A `write` whose
        request went out but whose answer did not come is StoreAmbiguous at once (etcd may
        apply it later): it is not sent to another endpoint."""
        data = json.dumps(body).encode()
        errors = []
        for step in range(len(self.endpoints)):
            index = (self._current + step) % len(self.endpoints)
            where = f"{self.endpoints[index][0]}:{self.endpoints[index][1]}"
            try:
                conn = self._conn(index, timeout or self.timeout)
                conn.request("POST", path, data, {"Content-Type": "application/json"})
            except (OSError, http.client.HTTPException) as err:  # not sent: not applied
                self._drop(index)
                errors.append(f"{where}: {err}")
                continue
            try:
                reply = conn.getresponse()
                text = reply.read()
            except (OSError, http.client.HTTPException) as err:
                self._drop(index)
                errors.append(f"{where}: {err}")
                if write:
                    self.healthy = False
                    raise StoreAmbiguous(
                        f"etcd did not answer a write ({where}: {err or 'timed out'})"
                    ) from None
                continue
            self._current = index
            self.healthy = True
            doc = json.loads(text) if text else {}
            if reply.status != 200:
                message = doc.get("error") or doc.get("message") or text.decode()[:200]
                raise StoreUnavailable(f"etcd {path}: HTTP {reply.status}: {message}")
            if isinstance(doc, dict) and "error" in doc:  # a stream's error message
                raise StoreUnavailable(f"etcd {path}: {doc['error']}")
            return doc
        self.healthy = False
        raise StoreUnavailable(f"etcd unreachable ({'; '.join(errors)})")

    def stream(self, path: str, body: dict[str, Any], timeout: float) -> http.client.HTTPResponse:
        """A streamed answer (for watches), on a connection of its own."""
        for step in range(len(self.endpoints)):
            index = (self._current + step) % len(self.endpoints)
            host, port = self.endpoints[index]
            conn = http.client.HTTPConnection(host, port, timeout=timeout)
            try:
                conn.request("POST", path, json.dumps(body).encode(),
                             {"Content-Type": "application/json"})  # fmt: skip
                reply = conn.getresponse()
            except (OSError, http.client.HTTPException):
                conn.close()
                continue
            if reply.status == 200:
                return reply
            conn.close()
        self.healthy = False
        raise StoreUnavailable("etcd unreachable (watch)")


class EtcdStore(Store):
    """Records under one etcd prefix, written in revision-guarded transactions."""

    def __init__(
        self, endpoints: list[tuple[str, int]], prefix: str, fabric_name: str, timeout: float = 2.0
    ) -> None:
        self.prefix = "/" + prefix.strip("/")
        hosts = ",".join(f"{h}:{p}" for h, p in endpoints)
        self.url = f"etcd://{hosts}{self.prefix}"
        self.gateway = Gateway(endpoints, timeout)
        self.rec = self.prefix + "/rec/"
        self.election_key = self.prefix + "/election/leader"
        self._closed = threading.Event()
        self._threads: list[threading.Thread] = []
        self._leadership: EtcdLeadership | None = None
        self._check_format(fabric_name)

    @classmethod
    def from_url(cls, url: str, fabric_name: str) -> EtcdStore:
        parts = urlsplit(url)
        prefix = parts.path.strip("/")
        if parts.scheme != "etcd" or not parts.netloc or not prefix:
            raise InputError(f"--store: {url!r} is not etcd://HOST:PORT[,HOST:PORT..]/PREFIX")
        endpoints = []
        for item in parts.netloc.split(","):
            host, _, port = item.rpartition(":")
            if not host or not port.isdigit():
                raise InputError(f"--store: {item!r} in {url!r} is not HOST:PORT")
            endpoints.append((host, int(port)))
        return cls(endpoints, prefix, fabric_name)

    @property
    def healthy(self) -> bool:
        return self.gateway.healthy

    def _check_format(self, fabric_name: str) -> None:
        key = self.prefix + "/format"
        marker = json.dumps({"format": FORMAT, "fabric": fabric_name})
        reply = self.gateway.post("/v3/kv/txn", {
            "compare": [{"key": _b64(key), "target": "CREATE", "result": "EQUAL",
                         "create_revision": 0}],
            "success": [{"request_put": {"key": _b64(key), "value": _b64(marker)}}],
            "failure": [{"request_range": {"key": _b64(key)}}],
        })  # fmt: skip
        if reply.get("succeeded"):
            return
        kvs = reply["responses"][0]["response_range"].get("kvs", [])
        try:
            doc = json.loads(_unb64(kvs[0]["value"]))
            fmt, fabric = doc["format"], doc["fabric"]
        except (IndexError, KeyError, TypeError, ValueError) as err:
            raise StoreCorrupt(f"{self.url}: unreadable format marker: {err}") from err
        if fmt != FORMAT:
            raise StoreCorrupt(f"{self.url}: written in format {fmt}, this controller reads "
                               f"format {FORMAT}")  # fmt: skip
        if fabric != fabric_name:
            raise StoreCorrupt(f"{self.url}: holds the state of fabric {fabric!r}, "
                               f"not {fabric_name!r}")  # fmt: skip

    def load(self) -> Loaded:
        reply = self.gateway.post(
            "/v3/kv/range", {"key": _b64(self.rec), "range_end": _range_end(self.rec)}
        )
        records = {
            _unb64(kv["key"]).decode()[len(self.rec) :]: (
                _unb64(kv.get("value", "")), int(kv["mod_revision"])
            )
            for kv in reply.get("kvs", [])
        }  # fmt: skip
        return Loaded(int(reply["header"]["revision"]), records)

    def get(self, key: str) -> tuple[bytes | None, int, int]:
        reply = self.gateway.post("/v3/kv/range", {"key": _b64(self.rec + key)})
        kvs = reply.get("kvs", [])
        revision = int(reply["header"]["revision"])
        if not kvs:
            return None, 0, revision
        return _unb64(kvs[0].get("value", "")), int(kvs[0]["mod_revision"]), revision

    def commit(
        self,
        key: str,
        value: bytes | None,
        expect: int | None,
        fence: tuple[str, int] | None = None,
    ) -> int:
        full = _b64(self.rec + key)
        compare = []
        if expect is not None:
            compare.append({"key": full, "target": "MOD", "result": "EQUAL",
                            "mod_revision": expect})  # fmt: skip
        if fence is not None:
            compare.append({"key": _b64(fence[0]), "target": "CREATE", "result": "EQUAL",
                            "create_revision": fence[1]})  # fmt: skip
        op = (
            {"request_delete_range": {"key": full}} if value is None
            else {"request_put": {"key": full, "value": _b64(value)}}
        )  # fmt: skip
        txn = {
            "compare": compare, "success": [op],
            "failure": [{"request_range": {"key": full}}]
            + ([{"request_range": {"key": _b64(fence[0])}}] if fence else []),
        }  # fmt: skip
        try:
            reply = self.gateway.post("/v3/kv/txn", txn, write=True)
        except StoreAmbiguous as first:
            if expect is None:
                raise
            reply = self._resolve(key, value, txn, first)
            if isinstance(reply, int):
                return reply
        if reply.get("succeeded"):
            return int(reply["header"]["revision"])
        responses = reply.get("responses", [])
        if fence is not None:
            kvs = responses[-1]["response_range"].get("kvs", []) if responses else []
            if not kvs or int(kvs[0]["create_revision"]) != fence[1]:
                raise Fenced(f"{key}: not written, this replica is no longer the leader")
        kvs = responses[0]["response_range"].get("kvs", []) if responses else []
        current = int(kvs[0]["mod_revision"]) if kvs else 0
        raise StoreConflict(f"{key}: changed at revision {current}, not {expect}; re-read")

    def _resolve(self, key: str, value: bytes | None, txn: dict[str, Any],
                 first: StoreAmbiguous) -> Any:  # fmt: skip
        """Settle a guarded write whose answer was lost by sending it once more. The guard
        makes this safe: if the first one landed, the second fails its guard and the key
        holds our value (the first's revision is returned); if the second lands, the first
        can never land after it. No answer again: StoreAmbiguous, outcome still unknown."""
        try:
            reply = self.gateway.post("/v3/kv/txn", txn, self.gateway.timeout / 2, write=True)
        except StoreAmbiguous as again:
            raise StoreAmbiguous(
                f"{key}: outcome unknown, etcd did not answer the write nor its retry "
                f"({first}; {again}); it may still be applied: retry the same write (it is "
                "idempotent) or read the state back"
            ) from None
        except StoreUnavailable as err:
            raise StoreAmbiguous(f"{key}: outcome unknown: {first}; then {err}") from None
        if reply.get("succeeded"):
            return reply
        kvs = reply.get("responses", [{}])[0].get("response_range", {}).get("kvs", [])
        if value is None and not kvs:  # deleted: by the first attempt (or by another)
            return int(reply["header"]["revision"])
        if value is not None and kvs and _unb64(kvs[0].get("value", "")) == value:
            log.info("%s: a write whose answer was lost had landed at revision %s", key,
                     kvs[0]["mod_revision"])  # fmt: skip
            return int(kvs[0]["mod_revision"])
        return reply  # a real conflict (or the fence): reported as such

    # ---- following other writers ------------------------------------------------------
    def follow(self, after: int, apply: Callable[[list[Change]], None]) -> None:
        thread = threading.Thread(
            target=self._follow, args=(after, apply), name="etcd-follow", daemon=True
        )
        self._threads.append(thread)
        thread.start()

    def _follow(self, after: int, apply: Callable[[list[Change]], None]) -> None:
        seen = after
        while not self._closed.is_set():
            body = {"create_request": {"key": _b64(self.rec), "range_end": _range_end(self.rec),
                                       "start_revision": seen + 1}}  # fmt: skip
            try:
                reply = self.gateway.stream("/v3/watch", body, timeout=1.0)
            except StoreUnavailable:
                self._closed.wait(0.2)
                continue
            try:
                for line in self._lines(reply):
                    result = json.loads(line).get("result", {})
                    if int(result.get("compact_revision", 0)) > seen:
                        log.error("watch compacted past revision %d: reloading", seen)
                        loaded = self.load()
                        apply([(k, v, r) for k, (v, r) in loaded.records.items()])
                        seen = loaded.revision
                        break
                    changes = []
                    for event in result.get("events", []):
                        kv = event["kv"]
                        key = _unb64(kv["key"]).decode()[len(self.rec) :]
                        rev = int(kv["mod_revision"])
                        deleted = event.get("type") == "DELETE"
                        value = None if deleted else _unb64(kv.get("value", ""))
                        changes.append((key, value, rev))
                        seen = max(seen, rev)
                    if changes:
                        apply(changes)
            except (OSError, ValueError, http.client.HTTPException):
                pass  # reconnect from the last revision seen
            finally:
                reply.close()

    def _lines(self, reply: http.client.HTTPResponse) -> Any:
        buffer = b""
        while not self._closed.is_set():
            try:
                chunk = reply.read1(65536)
            except TimeoutError:  # idle: nothing changed within the read timeout
                continue
            if not chunk:
                return
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                if line.strip():
                    yield line

    # ---- election -------------------------------------------------------------------
    def leadership(self, replica: str, ttl: float) -> Leadership:
        self._leadership = EtcdLeadership(self, replica, ttl)
        return self._leadership

    def close(self) -> None:
        if self._leadership is not None:
            self._leadership.close()
        self._closed.set()
        for thread in self._threads:
            thread.join(timeout=3)


class EtcdLeadership(Leadership):
    """A lease and a key: whoever created the election key, while its lease lives, leads."""

    def __init__(self, store: EtcdStore, replica: str, ttl: float) -> None:
        self.store = store
        self.gateway = store.gateway
        self.replica = replica
        self.ttl = max(1, round(ttl))
        self.key = store.election_key
        self._lease = 0
        self._created = 0  # create revision of our election key
        self._valid_until = 0.0
        self._leader_id = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._on_change: Callable[[bool], None] = lambda leader: None
        self._believed = False
        self._acked = 0.0  # when the last renewal etcd answered was sent
        self.stepdowns = 0  # leadership lost while this replica held it

    def is_leader(self) -> bool:
        return self._created != 0 and time.monotonic() < self._valid_until

    def leader(self) -> str:
        return self.replica if self.is_leader() else self._leader_id

    def guard(self) -> tuple[str, int] | None:
        return (self.key, self._created)

    def check(self) -> None:
        if not self.is_leader():
            raise Fenced(f"replica {self.replica} is not the leader")
        try:
            reply = self.gateway.post("/v3/kv/range", {"key": _b64(self.key)}, timeout=0.5)
        except StoreUnavailable as err:
            raise Fenced(f"leadership not confirmed: {err}") from err
        kvs = reply.get("kvs", [])
        if not kvs or int(kvs[0]["create_revision"]) != self._created:
            self._created = 0
            raise Fenced(f"replica {self.replica} was deposed (election key changed)")

    def start(self, on_change: Callable[[bool], None]) -> None:
        self._on_change = on_change
        self._thread = threading.Thread(target=self._run, name="etcd-election", daemon=True)
        self._thread.start()

    def _set_role(self, leader: bool) -> None:
        if leader != self._believed:
            self._believed = leader
            self._on_change(leader)

    def _run(self) -> None:
        """Renew while the lease may still live; campaign otherwise. A renewal answered
        late (a loaded machine, a slow etcd) only pauses pushing (`is_leader` is false from
        3/4 ttl after the last answered renewal); the role changes only when the lease is
        gone or may be (a full ttl without an answer), so a hiccup is not a stepdown."""
        period = self.ttl / 4
        while not self._stop.is_set():
            try:
                if self._created and time.monotonic() < self._acked + self.ttl:
                    self._keepalive()
                else:
                    if self._created:
                        log.warning("lease %x not renewed within its ttl: stepping down",
                                    self._lease)  # fmt: skip
                        self._created = 0
                        self.stepdowns += 1
                    self._set_role(False)
                    self._campaign()
            except StoreUnavailable as err:
                log.debug("election: %s", err)
            self._set_role(self._created != 0)
            lapsed = self._created and not self.is_leader()
            self._stop.wait(0.05 if lapsed else period if self._created else min(period, 0.1))

    def _campaign(self) -> None:
        if not self._lease:
            reply = self.gateway.post("/v3/lease/grant", {"TTL": self.ttl}, timeout=0.5)
            self._lease = int(reply["ID"])
            self.ttl = int(reply.get("TTL", self.ttl))
        sent = time.monotonic()
        try:
            reply = self.gateway.post("/v3/kv/txn", {
                "compare": [{"key": _b64(self.key), "target": "CREATE", "result": "EQUAL",
                             "create_revision": 0}],
                "success": [{"request_put": {"key": _b64(self.key),
                                             "value": _b64(self.replica),
                                             "lease": self._lease}}],
                "failure": [{"request_range": {"key": _b64(self.key)}}],
            }, timeout=0.5)  # fmt: skip
        except StoreUnavailable as err:
            if "lease not found" in str(err):
                # the lease expired while etcd did not answer (stalled, partitioned): the
                # next campaign grants a new one, or no campaign could ever succeed
                log.warning("lease %x is gone: campaigning on a new one", self._lease)
                self._lease = 0
            raise
        if reply.get("succeeded"):
            self._created = int(reply["header"]["revision"])
            self._acked = sent
            self._valid_until = sent + 0.75 * self.ttl
            self._leader_id = self.replica
            log.info("replica %s elected (lease %x, ttl %d s)", self.replica, self._lease,
                     self.ttl)  # fmt: skip
            return
        kvs = reply["responses"][0]["response_range"].get("kvs", [])
        self._leader_id = _unb64(kvs[0]["value"]).decode() if kvs else ""
        if kvs and int(kvs[0].get("lease", 0)) == self._lease:
            # the key is on our own lease (an earlier campaign whose answer was lost, or a
            # stepdown while etcd kept the lease): ours, once a renewal confirms the lease
            self._created = int(kvs[0]["create_revision"])
            self._keepalive()
            if self._created:
                self._leader_id = self.replica
                log.info("replica %s holds the election key on its lease %x", self.replica,
                         self._lease)  # fmt: skip
            return
        if not self._lease_alive():
            self._lease = 0

    def _lease_alive(self) -> bool:
        reply = self.gateway.post("/v3/lease/timetolive", {"ID": self._lease}, timeout=0.5)
        return int(reply.get("TTL", -1)) > 0

    def _keepalive(self) -> None:
        sent = time.monotonic()
        reply = self.gateway.post("/v3/lease/keepalive", {"ID": self._lease}, timeout=0.5)
        result = reply.get("result", reply)
        if int(result.get("TTL", 0)) <= 0:
            if self._believed:  # else a campaign found its key on the expired lease
                log.warning("lease %x expired: stepping down", self._lease)
                self.stepdowns += 1
            self._created, self._lease = 0, 0
            return
        self._acked = sent
        self._valid_until = sent + 0.75 * self.ttl

    def close(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=3)
        if self._lease:
            try:  # resign at once rather than leaving the others to wait for the TTL
                self.gateway.post("/v3/lease/revoke", {"ID": self._lease}, timeout=0.5)
            except StoreUnavailable:
                pass
        self._created = 0
