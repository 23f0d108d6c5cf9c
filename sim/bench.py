"""Scale benchmarks: `python -m sim.bench [--quick] [--only SECTION ...] [--out FILE]`.

Each section times its work as the median of a few runs and compares routings on the same
flows in the same process, so the ratios hold on a noisy machine. The output is Markdown,
written to docs/benchmarks.md by `make bench`.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from controller.fabric import Fabric
from controller.flows import FlowSet
from controller.health import LinkHealth
from controller.report import format_table
from sim.clos import PRESETS, build
from sim.compare import baseline
from sim.jobmix import ring_jobs
from sim.workloads import jobs_flows


def timed(fn: Callable[[], Any], repeats: int) -> tuple[float, Any]:
    """Median wall time of `repeats` calls, and the last result."""
    times, result = [], None
    for _ in range(max(repeats, 1)):
        start = time.perf_counter()
        result = fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times), result


@dataclass
class Section:
    """A titled block of Markdown."""

    title: str
    lines: list[str] = field(default_factory=list)

    def table(self, header: list[str], rows: list[list[object]]) -> None:
        text = format_table(header, rows).rstrip("\n").split("\n")
        self.lines.append("```")
        self.lines.extend(text)
        self.lines.append("```")

    def text(self, line: str) -> None:
        self.lines.append(line)

    def markdown(self) -> str:
        return f"## {self.title}\n\n" + "\n".join(self.lines) + "\n"


@dataclass(frozen=True)
class Config:
    repeats: int
    seeds: tuple[int, ...]
    sweep_seeds: int
    quick: bool


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def ring_flows(fabric: Fabric, hosts_per_job: int = 16, seed: int | None = None) -> FlowSet:
    return jobs_flows(fabric, ring_jobs(fabric, hosts_per_job, seed=seed))


def bench_foundation(cfg: Config) -> Iterator[Section]:
    """Generator and simulator times; baseline collisions on fabrics full of ring jobs."""
    sec = Section("Foundation: generator, workloads, simulator")
    rows = []
    for name in ("pod", "meta-24k"):
        t_build, fabric = timed(lambda name=name: build(PRESETS[name]), cfg.repeats)
        t_jobs, flows = timed(lambda fabric=fabric: ring_flows(fabric, 16, seed=1), cfg.repeats)
        health = LinkHealth.all_up(fabric)
        t_sim, row = timed(
            lambda fabric=fabric, flows=flows, health=health: baseline(
                "ecmp", fabric, health, flows, 1
            ),
            cfg.repeats,
        )
        t_eecmp, erow = timed(
            lambda fabric=fabric, flows=flows, health=health: baseline(
                "eecmp", fabric, health, flows, 1, 16
            ),
            cfg.repeats,
        )
        rows.append([name, fabric.num_nics, len(flows), t_build, t_jobs, t_sim,
                     erow.report.subflows, t_eecmp])  # fmt: skip
        log(f"  foundation {name}: built, {len(flows)} flows")
    sec.text("Fabric full of 16-host ring all-reduce jobs (hosts dealt at random, seed 1). "
             "Times are medians in seconds; the ECMP and E-ECMP columns include routing and "
             "the max-min simulation.")  # fmt: skip
    sec.text("")
    sec.table(
        ["fabric", "GPUs", "flows", "build s", "jobs->flows s", "ECMP+sim s", "E-ECMP subflows",
         "E-ECMP+sim s"],
        rows,
    )  # fmt: skip
    yield sec

    sec = Section("Baselines on fabrics full of ring all-reduce jobs")
    sec.text(
        "Same flows for every routing; busbw is the fraction of ideal bus bandwidth "
        "(a step ends when its slowest flow ends). Seeds vary the job placement and hash."
    )
    sec.text("")  # fmt: skip
    rows = []
    for name in ("pod", "meta-24k"):
        fabric = build(PRESETS[name])
        health = LinkHealth.all_up(fabric)
        for seed in cfg.seeds:
            flows = ring_flows(fabric, 16, seed=seed)
            for method in ("ecmp", "eecmp", "pinning"):
                r = baseline(method, fabric, health, flows, seed).report
                rows.append(
                    [
                        name,
                        seed,
                        method,
                        r.mlu,
                        r.collided_links,
                        r.max_flows_per_link,
                        r.worst_flow_share,
                        r.busbw_fraction_mean,
                        r.busbw_fraction_min,
                    ]
                )
        log(f"  baselines {name} done")
    sec.table(["fabric", "seed", "routing", "MLU", "collided links", "max flows/link",
               "worst share", "busbw mean", "busbw worst"], rows)  # fmt: skip
    yield sec


SECTIONS: dict[str, Callable[[Config], Iterator[Section]]] = {
    "foundation": bench_foundation,
}


def header(cfg: Config, argv: list[str]) -> str:
    cmd = "make bench" if not argv else "python -m sim.bench " + " ".join(argv)
    return (
        "# Benchmarks\n\n"
        f"Produced by `{cmd}` on {platform.machine()} with {platform.python_version()}, "
        f"numpy {np.__version__}; medians of {cfg.repeats} runs. Single machine, 2 cores: "
        "treat absolute times as +-20%; ratios within one table are measured in one run.\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m sim.bench", description=__doc__)
    parser.add_argument("--out", help="write Markdown here (default: stdout)")
    parser.add_argument("--quick", action="store_true", help="fewer seeds and repeats")
    parser.add_argument("--only", action="append", choices=sorted(SECTIONS), help="sections")
    args = parser.parse_args(argv)
    cfg = Config(
        repeats=1 if args.quick else 3,
        seeds=(1, 2) if args.quick else (1, 2, 3, 4, 5),
        sweep_seeds=3 if args.quick else 20,
        quick=args.quick,
    )
    parts = [header(cfg, list(argv) if argv is not None else sys.argv[1:])]
    for name in args.only or list(SECTIONS):
        log(f"section {name}")
        start = time.perf_counter()
        for sec in SECTIONS[name](cfg):
            parts.append(sec.markdown())
        log(f"section {name}: {time.perf_counter() - start:.1f} s")
    text = "\n".join(parts)
    if args.out:
        with open(args.out, "w") as fh:
            fh.write(text)
        log(f"wrote {args.out}")
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
