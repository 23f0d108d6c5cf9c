"""Where a picture (`--plot FILE`) goes: checked before any work, so a typo in the path or
the extension costs nothing, and a command that pushes routes never fails after the push."""

from __future__ import annotations

import os
from pathlib import Path

from controller.errors import InputError


def check_picture_path(path: str, flag: str = "--plot") -> None:
    """InputError naming `flag` unless matplotlib is installed, writes the file's format
    (from its extension) and the file's folder exists and is writable."""
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise InputError(f"{flag} needs matplotlib: pip install 'fabric-te[plot]'") from None
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
