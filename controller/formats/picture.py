"""Where a picture (`--plot FILE`) goes: checked before any work, so a typo in the path or
the extension costs nothing, and a command that pushes routes never fails after the push."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from controller.errors import InputError


def require_matplotlib(flag: str = "--plot") -> None:
    """InputError naming `flag`, with the fix, when matplotlib is missing."""
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError(f"{flag} needs matplotlib: pip install 'fabric-te[plot]' (or "
                         "matplotlib)") from None  # fmt: skip


def check_picture_path(path: str, flag: str = "--plot") -> None:
    """InputError naming `flag` unless matplotlib is installed, writes the file's format
    (from its extension) and the file's folder exists and is writable."""
    require_matplotlib(flag)
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    kinds = FigureCanvasAgg(Figure()).get_supported_filetypes()
    ext = Path(path).suffix.lstrip(".").lower()
    if ext not in kinds:
        raise InputError(f"{flag}: cannot write {path}: the extension names no picture format "
                         f"({', '.join('.' + k for k in sorted(kinds))})")  # fmt: skip
    folder = Path(path).parent
    if not folder.is_dir():
        raise InputError(f"{flag}: cannot write {path}: no folder {folder}")
    if not os.access(folder, os.W_OK):
        raise InputError(f"{flag}: cannot write {path}: folder {folder} is not writable")


def save_picture(fig: Any, path: str, flag: str = "--plot") -> None:
    """Write matplotlib figure `fig` to `path` (110 dpi) and close it; InputError naming
    `flag` when it cannot be written."""
    import matplotlib.pyplot as plt

    try:
        fig.savefig(path, dpi=110)
    except (OSError, ValueError) as bad:
        raise InputError(f"{flag}: cannot write {path}: {bad}") from None
    finally:
        plt.close(fig)
