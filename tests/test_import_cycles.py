"""No import cycle among ltsedge's modules, counting the imports inside functions (a lazy import that only
hides a cycle is still one) but not those made for type annotations alone (``if TYPE_CHECKING:``)."""

from __future__ import annotations

import ast
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "ltsedge"


def module_names(root: Path) -> dict[str, Path]:
    names = {}
    for path in root.rglob("*.py"):
        parts = path.relative_to(root.parent).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def annotation_only(tree: ast.AST) -> set[int]:
    """The nodes under ``if TYPE_CHECKING:``."""
    inside: set[int] = set()
    for node in ast.walk(tree):
        test = getattr(node, "test", None)
        if isinstance(node, ast.If) and getattr(test, "id", getattr(test, "attr", None)) == "TYPE_CHECKING":
            inside.update(id(n) for child in node.body for n in ast.walk(child))
    return inside


def imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The ltsedge modules ``name`` imports anywhere in its body (a name imported from a package: the
    submodule of that name where there is one, else the package)."""
    tree = ast.parse(path.read_text())
    skip = annotation_only(tree)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(parts + ([node.module] if node.module else []))
            found.update(f"{base}.{a.name}" if f"{base}.{a.name}" in modules else base for a in node.names)
    return {m for m in found if m in modules and m != name}


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_module_imports_itself_through_others():
    modules = module_names(PACKAGE)
    graph = {name: imports(name, path, modules) for name, path in modules.items()}
    found = cycles(graph)
    detail = "; ".join(" <-> ".join(c) for c in found)
    assert not found, f"import cycles: {detail}"


def test_the_check_finds_a_cycle_hidden_in_a_function(tmp_path):
    package = tmp_path / "ltsedge"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from ltsedge.b import g\n")
    (package / "b.py").write_text("def g():\n    from ltsedge import a\n")
    (package / "c.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from ltsedge.a import g\n")
    modules = module_names(package)
    graph = {name: imports(name, path, modules) for name, path in modules.items()}
    assert cycles(graph) == [["ltsedge.a", "ltsedge.b"]]
