"""A PNG for people: per-job bus bandwidth and the busiest link per tier of several
routings side by side (what `tectl solve --plot` writes)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from controller.formats.picture import require_matplotlib, save_picture
from controller.model.fabric import TIER_NAMES
from controller.model.rates import SimReport

# One colour per routing, the same in every panel; TE first.
COLOURS = {"fabric-te": "#1b7837", "eecmp": "#f1a340", "ecmp": "#d73027", "pinning": "#8073ac",
           "wcmp": "#2166ac", "spray": "#92c5de", "adaptive-spray": "#bababa"}
MAX_JOBS = 24  # bars per panel; with more jobs, the ones ECMP treats worst are shown


def _colour(method: str) -> str:
    base = method.split("-")[0] if method.startswith(("eecmp", "wcmp")) else method
    return COLOURS.get(base, "grey")


def plot_comparison(path: str, fabric_name: str, reports: Mapping[str, SimReport]) -> None:
    """Two panels: each job's predicted bus bandwidth (grouped bars, one per routing), and
    each tier's max link utilisation. `reports` maps routing name -> its simulation, in
    the order to draw (fabric-te first, then e.g. eecmp-16qp, ecmp)."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    order = ("fabric-te", "eecmp", "ecmp")  # TE vs E-ECMP vs ECMP; others after
    names = sorted((n for n in reports if n != "pinning"), key=lambda n: next(
        (i for i, o in enumerate(order) if n.startswith(o)), len(order))) or list(reports)
    jobs = sorted({j for n in names for j in reports[n].job_busbw_fraction})
    title = "predicted bus bandwidth per job (share of line rate)"
    if len(jobs) > MAX_JOBS:
        key = names[-1]  # the last routing (ECMP): show the jobs it treats worst
        jobs = sorted(jobs, key=lambda j: (reports[key].job_busbw_fraction.get(j, 1.0), j))
        jobs = sorted(jobs[:MAX_JOBS])
        title += f": the {MAX_JOBS} jobs {key} treats worst"
    tiers = [t for t in TIER_NAMES if t.split(">")[0] != "nic"
             and any(reports[n].tier_mlu.get(t, 0.0) > 0 for n in names)]  # fmt: skip
    fig, (ax_jobs, ax_tiers) = plt.subplots(
        2, 1, figsize=(min(14.0, max(8.0, 0.22 * len(jobs) * len(names) + 3)), 7.5),
        gridspec_kw={"height_ratios": [3, 2]},
    )  # fmt: skip
    width = 0.8 / len(names)
    for i, name in enumerate(names):
        rep = reports[name]
        x = np.arange(len(jobs)) + (i - (len(names) - 1) / 2) * width
        ax_jobs.bar(x, [100 * rep.job_busbw_fraction.get(j, np.nan) for j in jobs], width,
                    label=f"{name} (worst {rep.busbw_fraction_min:.0%})", color=_colour(name))
        xt = np.arange(len(tiers)) + (i - (len(names) - 1) / 2) * width
        ax_tiers.bar(xt, [rep.tier_mlu.get(t, 0.0) for t in tiers], width, label=name,
                     color=_colour(name))  # fmt: skip
    ax_jobs.set_xticks(range(len(jobs)), jobs, rotation=45 if len(jobs) > 8 else 0,
                       ha="right" if len(jobs) > 8 else "center")  # fmt: skip
    ax_jobs.set_ylim(0, 125)
    ax_jobs.set_yticks(range(0, 101, 20))
    ax_jobs.set_ylabel("% of line rate")
    ax_jobs.axhline(100, color="grey", linestyle=":", linewidth=1)
    ax_jobs.set_title(title)
    # at most 3 a row: a narrow figure (few jobs) cuts a longer row off
    ax_jobs.legend(loc="upper center", ncol=min(len(names), 3), fontsize="small", frameon=False)
    ax_tiers.set_xticks(range(len(tiers)), tiers)
    ax_tiers.set_ylabel("max offered load / capacity")
    ax_tiers.axhline(1.0, color="black", linestyle="--", linewidth=1)
    ax_tiers.text(len(tiers) - 0.5, 1.0, " capacity", va="bottom", ha="right", fontsize="small")
    ax_tiers.set_title("busiest link per tier (above the line: congested)")
    fig.suptitle(f"{fabric_name}: {', '.join(names)}", fontweight="bold")
    fig.tight_layout()
    save_picture(fig, path)
