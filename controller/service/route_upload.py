"""A route file sent over the API (ApplyRoutes): read and checked as `tectl` reads one.

The bytes are written to a private temporary directory and read with
`controller.formats.route_file.read_routes`, so the server applies exactly the checks a
file on disk gets (columns or JSON by the first bytes, strict JSON, every bad row named);
errors name the file as the client gave it, not the temporary path.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from controller.errors import RouteError
from controller.formats.route_file import read_routes
from controller.model import validation
from controller.model.assignment import Assignment
from controller.model.fabric import Fabric
from controller.routes.tables import RouteSet


def read(fabric: Fabric, name: str, content: bytes) -> tuple[Assignment, RouteSet]:
    """The assignment and routes of a route file's `content`, checked against `fabric`."""
    validation.text(name, "name", RouteError)
    if not content:
        raise RouteError(f"{name}: content: empty; send the route file's bytes")
    with tempfile.TemporaryDirectory(prefix="fabric-te-apply-") as tmp:
        # the form is told by the first bytes; the name's suffix only words the error of
        # a '.npz' that is no archive (it read as JSON: "not UTF-8 text")
        suffix = Path(name).suffix
        path = Path(tmp) / ("routes" + (suffix if suffix[1:].isalnum() else ""))
        path.write_bytes(content)
        try:
            return read_routes(path, fabric)
        except RouteError as err:
            raise RouteError(str(err).replace(str(path), name)) from None
