"""The retrieval-spine table (issue 3): retriever x representation x chunk size on a corpus + query file.

    python bench/grid.py --corpus ../shared/corpus/papers --queries ../shared/queries/dev.jsonl --out results/grid

Writes one result JSON (+ TREC run) per configuration into --out and prints, per configuration, nDCG@10 and
Recall@1/5/10 at levels 0-3 and per evidence type, with index_bytes. Also evaluates the naive anchor: the raw
flattened source with every LaTeX command crudely deleted, cut into 300-word chunks, under the same retrievers.
Cached: parsed papers and embeddings are reused across configurations and runs.
"""
import argparse, json, re, time, sys
from pathlib import Path
from docbench_nb.evaluate import evaluate, load_papers, save_result
from docbench_nb.records import Unit
from docbench_nb.represent import register_representation
from docbench_nb import latex

_CMD = re.compile(r'\\[a-zA-Z@]+\*?(\[[^\]]*\])?')
def naive_units(paper, tokenizer=None, chunk_size=300, overlap=0, **kw):
    "Anchor: raw flattened body, commands crudely deleted (braces kept as text), 300-word chunks."
    root, main = paper.root, paper.main_file
    raw = latex.flatten_latex(root, main).text
    body = raw.split('\\begin{document}', 1)[-1]
    words = _CMD.sub(' ', body).replace('{', ' ').replace('}', ' ').split()
    return [Unit(paper.id, f'{paper.id}#n{i}', 'text', ' '.join(words[i:i + 300])) for i in range(0, len(words), 300)]
register_representation('naive', naive_units)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--corpus', required=True); ap.add_argument('--queries', required=True)
    ap.add_argument('--out', default='results/grid'); ap.add_argument('--cache-dir', default=None)
    ap.add_argument('--retrievers', default='bm25,dense,hybrid')
    ap.add_argument('--representations', default='text,text+captions')
    ap.add_argument('--chunks', default='256,512,1024')
    a = ap.parse_args()
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    t0 = time.time(); papers, errors = load_papers(a.corpus, cache_dir=a.cache_dir)
    print(f'{len(papers)} papers parsed, {len(errors)} errors, {time.time()-t0:.1f}s', flush=True)
    configs = [(r, rep, int(c)) for r in a.retrievers.split(',') for rep in a.representations.split(',')
               for c in a.chunks.split(',')] + [(r, 'naive', 300) for r in a.retrievers.split(',')]
    rows = []
    for r, rep, c in configs:
        t = time.time()
        res = evaluate(a.corpus, a.queries, representation=rep, retriever=r, chunk_size=c, papers=papers,
                       cache_dir=a.cache_dir, progress=False)
        save_result(res, out / f'{r.replace(":", "_")}__{rep}__{c}.json')
        rows.append(res)
        lv = res['by_level']; ty = res['by_evidence_type']
        print(f"{r:<7}{rep:<14}{c:>5}  nDCG@10 L0-3: " + ' '.join(f"{lv[l]['ndcg@10']:.3f}" for l in '0123') +
              "  R@1/5/10 L0: " + '/'.join(f"{res['overall'][m]:.3f}" for m in ('recall@1', 'recall@5', 'recall@10')) +
              "  type nDCG@10 " + ' '.join(f"{k}={v['ndcg@10']:.3f}" for k, v in sorted(ty.items())) +
              f"  units={res['n_units']} index={res['index_bytes']/1e6:.2f}MB  {time.time()-t:.0f}s", flush=True)
    (out / 'summary.json').write_text(json.dumps([{k: v for k, v in r.items() if k not in ('run', 'per_query')} for r in rows], indent=1))

if __name__ == '__main__': main()
