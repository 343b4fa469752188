"""The harness package has no import cycle, function-local and TYPE_CHECKING imports included.

grimp builds the graph of every ``import`` statement in ``harness`` (module level, inside functions, under
``if TYPE_CHECKING``); a strongly connected component of more than one module is a cycle. The test names
each cycle's modules and the import lines that close it, so a new one fails ``tox -e tests`` with the
place to fix.
"""

from __future__ import annotations

import grimp
import pytest


def strongly_connected(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of a directed graph (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            for successor in successors:
                if successor not in index:
                    index[successor] = low[successor] = len(index)
                    stack.append(successor)
                    on_stack.add(successor)
                    work.append((successor, iter(sorted(edges[successor]))))
                    break
                if successor in on_stack:
                    low[node] = min(low[node], index[successor])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    components.append(sorted(component))
    return components


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The components that are cycles: more than one module, or a module importing itself."""
    return [c for c in strongly_connected(edges) if len(c) > 1 or c[0] in edges[c[0]]]


@pytest.mark.parametrize("edges, expected", [
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
    ({"a": {"b"}, "b": set(), "c": {"c"}}, [["c"]]),
    ({"a": {"b"}, "b": {"a"}, "c": {"d"}, "d": {"c", "a"}}, [["a", "b"], ["c", "d"]]),
    ({"a": {"b", "c"}, "b": {"d"}, "c": {"d"}, "d": set()}, []),
])
def test_cycle_finder_on_hand_drawn_graphs(edges, expected):
    assert sorted(cycles(edges)) == expected


def test_harness_has_no_import_cycle():
    graph = grimp.build_graph("harness", include_external_packages=False, cache_dir=None)
    edges = {m: set(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    found = cycles(edges)
    lines = []
    for component in found:
        members = set(component)
        for importer in component:
            for imported in sorted(edges[importer] & members):
                for detail in graph.get_import_details(importer=importer, imported=imported):
                    lines.append(f"  {importer}:{detail['line_number']}: {detail['line_contents']}")
    assert not found, "import cycles:\n" + "\n".join(f"{c}" for c in found) + "\n" + "\n".join(lines)
