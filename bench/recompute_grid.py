"""Recompute a committed grid from a cold cache and compare it with the committed results, query by query: the check
that a refactoring moved no number. Each row's result JSON is compared on every per-query metric (and rank) and on
n_docs, n_units, n_queries and index_bytes; rows can be
restricted with --only (substring of the row label) or --skip.

    python bench/recompute_grid.py results/grid_demo --corpus docbench_nb/demo/papers --queries docbench_nb/demo/queries.jsonl
    python bench/recompute_grid.py results/grid_representations --corpus ../shared/corpus/papers --queries ../shared/queries/dev.jsonl --skip ocr
"""
import argparse, json, math, sys, tempfile, time
from pathlib import Path
from docbench_nb.evaluation.grid import grid

ap = argparse.ArgumentParser()
ap.add_argument('folder'); ap.add_argument('--corpus', required=True); ap.add_argument('--queries', required=True)
ap.add_argument('--only', default=''); ap.add_argument('--skip', default=''); ap.add_argument('--cache-dir', default=None)
ap.add_argument('--out', default=None)
a = ap.parse_args()
folder = Path(a.folder)
table = json.loads((folder / 'table.json').read_text())
rows = [r for r in table['rows'] if (not a.only or any(s in r['label'] for s in a.only.split(',')))
        and not (a.skip and any(s in r['label'] for s in a.skip.split(',')))]
cache = a.cache_dir or tempfile.mkdtemp(prefix='cold-cache-')
out = Path(a.out or tempfile.mkdtemp(prefix='regrid-'))
t0 = time.time()
new = grid(a.corpus, a.queries, out, rows=[r['label'] for r in rows], baseline=table.get('baseline') if any(r['label'] == table.get('baseline') for r in rows) else None,
           cache_dir=cache, progress=False, log=lambda m: print(m, file=sys.stderr))
by_label = {r['label']: r for r in new['rows']}
report, same_all = [], True
for r in rows:
    old = json.loads((folder / Path(r['result']).name).read_text())
    n = by_label.get(r['label'])
    if n is None or n.get('status') not in (None, 'ok', 'computed', 'reused') and not n.get('result'):
        report.append((r['label'], 'FAILED', n and n.get('status'))); same_all = False; continue
    got = json.loads((out / Path(n['result']).name).read_text())
    key = lambda q: (q['query_id'], q['level'])
    po, pn = {key(q): q for q in old['per_query']}, {key(q): q for q in got['per_query']}
    diff = [k for k in po if k not in pn or any(not (po[k][m] == pn[k].get(m) or (isinstance(po[k][m], float) and math.isclose(po[k][m], pn[k].get(m, float('nan')), abs_tol=1e-12)))
                                               for m in po[k] if m not in ('gold',))]
    sizes = [x for x in ('n_docs', 'n_units', 'n_queries', 'index_bytes') if old.get(x) != got.get(x)]
    same = not diff and len(po) == len(pn) and not sizes
    same_all &= same
    report.append((r['label'], f"{len(po)} query rows", 'identical' if same else f"{len(diff)} differ, e.g. {diff[:3]}; sizes differ: {sizes}",
                   f"nDCG@10 {old['overall'].get('ndcg@10'):.4f} -> {got['overall'].get('ndcg@10'):.4f}", f"index_bytes {old['index_bytes']} -> {got['index_bytes']}"))
print(f"| row | query rows | per-query metrics | nDCG@10 | index bytes |\n|---|---|---|---|---|")
for x in report: print('| ' + ' | '.join(map(str, x)) + ' |')
print(f"\n{sum(1 for x in report if 'identical' in x)} of {len(report)} rows identical; cold cache {cache}; {time.time() - t0:.0f} s")
sys.exit(0 if same_all else 1)
