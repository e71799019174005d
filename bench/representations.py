"""The representation table (issue 4, the offline analogue of the study's Table 4) and nDCG@10 vs index size (Table 7).

    python bench/representations.py --corpus ../shared/corpus/papers --queries ../shared/queries/dev.jsonl --out results/representations

Representations x offline retrievers: text / text+captions with BM25, dense MiniLM and late interaction (MiniLM token
states); figures / pages / interleaved through the OCR route (Tesseract text of each image, then BM25 or dense MiniLM).
Each configuration writes a result JSON (+ TREC run); the script prints nDCG@10 per evidence type with index_bytes and
saves `ndcg_vs_index_size.png`. Everything is cached (parse, figure conversion, page renders, OCR, embeddings), so a
rerun or an interrupted run redoes nothing already done.
"""
import argparse, json, time
from pathlib import Path
from docbench_nb.evaluate import evaluate, load_papers, save_result

DEFAULT = [  # (representation, retriever, chunk_size, max_pixels) — cheapest first, so an interrupted run keeps the most
    ('text', 'bm25', 512, None), ('text', 'dense', 256, None), ('text', 'dense', 512, None), ('text', 'dense', 1024, None),
    ('text+captions', 'dense', 256, None),
    ('figures', 'ocr:tesseract+bm25', 512, 1_000_000), ('figures', 'ocr:tesseract+dense', 512, 1_000_000),
    ('interleaved', 'ocr:tesseract+dense', 256, 1_000_000),
    ('pages', 'ocr:tesseract+bm25', 512, 1_000_000), ('pages', 'ocr:tesseract+dense', 512, 1_000_000),
    ('text', 'late', 256, None),
]

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--corpus', required=True); ap.add_argument('--queries', required=True)
    ap.add_argument('--out', default='results/representations'); ap.add_argument('--cache-dir', default=None)
    ap.add_argument('--only', default=None, help='comma-separated representation names to run')
    a = ap.parse_args()
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    papers, errors = load_papers(a.corpus, cache_dir=a.cache_dir, progress=False)
    print(f'{len(papers)} papers, {len(errors)} parse errors', flush=True)
    rows = []
    for rep, ret, cs, mp in DEFAULT:
        if a.only and rep not in a.only.split(','): continue
        t = time.time()
        kw = {'max_pixels': mp} if mp else {}
        try:
            res = evaluate(a.corpus, a.queries, representation=rep, retriever=ret, chunk_size=cs, papers=papers,
                           cache_dir=a.cache_dir, progress=True, **kw)
        except Exception as e:  # one failing configuration must not lose the others
            print(f'{rep} {ret}: FAILED {type(e).__name__}: {e}', flush=True); continue
        name = f"{rep}__{ret.replace(':', '_').replace('+', '_')}__{cs}" + (f'__{mp}' if mp else '')
        save_result(res, out / f'{name}.json')
        ty = res['by_evidence_type']
        row = dict(representation=rep, retriever=ret, chunk=cs, max_pixels=mp, n_units=res['n_units'],
                   index_mb=res['index_bytes'] / 1e6, ndcg10=res['overall']['ndcg@10'],
                   **{f'ndcg10_{k}': v['ndcg@10'] for k, v in ty.items()},
                   warnings=len(res['warnings']), render_paths=res.get('render_paths'), seconds=round(time.time() - t))
        rows.append(row)
        print(json.dumps(row), flush=True)
    (out / 'table.json').write_text(json.dumps(rows, indent=1))
    try:
        import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for r in rows:
            ax.scatter(r['index_mb'], r['ndcg10'])
            ax.annotate(f"{r['representation']}|{r['retriever']}|{r['chunk']}", (r['index_mb'], r['ndcg10']), fontsize=7)
        ax.set_xscale('log'); ax.set_xlabel('index size (MB, all stored vectors)'); ax.set_ylabel('nDCG@10 (level 0)')
        ax.set_title('nDCG@10 vs index size (offline encoders)'); fig.tight_layout(); fig.savefig(out / 'ndcg_vs_index_size.png', dpi=120)
    except Exception as e: print('plot failed:', e)

if __name__ == '__main__': main()
