"""The local model's KV-cache reuse on a real query build: the previous `docbench_nb/llm.py` against the current one, in one process.

The previous module is read from a file (`git show HEAD:docbench_nb/llm.py > /tmp/old_llm.py`; never checked out) and
loaded beside the current one. Both `LocalLLM`s share one model object (the bundled SmolLM2-135M, float32, `--threads`
torch threads) with a forward hook counting passes and tokens fed. The same small build (`build_queries` over
`--evidence-papers` shared papers, the parse cache shared, separate LLM reply caches and output folders) runs with the
previous code, then with the current one. Printed (one JSON line, also written to `--out`): wall seconds, forward passes
and tokens encoded per run, the ratios, and whether both builds wrote the same queries and stage records.

    python bench/queries_local_kv.py --corpus ../shared/corpus/papers --previous /tmp/old_llm.py --evidence-papers 4 \
        --types text,table --bm25-k 0 --top-n 1 --out results/queries/local_kv_4papers.json
"""
import argparse, json, sys, tempfile, time
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
ap.add_argument('--corpus', default='../shared/corpus/papers')
ap.add_argument('--previous', default='/tmp/old_llm.py', help='the previous docbench_nb/llm.py (from git show)')
ap.add_argument('--evidence-papers', type=int, default=2)
ap.add_argument('--types', default='text,table')
ap.add_argument('--per-paper', type=int, default=1)
ap.add_argument('--bm25-k', type=int, default=1, help='BM25 filter k (0: off, so the later stages get queries)')
ap.add_argument('--top-n', type=int, default=2, help='other papers the false-negative judge reads per query')
ap.add_argument('--threads', type=int, default=1)
ap.add_argument('--cache-dir', default=None, help='parse cache shared by both builds (default: a temporary folder)')
ap.add_argument('--out', default=None)
a = ap.parse_args()

import docbench_nb, torch
from docbench_nb.llm import LocalLLM
from docbench_nb.queries.build import build_queries

src = Path(a.previous).read_text()
old = type(sys)('docbench_nb._previous_llm'); old.__package__, old.__file__ = 'docbench_nb', a.previous
sys.modules[old.__name__] = old                   # dataclasses look their module up; the registry gets its own name
exec(compile(src.replace("Registry('llm',", "Registry('llm-previous',"), a.previous, 'exec'), old.__dict__)

new_llm = LocalLLM(threads=a.threads)
model, tok = new_llm.load()
old_llm = old.LocalLLM(threads=a.threads); old_llm._loaded = (model, tok)       # one model object for both
assert old_llm.fingerprint == new_llm.fingerprint
work = {'forwards': 0, 'tokens': 0}
def hook(m, args, kwargs):
    x = kwargs.get('input_ids', args[0] if args else None)
    work['forwards'] += 1; work['tokens'] += int(x.shape[1])
model.register_forward_pre_hook(hook, with_kwargs=True)

def strip(path):
    "Stage records without their timings."
    rows = [json.loads(l) for l in Path(path).read_text().splitlines() if l.strip()]
    for r in rows: r.pop('seconds', None)
    return rows

with tempfile.TemporaryDirectory() as tmp:
    cache = a.cache_dir or str(Path(tmp) / 'cache')
    kw = dict(types=tuple(a.types.split(',')), per_paper=a.per_paper, evidence_papers=a.evidence_papers, bm25_k=a.bm25_k,
              top_n=a.top_n, on_rephrase_fail='keep', cache_dir=cache)
    build_queries(a.corpus, new_llm, Path(tmp) / 'dry', dry_run=True, **kw)            # parse the papers once, not timed
    runs = {}
    for name, llm in (('previous', old_llm), ('current', new_llm)):
        llm.cache_dir = Path(tmp) / f'llm-{name}'                                       # replies cached apart: every call is made
        work.update(forwards=0, tokens=0); t = time.perf_counter()
        res = build_queries(a.corpus, llm, Path(tmp) / name, **kw)
        wall = time.perf_counter() - t
        runs[name] = {'wall_s': round(wall, 1), **work, 'requests': llm.stats['requests'], 'n_evidence': res['n_evidence'],
                      'n_queries': res['n_queries'], 'stage_s': {k: round(v, 1) for k, v in res['timings'].items()},
                      'queries': Path(res['files']['queries']).read_text(), 'records': strip(res['files']['stages'])}
p, c = runs['previous'], runs['current']
row = {'corpus': a.corpus, 'evidence_papers': a.evidence_papers, 'types': a.types, 'bm25_k': a.bm25_k, 'top_n': a.top_n, 'threads': a.threads,
       'same_queries': p.pop('queries') == c.pop('queries'), 'same_records': p.pop('records') == c.pop('records'),
       'previous': p, 'current': c, 'speedup_wall': round(p['wall_s'] / c['wall_s'], 2),
       'tokens_encoded_ratio': round(p['tokens'] / max(1, c['tokens']), 2), 'kv': new_llm.prefix.stats if new_llm.prefix else None}
print(json.dumps(row), flush=True)
if a.out: Path(a.out).parent.mkdir(parents=True, exist_ok=True); Path(a.out).write_text(json.dumps(row, indent=1) + '\n')
