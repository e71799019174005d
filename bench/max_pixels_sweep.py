"""max_pixels sweep for the image representations (issue 4: the study's 600K / 1M / 2M settings, Table 7 analogue).

    python bench/max_pixels_sweep.py --corpus ../shared/corpus/papers --queries ../shared/queries/dev.jsonl \
        --representations figures,pages --out results/max_pixels [--papers 30] [--procs 2]

For each image representation and pixel budget: render/convert (cached), OCR every image with Tesseract (cached by
image content; warmed with `--procs` worker processes), evaluate the OCR route with BM25 and dense MiniLM through
`docbench grid` (one result JSON + TREC run per row under `OUT/all` or `OUT/subN`, reused on rerun), and record
nDCG@10 (overall and per evidence type), the measured index size of the OCR route (text vectors: independent of
the pixel budget), and the *projected* size of a ColQwen-style multi-vector index of the same images (visual tokens
counted with transformers' Qwen2-VL `smart_resize`, 128-d float16 per token) — what the budget costs an image
model, computed from the real rasterized images, not a run of such a model (no weights offline).

`--papers N` evaluates on a deterministic subset (every other query-target paper plus distractors, N in all) with
the queries whose target is in it — for the expensive `pages` sweep. The filtered query file is written to a temp
folder, never into the repository (the queries are third-party text).
"""
import argparse, json, os, tempfile, time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from tqdm.auto import tqdm
from docbench_nb.latex.corpus import load_papers
from docbench_nb.evaluation.grid import grid
from docbench_nb.latex.sources import iter_sources, paper_id_from_path
from docbench_nb.retrieval.represent import represent
from docbench_nb.retrieval.ocr import ocr_record
from docbench_nb.retrieval.image_encoders import multivector_index_bytes
import docbench_nb.retrieval.visual_units  # registers figures/pages/interleaved

def _ocr_one(args):
    path, cache_dir = args
    try: r = ocr_record(path, 'tesseract', cache_dir=cache_dir); return r['seconds'], r['cached']
    except Exception as e: return None, str(e)

def subset(papers, queries_path, n):
    "A deterministic subset of `n` papers: every other query target (sorted ids), then non-targets, evenly spaced."
    qs = [json.loads(l) for l in open(queries_path, encoding='utf-8') if l.strip()]
    targets = sorted({q['doc_id'] for q in qs} & {p.id for p in papers})
    chosen = targets[::2]
    others = sorted({p.id for p in papers} - set(targets))
    need = max(0, n - len(chosen))
    step = max(1, len(others) // max(1, need)) if need else 1
    chosen += others[::step][:need]
    keep = set(chosen)
    tmp = Path(tempfile.mkdtemp(prefix='docbench-sweep-')) / 'queries.jsonl'
    tmp.write_text(''.join(json.dumps(q) + '\n' for q in qs if q['doc_id'] in keep), encoding='utf-8')
    return [p for p in papers if p.id in keep], tmp

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--corpus', required=True); ap.add_argument('--queries', required=True)
    ap.add_argument('--out', default='results/max_pixels'); ap.add_argument('--cache-dir', default=None)
    ap.add_argument('--representations', default='figures,pages')
    ap.add_argument('--pixels', default='600000,1000000,2000000')
    ap.add_argument('--retrievers', default='ocr:tesseract+bm25,ocr:tesseract+dense')
    ap.add_argument('--papers', type=int, default=0, help='evaluate on a subset of this many papers (0: all)')
    ap.add_argument('--procs', type=int, default=2, help='OCR worker processes for warming the cache')
    a = ap.parse_args()
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    papers, errors = load_papers(a.corpus, cache_dir=a.cache_dir, progress=False)
    corpus, queries = a.corpus, a.queries
    if a.papers:       # a subset corpus: links to the chosen papers' sources in a temp folder
        papers, queries = subset(papers, a.queries, a.papers)
        corpus = Path(tempfile.mkdtemp(prefix='docbench-sweep-corpus-'))
        keep = {p.id for p in papers}
        for src in iter_sources(a.corpus):
            if paper_id_from_path(src) in keep: os.symlink(Path(src).resolve(), corpus / Path(src).name)
    sub = out / (f'sub{len(papers)}' if a.papers else 'all')
    # warm the OCR cache with a process pool (the grid then reads every image's text from the cache)
    extra = {}
    for rep in a.representations.split(','):
        for mp in map(int, a.pixels.split(',')):
            units = represent(papers, rep, max_pixels=mp, cache_dir=a.cache_dir, progress=True).units
            imgs = sorted({im for u in units for im in u.images})
            secs = []
            with ProcessPoolExecutor(a.procs) as ex:
                for s, c in tqdm(ex.map(_ocr_one, [(p, a.cache_dir) for p in imgs], chunksize=4), total=len(imgs), desc=f'OCR {rep}@{mp}'):
                    if s is not None and c is False: secs.append(s)
            from PIL import Image
            px = [Image.open(p).size for p in imgs]
            proj = multivector_index_bytes(units, max_pixels=mp)
            extra[(rep, mp)] = dict(n_images=len(imgs), mean_image_pixels=round(sum(w * h for w, h in px) / max(1, len(px))),
                                    ocr_seconds_per_image=round(sum(secs) / len(secs), 3) if secs else None,
                                    projected_multivector_mb=proj['bytes'] / 1e6, visual_tokens=proj['tokens'])
    t = grid(corpus, queries, sub, representations=a.representations, retrievers=a.retrievers, max_pixels=a.pixels,
             cache_dir=a.cache_dir, progress=False)
    rows_f = out / 'table.json'
    old = [r for r in (json.loads(rows_f.read_text()) if rows_f.exists() else []) if r.get('n_docs') != len(papers)]
    rows = old + [dict(representation=r['representation'], max_pixels=r['max_pixels'], retriever=r['retriever'],
                       n_docs=r['n_docs'], n_queries=r['n_queries'], n_units=r['n_units'], index_mb=r['index_bytes'] / 1e6,
                       ndcg10=r['ndcg@10'], recall10=r['recall@10'],
                       **{f'ndcg10_{k}': v for k, v in r['by_evidence_type'].items()}, render_paths=r.get('render_paths'),
                       seconds=r.get('seconds'), **extra[(r['representation'], r['max_pixels'])])
                  for r in t['rows'] if 'ndcg@10' in r]
    rows_f.write_text(json.dumps(rows, indent=1))
    for r in rows: print(json.dumps(r), flush=True)
    plot(rows, out)

def plot(rows, out):
    import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt
    leg_f = out / 'legibility.json'
    fig, axes = plt.subplots(1, 3 if leg_f.exists() else 2, figsize=(16 if leg_f.exists() else 11, 4.2))
    a1, a2 = axes[0], axes[1]
    if leg_f.exists():    # OCR word recall against the PDF text layer (bench/ocr_legibility.py)
        summ = json.loads(leg_f.read_text())['summary']
        for path in ('all', 'compiled', 'repaired', 'fallback'):
            pts = sorted((int(k.split('|')[0]), v) for k, v in summ.items() if k.endswith('|' + path))
            if pts: axes[2].plot([m / 1e6 for m, _ in pts], [v['recall_mean'] for _, v in pts], marker='o',
                                 label=f"{path} ({pts[0][1]['pages']} pages)")
        axes[2].set_xlabel('max_pixels (millions)'); axes[2].set_ylabel('OCR word recall vs pdftotext (mean per page)')
        axes[2].set_title('Legibility of rendered pages (Tesseract)'); axes[2].legend(fontsize=7)
    for (rep, ret, n) in sorted({(r['representation'], r['retriever'], r['n_docs']) for r in rows}):
        rs = sorted((r for r in rows if (r['representation'], r['retriever'], r['n_docs']) == (rep, ret, n)), key=lambda r: r['max_pixels'])
        a1.plot([r['max_pixels'] / 1e6 for r in rs], [r['ndcg10'] for r in rs], marker='o', label=f'{rep} | {ret} | {n} docs')
        if ret.endswith('dense'):
            a2.plot([r['projected_multivector_mb'] for r in rs], [r['ndcg10'] for r in rs], marker='s', ls='--',
                    label=f'{rep} ({n} docs): projected ColQwen-style index')
            a2.plot([r['index_mb'] for r in rs], [r['ndcg10'] for r in rs], marker='o', label=f'{rep} ({n} docs): OCR+MiniLM (measured)')
            for r in rs: a2.annotate(f"{r['max_pixels'] / 1e6:g}M", (r['projected_multivector_mb'], r['ndcg10']), fontsize=7)
    a1.set_xlabel('max_pixels (millions)'); a1.set_ylabel('nDCG@10 (level 0), OCR route'); a1.legend(fontsize=7)
    a1.set_title('Pixel budget vs retrieval quality')
    a2.set_xscale('log'); a2.set_xlabel('index size (MB)'); a2.set_ylabel('nDCG@10 (OCR route)'); a2.legend(fontsize=7)
    a2.set_title('Index size at each budget')
    fig.tight_layout(); fig.savefig(out / 'max_pixels_sweep.png', dpi=120)

if __name__ == '__main__': main()
