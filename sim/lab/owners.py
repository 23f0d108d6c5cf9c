"""Who a lab belongs to: a process, named by its pid and its start time (so that a reused pid
is not mistaken for it); `lab up` records the owner of a lab and of its restorer."""

from __future__ import annotations

from pathlib import Path

from controller.errors import LabError


def process_start(pid: int) -> int | None:
    """The start time of process `pid` (clock ticks since boot), None if there is none
    (or only its zombie, waiting for its parent to collect it)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[1].split()  # from field 3 on; the name may hold spaces
    return None if fields[0] in ("Z", "X") else int(fields[19])  # state, start time


def owner_of(pid: int) -> dict[str, int]:
    """The owner record of the live process `pid`."""
    start = process_start(pid)
    if start is None:
        raise LabError(f"no process {pid} to own the lab")
    return {"pid": pid, "start": start}


def owner_alive(owner: dict[str, int] | None) -> bool:
    """Whether a lab's owner still runs (a kept lab, without one, always counts as alive)."""
    if owner is None:
        return True
    return process_start(int(owner["pid"])) == int(owner["start"])
