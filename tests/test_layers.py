"""The package layout (ARCHITECTURE.md): each layer imports only layers below it, no import cycles, no
private names across modules. Imports are read with `ast`, so imports inside functions and under
TYPE_CHECKING count too: a lazy import is still a dependency."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "muactl"

# Bottom to top; the same list as ARCHITECTURE.md. A name is a package (muactl/NAME/) or a top-level module.
LAYERS = [
    ["muactl", "errors"],
    ["limits", "locks", "outputs", "options"],
    ["seeds"],
    ["spec"],
    ["scaffold"],
    ["compile"],
    ["env"],
    ["domain"],
    ["importers"],
    ["models"],
    ["episode"],
    ["runs"],
    ["eval"],
    ["train"],
    ["share"],
    ["gym"],
    ["chat"],
    ["cli"],
    ["__main__"],
]
RANK = {name: i for i, names in enumerate(LAYERS) for name in names}


def module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {module_name(p): p for p in PACKAGE.rglob("*.py")}


def layer(module: str) -> str:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else "muactl"


def imports(module: str) -> list[tuple[int, str, list[str]]]:
    """(line, imported module, names taken from it) for every muactl import in a module."""
    path = MODULES[module]
    package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name, []) for a in node.names if a.name.split(".")[0] == "muactl"]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if target.split(".")[0] != "muactl":
                continue
            plain = []
            for alias in node.names:
                if f"{target}.{alias.name}" in MODULES:  # `from pkg import module`
                    out.append((node.lineno, f"{target}.{alias.name}", []))
                else:
                    plain.append(alias.name)
            if plain:
                out.append((node.lineno, target, plain))
    return out


def edges() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module in MODULES:
        for _, target, _ in imports(module):
            if target != module:
                graph[module].add(target)
    return graph


def test_every_module_has_a_layer():
    missing = sorted({layer(m) for m in MODULES} - set(RANK))
    assert not missing, f"add these to LAYERS here and in ARCHITECTURE.md: {missing}"


def test_imports_point_down():
    wrong = []
    for module in sorted(MODULES):
        for line, target, _ in imports(module):
            src, dst = layer(module), layer(target)
            if src != dst and RANK[dst] >= RANK[src]:
                wrong.append(f"{MODULES[module].relative_to(PACKAGE.parent)}:{line}: {src} imports {target} ({dst} "
                             f"is {'above' if RANK[dst] > RANK[src] else 'beside'} it)")
    assert not wrong, "imports against the layer order:\n" + "\n".join(wrong)


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_cycles():
    graph = edges()
    # a package's __init__ is imported on the way to any of its modules: a module importing its own
    # package's __init__ (for a re-exported name) would close a cycle that the graph below shows
    assert cycles(graph) == []


def test_cycle_finder_finds_a_cycle():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_private_names_across_modules():
    taken = [f"{MODULES[m].relative_to(PACKAGE.parent)}:{line}: {name} from {target}"
             for m in sorted(MODULES) for line, target, names in imports(m)
             for name in names if name.startswith("_") and not name.startswith("__")]
    assert not taken, "private names imported from another module:\n" + "\n".join(taken)


def test_exceptions_live_in_errors():
    """Every exception class is in errors.py, except private signals (`_Name`) raised and caught in one module."""
    elsewhere = []
    for module, path in MODULES.items():
        if module == "muactl.errors":
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and not node.name.startswith("_") and any(
                    (isinstance(b, ast.Name) and (b.id.endswith(("Error", "Exception")) or b.id in ERROR_NAMES))
                    or (isinstance(b, ast.Attribute) and b.attr in ERROR_NAMES) for b in node.bases):
                elsewhere.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno}: {node.name}")
    assert not elsewhere, "exception classes outside muactl/errors.py:\n" + "\n".join(elsewhere)


def _error_names() -> set[str]:
    tree = ast.parse((PACKAGE / "errors.py").read_text())
    return {n.name for n in tree.body if isinstance(n, ast.ClassDef)}


ERROR_NAMES = _error_names()


@pytest.mark.parametrize("text,wanted", [
    ("from ..errors import MuactlError\nclass Bad(MuactlError):\n    pass\n", True),
    ("class Fine:\n    pass\n", False),
])
def test_exception_check_sees_a_subclass(text, wanted):
    tree = ast.parse(text)
    classes = [n for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
    hit = any(isinstance(b, ast.Name) and (b.id.endswith("Error") or b.id in ERROR_NAMES)
              for c in classes for b in c.bases)
    assert hit is wanted
