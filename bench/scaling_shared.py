"""Context-length scaling (the representation study) on a real corpus (default: the shared corpus of real LaTeX papers).

    python bench/scaling_shared.py [--corpus ../shared/corpus/papers] [--out results/scaling] \
        [--lengths 500,1000,4000,8000] [--max-pixels 1000000] [--ocr tesseract] [--limit N]

Every paper with at least max(lengths) tokens (MiniLM tokenizer) is one document; its fixed 100-token query span
lies in its 500-token window. Routes: text-dense (256-token chunks, MiniLM), text-bm25 (same chunks),
image-ocr-dense and image-ocr-bm25 (window -> one page PNG -> OCR -> same chunking), plus text-dense-full (one
unit per window: MiniLM sees only its first 256 tokens). `--routes` takes any route of
`docbench_nb.evaluation.scaling.parse_route`, e.g. image-ocr2x-bm25 (page upscaled 2x before OCR). Writes into --out: scaling.csv (one row per route x
length), windows.jsonl (the windows and queries), scaling.png (nDCG@10 vs length), render_example.png (one
window on a page at the shortest and the longest length), summary.json. Renders, OCR text and embeddings are
cached ($DOCBENCH_CACHE or ~/.cache/docbench): the first run renders and OCRs 4 pages per paper (about 15-30
minutes on 2 busy cores), later runs take a minute.
"""
import argparse, json, time, warnings
from pathlib import Path
import matplotlib
matplotlib.use('Agg')
import pandas as pd
from docbench_nb.latex.corpus import load_papers
from docbench_nb.evaluation.scaling import scaling_experiment, plot_scaling, plot_render_example, DEFAULT_ROUTES

pd.set_option('display.width', 220); pd.set_option('display.max_columns', 30)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--corpus', default=str(Path(__file__).resolve().parents[2] / 'shared' / 'corpus' / 'papers'))
    ap.add_argument('--out', default=str(Path(__file__).resolve().parents[1] / 'results' / 'scaling'))
    ap.add_argument('--cache-dir', default=None)
    ap.add_argument('--lengths', default='500,1000,4000,8000')
    ap.add_argument('--routes', default=','.join(DEFAULT_ROUTES + ('text-dense-full',)))
    ap.add_argument('--max-pixels', type=int, default=1_000_000)
    ap.add_argument('--ocr', default='tesseract', choices=('tesseract', 'rapidocr'))
    ap.add_argument('--query-tokens', type=int, default=100)
    ap.add_argument('--chunk', type=int, default=256)
    ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--limit', type=int, default=None, help='use only the first N papers (by id) that are long enough')
    a = ap.parse_args()
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    lengths = [int(x) for x in a.lengths.split(',')]
    routes = [r for r in a.routes.split(',') if r]
    t0 = time.time()
    papers, errors = load_papers(a.corpus, cache_dir=a.cache_dir, progress=False)
    papers = sorted(papers, key=lambda p: p.id)
    print(f"{len(papers)} papers parsed ({len(errors)} errors) from {a.corpus}; {time.time() - t0:.0f}s", flush=True)
    if a.limit:
        from docbench_nb.retrieval.represent import default_tokenizer, token_offsets
        tok = default_tokenizer()
        papers = [p for p in papers if len(token_offsets(p.text, tok)) >= max(lengths)][:a.limit]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always')
        df = scaling_experiment(papers, lengths=lengths, routes=routes, max_pixels=a.max_pixels, ocr_engine=a.ocr,
                                cache_dir=a.cache_dir, progress=True, query_tokens=a.query_tokens, chunk_size=a.chunk,
                                seed=a.seed)
    for w in caught:
        if 'scaling:' in str(w.message): print('warning:', w.message)
    n_docs = int(df.n_docs.iloc[0])
    skipped = df.attrs['skipped']
    print(f"\n{n_docs} documents (papers with >= {max(lengths)} tokens); {len(skipped)} papers skipped as too short; "
          f"{sum(w['prose_ok'] for w in df.attrs['windows'])} base windows pass the prose threshold", flush=True)
    df.to_csv(out / 'scaling.csv', index=False)
    with open(out / 'windows.jsonl', 'w') as f:
        for w in df.attrs['windows']:
            f.write(json.dumps({k: (({str(L): v for L, v in w[k].items()}) if isinstance(w[k], dict) else w[k]) for k in w}) + '\n')
    cols = ['route', 'length', 'ndcg@10', 'recall@1', 'recall@10', 'mrr@10', 'query_words_found', 'font_pt', 'empty_docs',
            'unfit_pages', 'n_units']
    print(df[cols].round(3).to_string(index=False))
    print('\nnDCG@10 (rows: route, columns: context length in tokens)')
    print(df.pivot(index='route', columns='length', values='ndcg@10').reindex(routes).round(3).to_string())
    fig = plot_scaling(df, title=f'nDCG@10 vs context length ({n_docs} shared papers, {a.max_pixels:,}-pixel pages, {a.ocr})')
    fig.savefig(out / 'scaling.png', dpi=120)
    ex = next((w['paper_id'] for w in df.attrs['windows'] if w['prose_ok']), df.attrs['windows'][0]['paper_id'])
    fig = plot_render_example(df, paper_id=ex)
    fig.savefig(out / 'render_example.png', dpi=120)
    summary = dict(settings=df.attrs['settings'], timings=df.attrs['timings'], n_docs=n_docs, skipped=skipped,
                   corpus=a.corpus, parse_errors=len(errors), ndcg10=df.pivot(index='route', columns='length', values='ndcg@10')
                   .round(4).to_dict(orient='index'), wall_s=round(time.time() - t0, 1))
    (out / 'summary.json').write_text(json.dumps(summary, indent=1, default=str))
    print(f"\nwrote {out}/scaling.csv, windows.jsonl, scaling.png, render_example.png, summary.json; "
          f"timings {df.attrs['timings']}; wall {time.time() - t0:.0f}s", flush=True)


if __name__ == '__main__':
    main()
