"""PNG of link utilisation per tier, one panel per tier, one box per routing."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from controller.errors import InputError
from controller.model.assignment import Assignment
from controller.model.fabric import TIER_NAMES, Fabric
from controller.model.health import LinkHealth


def tier_utilisation(
    fabric: Fabric, health: LinkHealth, assignment: Assignment
) -> dict[str, np.ndarray]:
    """Offered load / usable capacity of every live arc, grouped by tier."""
    cap = health.arc_capacity(fabric)
    util = np.divide(
        assignment.link_load(fabric), cap, out=np.zeros(fabric.num_arcs), where=cap > 0
    )
    tier = fabric.arc_tier
    return {name: util[(tier == t) & (cap > 0)] for t, name in enumerate(TIER_NAMES)}


def require_matplotlib() -> None:
    """Fail early, with the fix, when plotting is asked for but matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError(
            "--plot needs matplotlib: pip install 'fabric-te[plot]' (or matplotlib)"
        ) from None


def plot_tiers(
    path: str, fabric: Fabric, health: LinkHealth, routings: Mapping[str, Assignment]
) -> None:
    """Write a box plot of per-tier utilisation for each routing to `path`."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = {name: tier_utilisation(fabric, health, a) for name, a in routings.items()}
    tiers = [t for t in TIER_NAMES if any(v[t].size for v in data.values())]
    fig, axes = plt.subplots(1, len(tiers), figsize=(3.2 * len(tiers), 3.6), sharey=True)
    for ax, tier in zip(np.atleast_1d(axes), tiers, strict=True):
        ax.boxplot([data[name][tier] for name in routings], whis=(0, 100))
        ax.set_xticks(range(1, len(routings) + 1), list(routings), rotation=30)
        ax.set_title(tier)
        ax.axhline(1.0, color="grey", linestyle=":", linewidth=1)
    np.atleast_1d(axes)[0].set_ylabel("link utilisation (offered / capacity)")
    fig.suptitle(f"{fabric.name}: utilisation per tier")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
