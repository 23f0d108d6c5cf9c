"""Where a resilience sweep runs: in this process, on a local process pool, or on a Ray
cluster. Every runner evaluates the same elements in the same batches with the same
controller.solver.resilience.Sweep and assembles them in element order, so the result is
the same array for array, byte for byte, whichever runs it.

The inputs go to each worker once (the pool's initializer; Ray's object store, read by one
actor per CPU), and each worker builds its Sweep (the planes, the index) from them; tasks
are batches of element ids, interleaved (batch b holds elements b, b + B, b + 2B, ...) so
the heavy elements (switches, listed last) spread over the batches.
"""

from __future__ import annotations

import ctypes
import logging
import multiprocessing
import os
import signal
import socket
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait
from dataclasses import dataclass
from typing import Any

import numpy as np

from controller.errors import InputError
from controller.model.failures import single_failures
from controller.solver.resilience import Header, Outcome, Resilience, Sweep, SweepInputs

Progress = Callable[[int, int], None]  # (elements done, elements in all)
ALIVE_POLL_S = 0.25  # how often a local sweep asks whether its caller is still there
# batches per worker: large tasks (meta-24k: ~420 elements, ~20 s each), and a progress
# line every batch (8 a worker left a minute or more between lines there)
BATCHES_PER_WORKER = 32
PR_SET_PDEATHSIG, PR_SET_NAME = 1, 15  # prctl(2)


@dataclass(frozen=True)
class RunStats:
    """What a run cost: wall seconds of the sweep (build included), elements, workers."""

    seconds: float
    build_seconds: float  # the slowest worker's Sweep build
    elements: int
    workers: int
    batches: int
    runner: str


def batches(elements: np.ndarray, count: int) -> list[np.ndarray]:
    """`count` interleaved batches of `elements` (module docstring), empty ones dropped."""
    count = max(1, min(count, elements.size))
    return [b for b in (elements[k::count] for k in range(count)) if b.size]


def _assemble(header: Header, parts: Sequence[tuple[np.ndarray, list[Outcome]]]) -> Resilience:
    ids = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
    outs = [o for p in parts for o in p[1]]
    order = np.argsort(ids, kind="stable")
    return header.assemble(ids[order], [outs[i] for i in order.tolist()])


def _elements(header: Header, elements: np.ndarray | None) -> np.ndarray:
    n = len(header.names)
    ids = np.arange(n, dtype=np.int64) if elements is None else np.asarray(elements, np.int64)
    if ids.size and (ids.min() < 0 or ids.max() >= n):
        raise InputError(f"element ids must be within [0, {n})")
    return np.unique(ids)


# ---- in this process, and on a local pool ---------------------------------------------

_WORKER: Sweep | None = None
_BUILD = 0.0


def die_with_parent(parent: int, name: bytes | None = None) -> None:
    """Linux: SIGKILL this process when the thread that started it ends, and name it
    `name` in `ps -o comm` and `top` (15 bytes at most), if given. A parent ended by
    SIGTERM, SIGKILL or a closed terminal's SIGHUP runs no cleanup: a sweep's workers ran
    their batches out, then waited for tasks forever, each holding its Sweep (~1.2 GB on
    meta-24k). Elsewhere the caller's own means end it (a batch's end, a closed pipe)."""
    if sys.platform == "linux":
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
            if name is not None:
                libc.prctl(PR_SET_NAME, name)
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:  # the parent died before the call
        os._exit(0)


def _init(inputs: SweepInputs, niceness: int = 0, parent: int = 0) -> None:
    """Build this worker's Sweep; `parent`: the pid of the local process that started it,
    whose end this worker's follows (0: a Ray actor, which Ray ends)."""
    global _WORKER, _BUILD
    if parent:
        die_with_parent(parent)
    start = time.perf_counter()
    if niceness:
        os.nice(niceness)  # a worker beside a service yields the cores to it
    from controller.solver.greedy import warm_up

    warm_up()
    _WORKER = Sweep(inputs)
    _BUILD = time.perf_counter() - start


def _header() -> tuple[Header, float]:
    assert _WORKER is not None
    return _WORKER.header(), _BUILD


def _run(ids: np.ndarray) -> tuple[np.ndarray, list[Outcome], float]:
    assert _WORKER is not None
    return ids, _WORKER.run(ids), _BUILD


def run_local(
    inputs: SweepInputs,
    *,
    workers: int | None = None,
    elements: np.ndarray | None = None,
    progress: Progress | None = None,
    in_process: bool = True,
    niceness: int = 0,
    alive: Callable[[], bool] | None = None,
) -> tuple[Resilience, RunStats]:
    """The sweep on `workers` local processes (None: as many as cores; 1: this process,
    unless not `in_process`); `niceness`: added to the worker processes' (not this one's).
    An exception from `progress` stops the sweep: batches not started are cancelled and
    the worker processes ended. `alive`, asked every ALIVE_POLL_S while worker processes
    run: False stops it so too (InputError), without waiting for a batch to end (a server
    shutting down has a grace period to keep)."""
    start = time.perf_counter()
    cores = os.cpu_count() or 1
    workers = workers or cores
    if workers < 1:
        raise InputError(f"workers must be >= 1, got {workers}")
    # each worker builds the whole sweep (its memory, ~1.2 GB on meta-24k): more than the
    # cores, or than the elements, only costs that
    count = len(elements) if elements is not None else \
        len(single_failures(inputs.fabric, inputs.health, inputs.kinds)) + len(inputs.doubles)
    workers = max(1, min(workers, cores, count))
    if workers == 1 and in_process:
        t = time.perf_counter()
        sweep = Sweep(inputs)
        build = time.perf_counter() - t
        header = sweep.header()
        ids = _elements(header, elements)
        parts = []
        done = 0
        for b in batches(ids, BATCHES_PER_WORKER):
            parts.append((b, sweep.run(b)))
            done += b.size
            if progress:
                progress(done, ids.size)
        out = _assemble(header, parts)
        return out, RunStats(time.perf_counter() - start, build, int(ids.size), 1,
                             len(parts), "local")  # fmt: skip
    # spawn, not fork: OR-Tools' HiGHS can hang in a forked child (docs: solver notes)
    ctx = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=ctx, initializer=_init,
                             initargs=(inputs, niceness, os.getpid())) as pool:  # fmt: skip
        try:
            header, build = pool.submit(_header).result()
            ids = _elements(header, elements)
            todo = batches(ids, workers * BATCHES_PER_WORKER)
            futures = [pool.submit(_run, b) for b in todo]
            pending, done = set(futures), 0
            while pending:
                finished, pending = wait(pending, timeout=ALIVE_POLL_S,
                                         return_when=FIRST_COMPLETED)  # fmt: skip
                for future in finished:
                    b, _, b_build = future.result()
                    build = max(build, b_build)
                    done += b.size
                if finished and progress:
                    progress(done, ids.size)
                if alive is not None and not alive():
                    raise InputError("resilience sweep stopped: its caller went away")
            parts = [(b, outs) for b, outs, _ in (f.result() for f in futures)]
        except BaseException:
            # the worker processes first: shutdown() forgets them (Python 3.11 sets
            # `_processes` to None), and then none was ended, each running its batch to the
            # end past the caller's going away and a server's grace
            procs = list((getattr(pool, "_processes", None) or {}).values())
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in procs:
                proc.terminate()  # the batches running: nothing of theirs is kept
            raise
    out = _assemble(header, parts)
    return out, RunStats(time.perf_counter() - start, build, int(ids.size), workers, len(todo),
                         "local")  # fmt: skip


# ---- on Ray ---------------------------------------------------------------------------


def ray_available() -> bool:
    """Whether Ray can be imported (the `ray` extra)."""
    try:
        import ray  # noqa: F401
    except ImportError:
        return False
    return True


RAY_CONNECT_S = 5.0  # a head that takes no TCP connection in this long is not there


def _reachable(address: str) -> None:
    """InputError naming `address` (host:port) when nothing takes a TCP connection there:
    Ray itself retries for minutes before it says so, and only in its log."""
    host, sep, port = address.rpartition(":")
    if address == "auto" or not sep or not port.isdigit():
        return  # "auto", or not an address: ray.init says what is wrong with it
    try:
        with socket.create_connection((host.strip("[]") or "127.0.0.1", int(port)),
                                      timeout=RAY_CONNECT_S):  # fmt: skip
            pass
    except OSError as err:
        raise InputError(f"--ray {address}: no Ray head answers there ({err.strerror or err}); "
                         "start one (ray start --head) or give its GCS address, host:port"
                         ) from None


def run_ray(
    inputs: SweepInputs,
    *,
    address: str = "auto",
    workers: int | None = None,
    elements: np.ndarray | None = None,
    progress: Progress | None = None,
) -> tuple[Resilience, RunStats]:
    """The sweep on a Ray cluster (`address`: "auto" for the cluster this node belongs to,
    or host:port): the inputs put once in the object store, one actor per CPU (or
    `workers`) building its Sweep from them, batches handed to the actors in order."""
    if not ray_available():
        raise InputError("--ray needs Ray: pip install 'fabric-te[ray]'")
    import ray

    start = time.perf_counter()
    _reachable(address)
    try:
        ray.init(address=address, ignore_reinit_error=True, log_to_driver=False,
                 logging_level=logging.ERROR)  # fmt: skip
    except (ConnectionError, ValueError) as err:  # no cluster there, or not an address
        # (a ConnectionError is an OSError: tectl read it as its output failing to write)
        if address == "auto" and isinstance(err, ConnectionError) and \
                not os.environ.get("RAY_ADDRESS"):
            # Ray's own words name its flag (--address), which tectl does not have
            raise InputError("--ray auto: no Ray cluster runs on this node (RAY_ADDRESS "
                             "unset); start one (ray start --head) or give its GCS "
                             "address: --ray HOST:PORT") from err  # fmt: skip
        raise InputError(f"--ray {address}: {err}") from err
    try:
        count = workers or max(1, int(ray.cluster_resources().get("CPU", 1)))
        ref = ray.put(inputs)
        actor = ray.remote(num_cpus=1)(_RayWorker)
        # Ray's stubs type neither the actor class's .remote nor its handles' methods
        actors: list[Any] = [actor.remote(ref) for _ in range(count)]  # type: ignore[attr-defined]
        header, build = ray.get(actors[0].header.remote())
        ids = _elements(header, elements)
        todo = batches(ids, count * BATCHES_PER_WORKER)
        pool = ray.util.ActorPool(actors)
        parts, done = [], 0
        results: Iterator[Any] = pool.map(lambda a, b: a.run.remote(b), todo)
        for b, outs, b_build in results:
            parts.append((b, outs))
            build = max(build, b_build)
            done += b.size
            if progress:
                progress(done, ids.size)
        for a in actors:
            ray.kill(a)
    finally:
        ray.shutdown()
    out = _assemble(header, parts)
    return out, RunStats(time.perf_counter() - start, build, int(ids.size), count, len(todo),
                         "ray")  # fmt: skip


class _RayWorker:
    """A Ray actor holding one Sweep (its inputs read once from the object store)."""

    def __init__(self, inputs: SweepInputs) -> None:
        _init(inputs)

    def header(self) -> tuple[Header, float]:
        return _header()

    def run(self, ids: np.ndarray) -> tuple[np.ndarray, list[Outcome], float]:
        return _run(ids)
