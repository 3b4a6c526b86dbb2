#!/usr/bin/env python3
"""Checks the shape of the Python package compiler/collsched.

1. No import cycle among collsched modules. The graph has an edge A -> B for every
   `import`/`from ... import` in A naming B, wherever it stands (module level or inside a
   function: a lazy import still ties the two modules together), and for every
   `from P import name` where P.name is itself a module. Importing a module X.Y also runs
   the package X/__init__.py, so A -> X.Y implies A -> X when A is outside X (a module
   inside X runs while X is already being imported; it depends on X/__init__.py only
   when it imports a name from it).
2. No module longer than MAX_MODULE_LINES lines.
3. No function (def, async def, method, nested function) longer than MAX_FUNCTION_LINES
   lines, from its `def` line (decorators included) to its last line.
4. The core never imports the lab: no module outside collsched/lab/ imports collsched.lab,
   except the front end cli.py (it imports the lab's tools inside the lab's commands).

Prints one line per violation and exits 1 if there is any, 0 otherwise.
Usage: python tools/check_architecture.py [PACKAGE_DIR]   (default compiler/collsched)
"""
from __future__ import annotations

import ast
import sys
from pathlib import Path

import networkx as nx

MAX_MODULE_LINES = 700
MAX_FUNCTION_LINES = 120
FRONT_END = {"collsched.cli", "collsched.cli_measure", "collsched.cli_trace", "collsched.cli_cache", "collsched.cli_sweep",
             "collsched.__main__"}  # may import the lab (lazily)

# Known violations, each to be removed by the change that fixes it. None left (the last
# were min3's engines, split into named helpers). Nothing may be added here: fix the code
# instead.
ALLOWED: set[tuple[str, str]] = set()


def module_name(root: Path, path: Path) -> str:
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(name: str, is_package: bool, tree: ast.AST, modules: set[str]) -> set[str]:
    """The collsched modules `name` imports, anywhere in its body."""
    package = name if is_package else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            targets = [target] + [f"{target}.{alias.name}" for alias in node.names]
        else:
            continue
        for target in targets:
            # The module itself and every package above it (their __init__ runs first).
            parts = target.split(".")
            for k in range(1, len(parts) + 1):
                prefix = ".".join(parts[:k])
                inside = name.startswith(prefix + ".")
                if prefix in modules and prefix != name and (k == len(parts) or not inside):
                    found.add(prefix)
    return found


def function_lengths(name: str, tree: ast.AST):
    """(qualified name, lines) of every function in the module, nested ones included."""
    def walk(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                first = min([child.lineno] + [d.lineno for d in child.decorator_list])
                yield f"{prefix}.{child.name}", child.end_lineno - first + 1
                yield from walk(child, f"{prefix}.{child.name}")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}.{child.name}")
            else:
                yield from walk(child, prefix)
    yield from walk(tree, name)


def check(root: Path) -> list[str]:
    paths = sorted(root.rglob("*.py"))
    sources = {module_name(root, p): (p, p.read_text()) for p in paths}
    modules = set(sources)
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    problems = []
    for name, (path, text) in sorted(sources.items()):
        tree = ast.parse(text, str(path))
        rel = path.relative_to(root.parent.parent) if root.parent.parent in path.parents else path
        for dep in imported_modules(name, path.name == "__init__.py", tree, modules):
            graph.add_edge(name, dep)
        lines = len(text.splitlines())
        if lines > MAX_MODULE_LINES and ("module", name) not in ALLOWED:
            problems.append(f"{rel}: module of {lines} lines (limit {MAX_MODULE_LINES})")
        for qual, n in function_lengths(name, tree):
            if n > MAX_FUNCTION_LINES and ("function", qual) not in ALLOWED:
                problems.append(f"{rel}: function {qual.removeprefix(name + '.')} of {n} lines "
                                f"(limit {MAX_FUNCTION_LINES})")
    lab = f"{root.name}.lab"
    for name in sorted(modules):
        if name == lab or name.startswith(lab + ".") or name in FRONT_END:
            continue
        for dep in sorted(graph.successors(name)):
            if dep == lab or dep.startswith(lab + "."):
                problems.append(f"{name}: the core imports the lab ({dep})")
    for cycle in sorted(sorted(c) for c in nx.simple_cycles(graph)):
        problems.append("import cycle: " + " -> ".join(cycle + [cycle[0]]))
    return problems


def main(argv: list[str]) -> int:
    default = Path(__file__).resolve().parent.parent / "compiler" / "collsched"
    root = Path(argv[1]) if len(argv) > 1 else default
    problems = check(root.resolve())
    for line in problems:
        print(line)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
