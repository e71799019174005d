"""Size and shape of the code: modules and sub-packages, the largest module and `#| export` cell, private names used
across modules and across sub-packages, signatures that thread `cache_dir` / `progress` / `max_pixels`, the `evaluate*`
functions, notebooks whose code depends on a later-numbered notebook, function-local imports and import cycles
(loading by name included). Reads source only, so it runs on any checkout, old layout or new.

    python bench/code_stats.py [REPO_ROOT] [--json]       # default: this checkout
"""
import json, re, sys
from collections import Counter
from pathlib import Path

here = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(here / 'tests'))
import code_graph as G

args = [a for a in sys.argv[1:] if not a.startswith('--')]
root = Path(args[0] if args else here).resolve()
pkg = root / 'docbench_nb'
mods = G.modules(pkg)
sizes = sorted(((len(p.read_text().splitlines()), m) for m, p in mods.items()), reverse=True)
cells = sorted(((len(''.join(c['source']).splitlines()), f.relative_to(root / 'nbs').as_posix())
                for f in sorted((root / 'nbs').rglob('*.ipynb')) if '.ipynb_checkpoints' not in f.parts
                for c in json.loads(f.read_text())['cells']
                if c['cell_type'] == 'code' and ''.join(c['source']).startswith('#| export')), reverse=True)
edges = G.edges(pkg)
priv = G.private_imports(pkg)
late_nbs = G.notebooks_out_of_order(root)
literal = sum(len(re.findall(r'\b1_000_000\b', p.read_text())) for p in mods.values())
stats = {
    'top-level modules': sum('.' not in m and m != '__init__' for m in mods),
    'sub-packages': len({m.split('.')[0] for m in mods if '.' in m}),
    'modules': len(mods),
    'largest module': f'{sizes[0][1]} ({sizes[0][0]} lines)',
    'largest export cell': f'{cells[0][1]} ({cells[0][0]} lines)',
    'export cells over 60 lines': sum(n > 60 for n, _ in cells),
    'private names imported across modules': len(priv),
    'private names imported across sub-packages': sum(G.subpackage(a) != G.subpackage(b) for a, b, _ in priv),
    'signatures with cache_dir': G.signatures_with(pkg, 'cache_dir'),
    'signatures with progress': G.signatures_with(pkg, 'progress'),
    'signatures with max_pixels': G.signatures_with(pkg, 'max_pixels'),
    'signatures handing a run setting on unused': G.signatures_handing_on(pkg),
    'literal 1_000_000': literal,
    'evaluate* functions': len(G.public_functions(pkg, 'evaluate')),
    'notebooks depending on later-numbered ones': len({a for a, _ in late_nbs}),
    'function-local imports of package modules': sum(e['kind'] == 'local' for e in edges),
    'modules loaded by name': len({e['dst'] for e in edges if e['kind'] == 'name'}),
    'modules on an import cycle': sum(len(c) for c in G.cycles(G.graph(pkg))),
}
if '--json' in sys.argv: print(json.dumps(stats))
else:
    w = max(map(len, stats))
    for k, v in stats.items(): print(f'{k:<{w}}  {v}')
