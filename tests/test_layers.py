"""The architecture, enforced: every package imports only the layers below it.

controller/errors.py is the bottom; then model; then routes; then solver, formats and drivers
(peers, which must not import each other); then advisor, service and cli. sim sits above all
of controller, and controller never imports sim. Only controller.service imports the
generated protobuf code (controller.api); nothing outside controller.cli imports
controller.cli (`tectl` is run, not imported). Imports are read from the source (ast),
including those inside functions, so a lazy import cannot hide a cycle; and no two modules
import each other, directly or around a longer loop (a cycle ties their meanings together).
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
# Generated gRPC code: only the service (servicer, server, client) speaks protobuf.
API, API_IMPORTER = "controller.api", "controller.service"
# The command line is the top of controller: only its own modules import it.
CLI = "controller.cli"
LAYERS = {
    "controller.errors": 0,
    "controller.model": 1,
    "controller.routes": 2,
    "controller.solver": 3,
    "controller.formats": 3,
    "controller.drivers": 3,
    "controller.advisor": 4,
    "controller.service": 5,
    "controller.cli": 6,
    "sim": 7,
}


def layer_of(module: str) -> str | None:
    """The layer a dotted module name belongs to (the longest matching prefix)."""
    best = None
    for name in LAYERS:
        if (module == name or module.startswith(name + ".")) and (
            best is None or len(name) > len(best)
        ):
            best = name
    return best


def imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every absolute import of ours in a source file."""
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            # `from controller import x` imports the module controller.x
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names]
    return [(n, m) for n, m in found if m.split(".")[0] in ("controller", "sim")]


def sources() -> list[Path]:
    files = sorted((ROOT / "controller").rglob("*.py")) + sorted((ROOT / "sim").rglob("*.py"))
    return [f for f in files if "_pb2" not in f.name and "api" not in f.relative_to(ROOT).parts]


def violations(path: Path, root: Path = ROOT) -> list[str]:
    module = ".".join(path.relative_to(root).with_suffix("").parts)
    own = layer_of(module)
    out = []
    for line, imported in imports(path):
        if imported == API or imported.startswith(API + "."):
            if not (module == API_IMPORTER or module.startswith(API_IMPORTER + ".")):
                out.append(f"{path.relative_to(root)}:{line} imports {imported}: generated "
                           f"code is for {API_IMPORTER} only")  # fmt: skip
            continue
        if (imported == CLI or imported.startswith(CLI + ".")) and not module.startswith(
            CLI + "."
        ):
            out.append(f"{path.relative_to(root)}:{line} imports {imported}: nothing "
                       f"imports {CLI} but itself")  # fmt: skip
            continue
        other = layer_of(imported)
        if own is None or other is None or other == own:
            continue
        where = f"{path.relative_to(root)}:{line} imports {imported}"
        if own.startswith("controller") and other == "sim":
            out.append(f"{where}: controller never imports sim")
        elif LAYERS[other] > LAYERS[own]:
            out.append(f"{where}: {other} is above {own}")
        elif LAYERS[other] == LAYERS[own]:
            out.append(f"{where}: {other} and {own} are peers")
    return out


def module_graph(files: list[Path], root: Path = ROOT) -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (`from pkg import name` counts as the
    module pkg.name where that is a module, else pkg); packages' __init__ are their name."""
    names = {".".join(f.relative_to(root).with_suffix("").parts).removesuffix(".__init__"): f
             for f in files}  # fmt: skip
    graph: dict[str, set[str]] = {}
    for module, path in names.items():
        out = graph.setdefault(module, set())
        for _, imported in imports(path):
            while imported and imported not in names:
                imported = imported.rpartition(".")[0]
            if imported and imported != module and not module.startswith(imported + "."):
                out.add(imported)
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The import cycles: strongly connected groups of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            group = []
            while True:
                w = stack.pop()
                group.append(w)
                if w == v:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles() -> None:
    files = [f for f in sources() if f.name != "__init__.py"]
    assert cycles(module_graph(files)) == []


def test_the_cycle_check_finds_a_loop(tmp_path: Path) -> None:
    pkg = tmp_path / "controller" / "service"
    pkg.mkdir(parents=True)
    (pkg / "a.py").write_text("from controller.service import b\n")
    (pkg / "b.py").write_text("def f():\n    from controller.service.c import x\n")
    (pkg / "c.py").write_text("import controller.service.a\n")
    (pkg / "d.py").write_text("from controller.service.a import y\n")
    graph = module_graph(sorted(pkg.glob("*.py")), root=tmp_path)
    assert cycles(graph) == [["controller.service.a", "controller.service.b",
                              "controller.service.c"]]  # fmt: skip


def test_every_source_file_is_in_a_layer() -> None:
    stray = [
        str(f.relative_to(ROOT))
        for f in sources()
        if f.name != "__init__.py"
        and layer_of(".".join(f.relative_to(ROOT).with_suffix("").parts)) is None
    ]
    assert stray == []


def test_no_layer_imports_a_layer_above_or_a_peer() -> None:
    found = [v for f in sources() for v in violations(f)]
    assert found == [], "\n".join(found)


@pytest.mark.parametrize(
    ("module", "source", "message"),
    [
        ("controller/model/x.py", "from sim.jobmix import random_jobs\n", "never imports sim"),
        ("controller/routes/x.py", "def f():\n    import controller.solver.lp\n", "above"),
        ("controller/formats/x.py", "from controller.drivers import file\n", "peers"),
        ("controller/model/x.py", "from controller import solver\n", "above"),
        ("controller/solver/x.py", "from controller.api.fabric_te.v1 import te_pb2\n", "only"),
        ("controller/cli/x.py", "from controller.api.fabric_te.v1 import te_pb2\n", "only"),
        ("sim/x.py", "from controller.api.fabric_te.v1 import te_pb2_grpc\n", "only"),
        ("sim/x.py", "from controller.cli.service import api\n", "but itself"),
        ("sim/lab/x.py", "def f():\n    from controller.cli import main\n", "but itself"),
    ],
)
def test_the_check_catches_what_it_must(tmp_path, module, source, message) -> None:
    path = tmp_path / module
    path.parent.mkdir(parents=True)
    path.write_text(source)
    found = violations(path, root=tmp_path)
    assert any(message in v for v in found), found
