"""The one rule set for every input: physical bounds, dimension caps and strict type checks.

Fabric files, placement files, route files, driver tables and gRPC requests all check their
values here, so a number accepted in one place is accepted everywhere. Each check takes the
value, the field path as the writer wrote it (``pods``, ``jobs[2].channels``,
``job.hosts[0]``) and the error class to raise (an InputError subclass; DriverError for a
driver's own tables), and returns the value in its canonical type. Messages read
``<field>: <what is wrong>``; the file loaders prefix the file name.

The bounds (docs/validation.md explains each):

- speeds and demands in Gbps: finite, within [MIN_GBPS, MAX_GBPS];
- a degraded link's fraction: 0 (down), 1 (up) or within [MIN_FRACTION, 1); denormals
  such as 5e-324 are below MIN_FRACTION and rejected;
- dimensions: each within its cap, and the totals (GPUs, links, switches) within
  MAX_GPUS, MAX_LINKS and MAX_SWITCHES, checked before anything is allocated. The caps admit
  a 100K-GPU cluster with more than 2x headroom;
- integers are ints (never bools, never floats), strings are strings of bounded length with
  no control characters, lists are lists (a string is not a list of characters).
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any, NoReturn

import numpy as np

from controller.errors import FabricTeError, InputError, JobError

# ---- physical bounds -------------------------------------------------------------------------
MIN_GBPS = 1e-3  # 1 Mb/s: below this a link or a demand is a typo, not a datacenter
MAX_GBPS = 1e5  # 100 Tb/s: far above any NIC or cable (1.6 Tb/s in 2025)
MIN_FLOW_GBPS = 1e-12  # one flow's share of a demand (route files): positive, not denormal
MIN_FRACTION = 1e-6  # smallest degraded fraction; 0 is "down"
MIN_TAPER, MAX_TAPER = 1e-2, 1e3  # CTSW down:up capacity ratio

# ---- dimension caps (per field) ---------------------------------------------------------------
DIMENSION_CAPS: dict[str, tuple[int, int]] = {
    "pods": (1, 1024),
    "racks_per_pod": (1, 4096),
    "hosts_per_rack": (1, 256),
    "nics_per_host": (1, 64),
    "ctsws_per_pod": (1, 256),
    "rack_links": (1, 64),
    "atsws_per_plane": (0, 256),
    "agg_links": (1, 64),
    "rtsws_per_rack": (1, 64),
    "planes": (1, 64),
}
# ---- totals ------------------------------------------------------------------------------------
MAX_GPUS = 1 << 18  # 262,144 NICs: a 100K-GPU cluster with 2.6x headroom
MAX_LINKS = 1 << 20  # physical links (access + rack + aggregation)
MAX_SWITCHES = 1 << 17  # RTSWs + CTSWs + ATSWs
# ---- jobs and requests ---------------------------------------------------------------------
MAX_CHANNELS = 64  # ring channels per job (NCCL uses at most 32 or 64)
MAX_PRIORITY = 1_000_000  # job priority classes within [-MAX_PRIORITY, MAX_PRIORITY]
MAX_NAME = 128  # characters in a fabric name, job id or switch name
MAX_GENERATION = (1 << 63) - 1  # job generations stay representable as int64 and uint64
MAX_FLOWS = 1 << 24  # rows of a route file or entries of one switch table
MAX_ADVICE = 100  # candidates an Advise may ask for
MAX_QPS = 1024  # queue pairs per flow (E-ECMP hashing, QP buckets)
MAX_SEED = 2**32 - 1
# ---- documents ---------------------------------------------------------------------------------
MAX_DOCUMENT_BYTES = 256 << 20  # one file (fabric, placement, routes, driver table)


MAX_REPORTED = 20  # problems one error lists, each on its own line, before "and N more"


def report(problems: Sequence[str], total: int | None = None) -> str:
    """Up to MAX_REPORTED problems ("field: what is wrong"), one a line, and how many more
    there are of `total` (default: len(problems))."""
    total = len(problems) if total is None else total
    shown_ = list(problems[:MAX_REPORTED])
    more = total - len(shown_)
    if more > 0:
        shown_.append(f"... and {more:,} more")
    return "\n  ".join(shown_)


def fail_all(err: type[FabricTeError], problems: Sequence[str], total: int | None = None) -> None:
    """Raise `err` listing `problems` (see `report`); nothing when there are none."""
    if problems:
        raise err(report(problems, total))


def fail(err: type[FabricTeError], field: str, message: str) -> NoReturn:
    """Raise `err` for `field`; a JobError also records `field` and the bare message."""
    if issubclass(err, JobError):
        raise err(message, field)
    raise err(f"{field}: {message}" if field else message)


def shown(value: Any) -> str:
    """`repr(value)`, cut to 60 characters for an error message."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def integer(value: Any, field: str, lo: int, hi: int, err: type[FabricTeError] = InputError) -> int:
    """An int (not a bool, not a float) within [lo, hi]."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer):
        fail(err, field, f"must be an integer, got {shown(value)}")
    if not lo <= value <= hi:
        fail(err, field, f"{int(value)} is not within [{lo}, {hi}]")
    return int(value)


def _yaml_text_number(text: str) -> bool:
    """Whether `text` is a number YAML 1.1 leaves as a string (1e-5: no '.' in it)."""
    try:
        float(text)
    except ValueError:
        return False
    return "e" in text.lower() and "." not in text


def number(
    value: Any, field: str, lo: float, hi: float, err: type[FabricTeError] = InputError
) -> float:
    """A finite real (int or float, not a bool) within [lo, hi]."""
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | float | np.number):
        if isinstance(value, str) and _yaml_text_number(value):
            fail(err, field, f"must be a number, got {shown(value)} (YAML reads an exponent "
                 "without a '.' as text: write it as 1.0e-5, or in full)")  # fmt: skip
        fail(err, field, f"must be a number, got {shown(value)}")
    try:
        out = float(value)
    except OverflowError:
        fail(err, field, f"{shown(value)} is not within [{lo:g}, {hi:g}]")
    if not math.isfinite(out):
        fail(err, field, f"must be a finite number, got {out!r}")
    if not lo <= out <= hi:
        fail(err, field, f"{out!r} is not within [{lo:g}, {hi:g}]")
    return out


def gbps(value: Any, field: str, err: type[FabricTeError] = InputError) -> float:
    """A speed or demand in Gbps, within [MIN_GBPS, MAX_GBPS]."""
    return number(value, field, MIN_GBPS, MAX_GBPS, err)


def fraction(value: Any, field: str, err: type[FabricTeError] = InputError) -> float:
    """A link's capacity factor: 0 (down), 1 (up) or degraded within [MIN_FRACTION, 1)."""
    out = number(value, field, 0.0, 1.0, err)
    if 0.0 < out < MIN_FRACTION:
        fail(err, field, f"{out!r} is below the smallest degraded fraction {MIN_FRACTION:g}")
    return out


def text(
    value: Any, field: str, err: type[FabricTeError] = InputError, limit: int = MAX_NAME
) -> str:
    """A non-empty string of at most `limit` characters, without control characters."""
    if not isinstance(value, str):
        fail(err, field, f"must be a string, got {shown(value)}")
    if not value:
        fail(err, field, "must not be empty")
    if len(value) > limit:
        fail(err, field, f"is {len(value)} characters long; at most {limit}")
    if not value.isprintable():
        fail(err, field, f"{shown(value)} contains control characters")
    return value


def listing(
    value: Any, field: str, limit: int, err: type[FabricTeError] = InputError
) -> Sequence[Any]:
    """A list of at most `limit` items; a string or a mapping is not a list."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence):
        fail(err, field, f"must be a list, got {shown(value)}")
    if len(value) > limit:
        fail(err, field, f"has {len(value)} items; at most {limit}")
    return value


def mapping(value: Any, field: str, err: type[FabricTeError] = InputError) -> Mapping[str, Any]:
    """A mapping whose keys are all strings."""
    if not isinstance(value, Mapping):
        fail(err, field or "top level", f"must be a mapping, got {shown(value)}")
    for key in value:
        if not isinstance(key, str):
            where = f"{field}.{key}" if field else str(key)
            fail(err, where, f"key must be a string, got {shown(key)}")
    return value


def keys(
    value: Mapping[str, Any],
    field: str,
    allowed: Sequence[str],
    required: Sequence[str] = (),
    err: type[FabricTeError] = InputError,
) -> None:
    """No key outside `allowed`, every key of `required`."""
    unknown = sorted(map(str, set(value) - set(allowed)))
    if unknown:
        shown = ", ".join(k if len(k) <= 60 else k[:57] + "..." for k in unknown[:5])
        more = f" (and {len(unknown) - 5} more)" if len(unknown) > 5 else ""
        fail(err, field, f"unknown key(s) {shown}{more}; allowed: {', '.join(allowed)}")
    for key in required:
        if key not in value:
            fail(err, field, f"missing required key {key!r}")


def dimensions(dims: Mapping[str, int], err: type[FabricTeError] = InputError) -> None:
    """Each Clos dimension within its cap, then the totals, before anything is built."""
    for name, (lo, hi) in DIMENSION_CAPS.items():
        integer(dims[name], name, lo, hi, err)
    pods, racks, hosts = dims["pods"], dims["racks_per_pod"], dims["hosts_per_rack"]
    nics, ctsws, atsws = dims["nics_per_host"], dims["ctsws_per_pod"], dims["atsws_per_plane"]
    gpus = pods * racks * hosts * nics
    if gpus > MAX_GPUS:
        fail(err, "pods*racks_per_pod*hosts_per_rack*nics_per_host",
             f"{gpus:,} GPUs exceed the cap of {MAX_GPUS:,}")  # fmt: skip
    links = (
        gpus + pods * racks * dims["rtsws_per_rack"] * ctsws * dims["rack_links"]
        + pods * ctsws * atsws * dims["agg_links"]
    )
    if links > MAX_LINKS:
        fail(err, "links", f"{links:,} links exceed the cap of {MAX_LINKS:,}")
    switches = pods * racks * dims["rtsws_per_rack"] + pods * ctsws + ctsws * atsws
    if switches > MAX_SWITCHES:
        fail(err, "switches", f"{switches:,} switches exceed the cap of {MAX_SWITCHES:,}")


def flag(kind: type[int] | type[float], lo: float, hi: float) -> Callable[[str], Any]:
    """An argparse ``type=`` for a command-line number: the same rule set on the command line
    (a finite int or float within [lo, hi]; argparse then exits 2 with the message)."""

    def convert(value: str) -> int | float:
        try:
            parsed = kind(value)
        except ValueError:
            raise argparse.ArgumentTypeError(
                f"{value!r} is not a{'n integer' if kind is int else ' number'}"
            ) from None
        try:
            if kind is int:
                return integer(parsed, "", int(lo), int(hi))
            return number(parsed, "", lo, hi)
        except InputError as err:
            raise argparse.ArgumentTypeError(str(err)) from None

    convert.__name__ = kind.__name__
    return convert
