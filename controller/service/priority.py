"""Background threads give the CPU to the reaction path.

A link report is repaired on the engine thread. Global solves, deferred certificates, the
predictor, the precomputed repairs and what-if queries run beside it on threads of their
own and, on a 2-core controller, took the cores a repair needed: a repair whose push takes
20 ms waited up to 130 ms behind the reference walks of the previous link change's
re-optimisation (docs/profiling.md). Those threads lower their own scheduling priority by
BACKGROUND_NICE when they start. On Linux niceness belongs to the thread and is inherited
by the threads it starts (a solve's certificate workers and prefetch follow it), and any
thread may lower its own priority without privilege. The engine thread, and any thread
that never calls `background`, keeps the process's priority. Elsewhere this is a no-op:
there setpriority would act on the whole process.
"""

from __future__ import annotations

import logging
import os
import sys
import threading

BACKGROUND_NICE = 10  # CFS weight 110 against a nice-0 thread's 1024
_MAX_NICE = 19
log = logging.getLogger(__name__)


def background() -> None:
    """Lower the calling thread's priority to the process's + BACKGROUND_NICE (Linux; kept
    when it is lower already)."""
    if sys.platform != "linux":
        return
    try:
        tid = threading.get_native_id()
        want = min(_MAX_NICE, os.getpriority(os.PRIO_PROCESS, os.getpid()) + BACKGROUND_NICE)
        if os.getpriority(os.PRIO_PROCESS, tid) < want:
            os.setpriority(os.PRIO_PROCESS, tid, want)
    except OSError as exc:  # a sandbox without setpriority: same priority as before
        log.debug("background thread keeps its priority: %s", exc)
