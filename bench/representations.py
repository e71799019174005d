"""The representation table (issue 4, the offline analogue of the study's Table 4) and nDCG@10 vs index size (Table 7).

    python bench/representations.py --corpus ../shared/corpus/papers --queries ../shared/queries/dev.jsonl --out results/representations

Representations x offline retrievers: text / text+captions with BM25, dense MiniLM and late interaction (MiniLM token
states); figures / pages / interleaved through the OCR route (Tesseract text of each image, then BM25 or dense MiniLM).
Each configuration writes a result JSON (+ TREC run); the script prints nDCG@10 per evidence type with index_bytes and
saves `ndcg_vs_index_size.png`. Everything is cached (parse, figure conversion, page renders, OCR, embeddings), so a
rerun or an interrupted run redoes nothing already done.
"""
import argparse, json, re, time
from pathlib import Path
from docbench_nb.evaluate import evaluate, load_papers, save_result

DEFAULT = [  # (representation, retriever, chunk_size, max_pixels) — cheapest first, so an interrupted run keeps the most
    ('text', 'bm25', 512, None), ('text', 'dense', 128, None), ('text', 'dense', 256, None), ('text', 'dense', 512, None),
    ('text', 'dense', 1024, None),
    ('text+captions', 'bm25', 512, None), ('text+captions', 'dense', 256, None),
    ('figures', 'ocr:tesseract+bm25', 512, 1_000_000), ('figures', 'ocr:tesseract+dense', 512, 1_000_000),
    ('interleaved', 'ocr:tesseract+bm25', 512, 1_000_000), ('interleaved', 'ocr:tesseract+dense', 256, 1_000_000),
    ('pages', 'ocr:tesseract+bm25', 512, 1_000_000), ('pages', 'ocr:tesseract+dense', 512, 1_000_000),
    ('pages', 'ocr:tesseract?chunk=256+dense', 512, 1_000_000),      # OCR text split to the encoder's window
    ('text', 'late', 256, None), ('text', 'late?dtype=float16', 256, None), ('text', 'late?dtype=float16&pool=2', 256, None),
]

def row_of(res, rep, ret, cs, mp, seconds):
    ty = res['by_evidence_type']
    return dict(representation=rep, retriever=ret, chunk=cs, max_pixels=mp, n_units=res['n_units'],
                index_mb=res['index_bytes'] / 1e6, ndcg10=res['overall']['ndcg@10'],
                **{f'ndcg10_{k}': v['ndcg@10'] for k, v in ty.items()},
                describer=res['config'].get('describer'), warnings=len(res['warnings']),
                render_paths=res.get('render_paths'), seconds=seconds)

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--corpus', required=True); ap.add_argument('--queries', required=True)
    ap.add_argument('--out', default='results/representations'); ap.add_argument('--cache-dir', default=None)
    ap.add_argument('--only', default=None, help='comma-separated representation names to run')
    ap.add_argument('--redo', default='', help="comma-separated representation names to recompute even when their "
                    "result JSON exists (others are read back from --out); 'all' recomputes everything")
    ap.add_argument('--sweep', default='results/max_pixels/table.json', help='max_pixels sweep table to add to the plot')
    a = ap.parse_args()
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    papers = None
    rows = []
    for rep, ret, cs, mp in DEFAULT:
        if a.only and rep not in a.only.split(','): continue
        name = f"{rep}__{re.sub(r'[^A-Za-z0-9.]+', '_', ret)}__{cs}" + (f'__{mp}' if mp else '')
        f = out / f'{name}.json'
        if f.exists() and a.redo != 'all' and rep not in a.redo.split(','):
            res = json.loads(f.read_text()); rows.append(row_of(res, rep, ret, cs, mp, None))
            print('reused', json.dumps(rows[-1]), flush=True); continue
        if papers is None:
            papers, errors = load_papers(a.corpus, cache_dir=a.cache_dir, progress=False)
            print(f'{len(papers)} papers, {len(errors)} parse errors', flush=True)
        t = time.time()
        kw = {'max_pixels': mp} if mp else {}
        try:
            res = evaluate(a.corpus, a.queries, representation=rep, retriever=ret, chunk_size=cs, papers=papers,
                           cache_dir=a.cache_dir, progress=True, **kw)
        except Exception as e:  # one failing configuration must not lose the others
            print(f'{rep} {ret}: FAILED {type(e).__name__}: {e}', flush=True); continue
        save_result(res, f)
        rows.append(row_of(res, rep, ret, cs, mp, round(time.time() - t)))
        print(json.dumps(rows[-1]), flush=True)
    (out / 'table.json').write_text(json.dumps(rows, indent=1))
    (out / 'table.md').write_text(markdown(rows))
    print(markdown(rows))
    plot(rows, out, Path(a.sweep))

def markdown(rows) -> str:
    "The table as Markdown (nDCG@10 at level 0 overall and per evidence type, index size, describer/render notes)."
    head = '| representation | retriever | chunk | max_pixels | units | index | nDCG@10 | text | table | figure | notes |\n|' + '---|' * 11
    lines = [head]
    for r in rows:
        note = r.get('describer') or (', '.join(f'{k} {v}' for k, v in r['render_paths'].items()) if r.get('render_paths') else '')
        lines.append(f"| {r['representation']} | {r['retriever']} | {r['chunk']} | {r['max_pixels'] or ''} | {r['n_units']} | "
                     f"{r['index_mb']:.2f} MB | {r['ndcg10']:.3f} | {r.get('ndcg10_text', float('nan')):.3f} | "
                     f"{r.get('ndcg10_table', float('nan')):.3f} | {r.get('ndcg10_figure', float('nan')):.3f} | {note} |")
    return '\n'.join(lines) + '\n'

def plot(rows, out, sweep_file):
    "nDCG@10 vs index size: chunk sizes (text), pixel budgets (figures/pages, full-corpus sweep rows) and storage settings (late) of each route."
    import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt
    sweep = [r for r in (json.loads(sweep_file.read_text()) if sweep_file.exists() else []) if r['n_docs'] == 80]
    groups = {}
    def label(r):
        if r['retriever'].startswith('late'):
            return {'late': 'fp32', 'late?dtype=float16': 'fp16'}.get(r['retriever'], 'fp16+pool2')
        return f"{r['chunk']} tok" if not r['max_pixels'] else f"{r['max_pixels'] / 1e6:g}M px"
    for r in rows:
        ret = 'late' if r['retriever'].startswith('late') else r['retriever']
        groups.setdefault((r['representation'], ret), []).append((r['index_mb'], r['ndcg10'], label(r)))
    for r in sweep:
        g = groups.setdefault((r['representation'], r['retriever']), [])
        if not any(x[2] == label(r) for x in g): g.append((r['index_mb'], r['ndcg10'], label(r)))
    fig, axes = plt.subplots(1, 2, figsize=(13, 5), gridspec_kw={'width_ratios': [1, 1.3]})
    cmap, markers = plt.get_cmap('tab20'), 'osD^vP*Xhp<>'
    for i, ((rep, ret), pts) in enumerate(sorted(groups.items())):
        pts.sort()
        for ax in axes:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker=markers[i % len(markers)], color=cmap(i % 20),
                    label=f'{rep} | {ret}' if ax is axes[0] else None)
        for x, y, lab in pts:
            if y > 0.9: axes[1].annotate(lab, (x, y), fontsize=6, xytext=(3, 3), textcoords='offset points')
            else: axes[0].annotate(lab, (x, y), fontsize=6, xytext=(3, 3), textcoords='offset points')
    for ax in axes: ax.set_xscale('log'); ax.set_xlabel('index size (MB, every stored vector; BM25: sparse matrix)')
    axes[0].set_ylabel('nDCG@10 (level 0)'); axes[0].set_title('all routes'); axes[0].legend(fontsize=6, loc='center right')
    axes[1].set_ylim(0.92, 0.99); axes[1].set_title('zoom: text, text+captions, interleaved, pages, late')
    fig.suptitle('nDCG@10 vs index size across chunk sizes, pixel budgets and storage (offline encoders, 80 papers, dev queries)', fontsize=10)
    fig.tight_layout(); fig.savefig(out / 'ndcg_vs_index_size.png', dpi=130)

if __name__ == '__main__': main()
