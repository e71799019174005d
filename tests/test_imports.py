"""The import graph of docbench_nb: no cycles (top-level and function-local imports alike), and no module too big."""
import ast
from pathlib import Path
import docbench_nb

PKG = Path(docbench_nb.__file__).parent


def import_graph():
    mods = {p.stem: p for p in PKG.glob('*.py') if not p.stem.startswith('_')}
    graph = {m: set() for m in mods}
    for m, p in mods.items():
        for node in ast.walk(ast.parse(p.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                if node.level == 1: targets = [node.module.split('.')[0]] if node.module else [a.name for a in node.names]
                elif node.module and node.module.split('.')[0] == 'docbench_nb':
                    parts = node.module.split('.')
                    targets = [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
            elif isinstance(node, ast.Import):
                targets = [a.name.split('.')[1] for a in node.names if a.name.startswith('docbench_nb.')]
            graph[m] |= {t for t in targets if t in mods and t != m}
    return graph


def cycles(graph):
    "Strongly connected components with more than one module (Tarjan)."
    index, low, stack, on, out, i = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = i[0]; i[0] += 1; stack.append(v); on.add(v)
        for w in graph[v]:
            if w not in index: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(sorted(comp))
    for v in graph:
        if v not in index: visit(v)
    return out


def test_cycle_detector_finds_a_cycle():
    assert cycles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == [['a', 'b', 'c']]
    assert cycles({'a': {'b'}, 'b': set()}) == []


def test_no_import_cycle():
    g = import_graph()
    assert len(g) > 20
    assert cycles(g) == []


def test_low_modules_import_nothing_above():
    g = import_graph()
    assert g['records'] == set()
    assert g['spec'] == set() and g['cache'] == set()
    assert g['retrievers'] <= {'records', 'spec'}


def test_no_module_over_800_lines():
    sizes = {p.name: len(p.read_text().splitlines()) for p in PKG.glob('*.py') if p.name != '_modidx.py'}
    assert max(sizes.values()) <= 800, sorted(sizes.items(), key=lambda x: -x[1])[:3]
