"""The BM25 difficulty filter's effect: nDCG@10 of bm25 and dense before vs after the filter, on the shared dev set
and on the queries a `docbench queries build` run generated (its stage records give the set before the filter — the
decontextualized questions — and after it); then the pipeline's final output (levels 0-3) evaluated and put through
the robustness analysis.

    python bench/queries_filter_effect.py --corpus ../shared/corpus/papers --dev ../shared/queries/dev.jsonl \
        --build /tmp/q_local [--k 5] [--retrievers bm25,dense] [--out results/queries_filter_effect.md]
"""
import argparse, json, tempfile
from pathlib import Path
import pandas as pd
import docbench_nb as db
from docbench_nb.queries.evidence import Draft, write_query_records
from docbench_nb.queries.bm25_filter import filter_queries

ap = argparse.ArgumentParser()
ap.add_argument('--corpus', required=True); ap.add_argument('--dev', required=True); ap.add_argument('--build', required=True)
ap.add_argument('--k', type=int, default=5); ap.add_argument('--retrievers', default='bm25,dense'); ap.add_argument('--out', default=None)
a = ap.parse_args()
tmp = Path(tempfile.mkdtemp(prefix='filter-effect-'))

def md(df) -> str:
    "A markdown table (no tabulate dependency)."
    cols = [df.index.name or ''] + [str(c) for c in df.columns]
    f = lambda v: f'{v:.3f}' if isinstance(v, float) else str(v)
    return '\n'.join(['| ' + ' | '.join(cols) + ' |', '|' + '---|' * len(cols)]
                     + ['| ' + ' | '.join([str(i)] + [f(v) for v in row]) + ' |' for i, row in zip(df.index, df.itertuples(index=False))])

sets = {'dev: all': Path(a.dev)}
fr = filter_queries(a.corpus, a.dev, a.k, tmp / 'dev_kept.jsonl')
sets[f'dev: kept by the filter (k={a.k})'] = tmp / 'dev_kept.jsonl'
recs = [json.loads(l) for l in (Path(a.build) / 'stages.jsonl').read_text().splitlines()]
for stage, name in (('decontextualize', 'generated: before the filter'), ('bm25', f'generated: after the filter (k={a.k})')):
    drafts = [Draft.from_dict(r['output']) for r in recs if r['stage'] == stage and not r['dropped']]
    write_query_records(drafts, tmp / f'{stage}.jsonl'); sets[name] = tmp / f'{stage}.jsonl'
sets['generated: final (all stages)'] = Path(a.build) / 'queries.jsonl'

papers = db.load_papers(a.corpus, progress=False)
rows, final = [], []
for name, path in sets.items():
    n = sum(1 for l in path.read_text().splitlines() if l.strip()) if path.is_file() else 0
    row = {'query set': name, 'n': n}
    for ret in a.retrievers.split(','):
        res = db.evaluate(papers, path, retriever=ret, progress=False) if n else None
        row[f'{ret} ndcg@10'] = res.table().loc['overall (L0)', 'ndcg@10'] if res else float('nan')
        if res and name.startswith('generated: final'): final.append(res)
    rows.append(row)
df = pd.DataFrame(rows).set_index('query set')
text = md(df)
print(text)
print(f"\ndev gold ranks under BM25: {sorted(fr['ranks'].values())}")
if final:
    from docbench_nb.evaluation.robustness import robustness_table
    print('\nthe final queries, every level:')
    for res in final: print(md(res.table()))
    rob = robustness_table([r.to_dict() for r in final])
    print(md(rob))
    text += '\n\n' + '\n\n'.join(md(r.table()) for r in final) + '\n\n' + md(rob)
if a.out: Path(a.out).write_text(text + '\n')
