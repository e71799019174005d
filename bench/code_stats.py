"""Size of the code: modules and their line counts, `#| export` cells and their line counts, function-local imports of
the package's own modules, and the import cycles (the house rules: one concept per module, small export cells, data
flowing one way).

    python bench/code_stats.py [REPO_ROOT]        # default: this checkout
"""
import ast, json, sys
from collections import Counter
from pathlib import Path

root = Path(sys.argv[1] if len(sys.argv) > 1 else Path(__file__).resolve().parents[1])
pkg = root / 'docbench_nb'
mods = sorted(((len(p.read_text().splitlines()), p.name) for p in pkg.glob('*.py') if p.name != '_modidx.py'), reverse=True)
cells = sorted(((len(''.join(c['source']).splitlines()), f.name) for f in sorted((root / 'nbs').glob('*.ipynb'))
                for c in json.loads(f.read_text())['cells']
                if c['cell_type'] == 'code' and ''.join(c['source']).startswith('#| export')), reverse=True)
local = Counter()
graph = {p.stem: set() for p in pkg.glob('*.py') if not p.stem.startswith('_')}
for p in pkg.glob('*.py'):
    if p.stem.startswith('_'): continue
    tree = ast.parse(p.read_text())
    def targets(node):
        if isinstance(node, ast.ImportFrom):
            if node.level == 1: return [node.module.split('.')[0]] if node.module else [a.name for a in node.names]
            if (node.module or '').startswith('docbench_nb'):
                parts = node.module.split('.'); return [parts[1]] if len(parts) > 1 else [a.name for a in node.names]
        if isinstance(node, ast.Import): return [a.name.split('.')[1] for a in node.names if a.name.startswith('docbench_nb.')]
        return []
    for node in ast.walk(tree): graph[p.stem] |= {t for t in targets(node) if t in graph and t != p.stem}
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
            local[p.stem] += sum(bool(targets(n)) for n in ast.walk(fn))
# cycles: modules that reach themselves
def reach(m):
    seen, todo = set(), list(graph[m])
    while todo:
        x = todo.pop()
        if x not in seen: seen.add(x); todo.extend(graph[x])
    return seen
in_cycle = sorted(m for m in graph if m in reach(m))
print(f"modules: {len(mods)}; largest {mods[:3]}; over 800 lines: {sum(n > 800 for n, _ in mods)}")
print(f"export cells: {len(cells)}; largest {cells[:3]}; over 60 lines: {sum(n > 60 for n, _ in cells)}; "
      f"median {sorted(n for n, _ in cells)[len(cells) // 2]}")
print(f"function-local imports of docbench_nb modules: {sum(local.values())} {dict(local.most_common(5))}")
print(f"modules on an import cycle: {len(in_cycle)} {in_cycle}")
