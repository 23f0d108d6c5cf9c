"""Background threads give the CPU to the reaction path (controller.service.priority)."""

from __future__ import annotations

import os
import sys
import threading

import pytest

from controller.service.priority import BACKGROUND_NICE, background

pytestmark = pytest.mark.skipif(sys.platform != "linux",
                                reason="per-thread niceness is Linux's")  # fmt: skip


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


def _in_thread(fn):  # type: ignore[no-untyped-def]
    box = {}
    thread = threading.Thread(target=lambda: box.update(value=fn()))
    thread.start()
    thread.join()
    return box["value"]


def test_a_background_thread_and_its_children_yield_but_the_others_do_not() -> None:
    base = os.getpriority(os.PRIO_PROCESS, os.getpid())
    want = min(19, base + BACKGROUND_NICE)

    def work() -> tuple[int, int, int]:
        background()
        background()  # once is enough: never lowered twice
        return _nice(), _in_thread(_nice), _in_thread(lambda: (background(), _nice())[1])

    mine, child, again = _in_thread(work)
    assert (mine, child, again) == (want, want, want)
    assert _nice() == base  # the caller's thread, the engine's, keeps its priority
    assert _in_thread(_nice) == base


def test_the_engine_repairs_at_the_process_priority_its_background_threads_below() -> None:
    from controller.model.clos import PRESETS, build
    from controller.model.jobs import Job
    from controller.service.engine import Engine
    from sim.driver import EmulatedDriver

    fabric = build(PRESETS["tiny"])
    engine = Engine(fabric, EmulatedDriver(fabric), debounce=0.0, reconcile_interval=60.0)
    try:
        engine.put_job(Job("j", (0, 1, 2, 3), dp=4, tp=2), 0)
        assert engine.wait_idle(60) and engine.wait_predicted(60)
        base = os.getpriority(os.PRIO_PROCESS, os.getpid())
        nice = {t.name: os.getpriority(os.PRIO_PROCESS, t.native_id)
                for t in threading.enumerate() if t.native_id is not None}  # fmt: skip
        assert nice["fabric-te-engine"] == base
        assert nice["fabric-te-predict"] == min(19, base + BACKGROUND_NICE)
        if "fabric-te-precompute" in nice:
            assert nice["fabric-te-precompute"] == min(19, base + BACKGROUND_NICE)
    finally:
        engine.close()
