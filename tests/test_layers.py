"""No module of gpuslice imports itself back through others: the import graph has no cycle.

Every import counts, at module level, in a function (the CLI's lazy ones) or under
``TYPE_CHECKING``: a cycle the interpreter never trips over still makes a reader go round in
it. Which part may import which (the layers, and the packages' own cycles) is
``[tool.importlinter]`` in pyproject.toml, checked by ``make lint``; this finds the cycles
between single modules, a package's ``__init__`` among them, and prints each one whole.
"""

from __future__ import annotations

import grimp


def module_cycles(graph: grimp.ImportGraph) -> list[tuple[str, ...]]:
    """Each cycle once (as ``a, b, ..., a``, from its first module by name): for every direct
    import ``a -> b``, the shortest way from ``b`` back to ``a``, if there is one."""
    found: dict[tuple[str, ...], None] = {}
    for importer in sorted(graph.modules):
        for imported in sorted(graph.find_modules_directly_imported_by(importer)):
            back = graph.find_shortest_chain(importer=imported, imported=importer)
            if back is None:
                continue
            ring = (importer, *back[:-1])
            start = ring.index(min(ring))
            found.setdefault((*ring[start:], *ring[:start], min(ring)), None)
    return list(found)


def described(graph: grimp.ImportGraph, cycle: tuple[str, ...]) -> str:
    steps = []
    for importer, imported in zip(cycle, cycle[1:], strict=False):
        lines = sorted(d["line_number"] for d in graph.get_import_details(
            importer=importer, imported=imported))
        steps.append(f"  {importer} (line {', '.join(map(str, lines))}) -> {imported}")
    return "\n".join(steps)


def test_no_module_imports_itself_back() -> None:
    graph = grimp.build_graph("gpuslice", cache_dir=None)
    cycles = module_cycles(graph)
    assert not cycles, "import cycles (move what both sides need to where it belongs):\n" + (
        "\n\n".join(described(graph, c) for c in cycles))


def test_a_cycle_is_found_and_named_whole() -> None:
    graph = grimp.ImportGraph()
    for module in ("p", "p.a", "p.b", "p.c"):
        graph.add_module(module)
    graph.add_import(importer="p.a", imported="p.b", line_number=3, line_contents="import p.b")
    graph.add_import(importer="p.b", imported="p.c", line_number=4, line_contents="import p.c")
    graph.add_import(importer="p.c", imported="p.a", line_number=5, line_contents="import p.a")
    graph.add_import(importer="p", imported="p.a", line_number=1, line_contents="import p.a")
    assert module_cycles(graph) == [("p.a", "p.b", "p.c", "p.a")]
    assert described(graph, ("p.a", "p.b", "p.c", "p.a")).splitlines()[0] == (
        "  p.a (line 3) -> p.b")
