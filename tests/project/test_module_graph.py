"""The project package's modules import in one direction (issue 30): no module reaches
itself through the others, so each can be read, and changed, after the ones below it."""

from __future__ import annotations

import grimp


def test_no_import_circle_in_the_project_package() -> None:
    graph = grimp.build_graph("gpulaunch")
    modules = sorted(m for m in graph.modules if m.startswith("gpulaunch.project."))
    circles = [
        (a, b)
        for a in modules
        for b in modules
        if a < b
        and graph.find_shortest_chain(a, b) is not None
        and graph.find_shortest_chain(b, a) is not None
    ]
    assert circles == []
