"""The analyses of the representation study and REAL-MM-RAG on a real corpus (default: the 80-paper shared corpus and its dev queries).

    python bench/analyses_shared.py --corpus ../shared/corpus/papers --queries ../shared/queries/dev.jsonl \
        --out results/analyses [--pages render] [--chunk 512]

Prints and writes into --out:
  1. the figure-reference table (dense MiniLM, --chunk tokens; BM25 alongside) -> figrefs_*.csv, figrefs_*.png
  2. corpus statistics (pages from rendered PDFs with --pages render, else estimated as tokens/958)
     -> stats.csv, stats_summary.json, stats.png
  3. robustness over rephrasing levels for bm25 / dense / hybrid x text at --chunk tokens, with significance
     against BM25 and level-0-vs-3 tests -> grid/*.json, robustness.csv, significance.csv, robustness.png,
     ndcg_vs_index.png
Parsed papers and dense embeddings are cached ($DOCBENCH_CACHE or ~/.cache/docbench): the first dense run embeds
the whole corpus (about ten minutes on 2 busy cores), later runs take seconds.
"""
import argparse, json, time
from pathlib import Path
import matplotlib
matplotlib.use('Agg')
import matplotlib.pyplot as plt
import pandas as pd
from docbench_nb.latex.corpus import load_papers
from docbench_nb.evaluation.formats import load_queries
from docbench_nb.evaluation.figrefs import figure_reference_cases, summarize_figure_references, plot_figure_references, STUDY_FIGREF
from docbench_nb.evaluation.corpus_stats import corpus_stats, summarize_corpus, plot_corpus_stats
from docbench_nb.evaluation.robustness import robustness_table, plot_robustness, significance_table, level_significance
from docbench_nb.evaluation.result_tables import load_results, results_table, plot_ndcg_vs_index_size
from docbench_nb.evaluation.grid import grid

pd.set_option('display.width', 200); pd.set_option('display.max_columns', 40)


def section(title): print(f"\n{'=' * 8} {title} {'=' * (90 - len(title))}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--corpus', default=str(Path(__file__).resolve().parents[2] / 'shared' / 'corpus' / 'papers'))
    ap.add_argument('--queries', default=str(Path(__file__).resolve().parents[2] / 'shared' / 'queries' / 'dev.jsonl'))
    ap.add_argument('--out', default='results/analyses')
    ap.add_argument('--cache-dir', default=None)
    ap.add_argument('--chunk', type=int, default=512)
    ap.add_argument('--pages', choices=('estimate', 'render'), default='estimate')
    ap.add_argument('--render-pixels', type=int, default=1_000_000,
                    help='pixel budget of the renders counted for pages (the pages representation default: reuses its cache)')
    ap.add_argument('--skip', default='', help='comma list of parts to skip: figrefs,stats,robustness')
    a = ap.parse_args()
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    skip = set(filter(None, a.skip.split(',')))
    t0 = time.time()
    papers, errors = load_papers(a.corpus, cache_dir=a.cache_dir, progress=False)
    queries = load_queries(a.queries, known_doc_ids=[p.id for p in papers])
    print(f"{len(papers)} papers ({len(errors)} parse errors), {len(queries)} query variants, "
          f"{sum(q.level == 0 for q in queries)} questions; {time.time() - t0:.1f}s", flush=True)

    if 'figrefs' not in skip:
        section(f'figure references (chunk {a.chunk})')
        print('study, percent of cases:'); print(STUDY_FIGREF.to_string())
        for spec in ('dense', 'bm25'):
            t = time.time()
            cases = figure_reference_cases(papers, queries, spec, chunk_size=a.chunk, cache_dir=a.cache_dir)
            table = summarize_figure_references(cases)
            print(f"\n{table.attrs['retriever']}, {a.chunk}-token chunks, {table.attrs['n_units']} units ({time.time() - t:.0f}s):")
            print(table.round(1).to_string())
            skipped = cases[cases.skipped.notna()]
            if len(skipped): print('skipped:', '; '.join(f'{r.query_id}/{r.side}: {r.skipped}' for r in skipped.itertuples()))
            name = spec.replace(':', '_')
            cases.to_csv(out / f'figrefs_cases_{name}.csv', index=False); table.to_csv(out / f'figrefs_{name}.csv')
            ax = plot_figure_references(table); ax.figure.tight_layout(); ax.figure.savefig(out / f'figrefs_{name}.png', dpi=120)
            plt.close(ax.figure)

    if 'stats' not in skip:
        section(f'corpus statistics (pages: {a.pages})')
        t = time.time()
        rkw = {'max_pixels': a.render_pixels, **({'cache_dir': a.cache_dir} if a.cache_dir else {})}
        df = corpus_stats(papers, pages=a.pages, render_kw=rkw,
                          progress=False)
        s = summarize_corpus(df)
        print(f"({time.time() - t:.0f}s) {s['page_note']}; page sources: {df.page_source.value_counts().to_dict()}")
        print(pd.DataFrame({'total': s['total'], 'mean': s['mean'], 'median': s['median']}).T.to_string())
        print(f"tokens per page: {s['tokens_per_page']} (study: ~958), by page source: {s['tokens_per_page_by_source']}; "
              f"papers without figures: {s['papers_without_figures']}")
        print('pages per paper: ', s['pages_histogram'])
        print('tokens per paper:', s['tokens_histogram'])
        df.to_csv(out / 'stats.csv'); (out / 'stats_summary.json').write_text(json.dumps(s, indent=1))
        fig = plot_corpus_stats(df, title=f'{len(df)} papers of {a.corpus} (pages: {a.pages})'); fig.savefig(out / 'stats.png', dpi=120)
        plt.close(fig)

    if 'robustness' not in skip:
        section(f'robustness: bm25 / dense / hybrid x text, chunk {a.chunk}')
        t = time.time()
        grid(a.corpus, a.queries, out / 'grid', representations=('text',), retrievers=('bm25', 'dense', 'hybrid'),
             chunk_sizes=(a.chunk,), cache_dir=a.cache_dir, progress=False)
        results = load_results(out / 'grid')
        print(f'({time.time() - t:.0f}s)')
        rt = robustness_table(results)
        print(rt.round(3).to_string())
        print('\nnDCG@10 by evidence type:'); print(robustness_table(results, ('ndcg@10',), by_type=True).round(3).to_string())
        sig = significance_table(results, baseline=0)
        print(f"\nvs {sig.vs.iloc[0]}, nDCG@10 at level 0 (95% bootstrap CIs, paired randomization test):")
        print(sig.drop(columns=['vs']).round(3).to_string(index=False))
        lv = pd.DataFrame([level_significance(r) for r in results])
        print('\nlevel 0 vs level 3, same questions:'); print(lv.round(3).to_string(index=False))
        print('\nresults table:'); print(results_table(results).drop(columns=['index_bytes']).round(3).to_string())
        rt.to_csv(out / 'robustness.csv'); sig.to_csv(out / 'significance.csv', index=False)
        fig = plot_robustness(results, title=f'{Path(a.queries).name}: text, chunk {a.chunk}'); fig.savefig(out / 'robustness.png', dpi=120)
        plt.close(fig)
        ax = plot_ndcg_vs_index_size(results); ax.figure.tight_layout(); ax.figure.savefig(out / 'ndcg_vs_index.png', dpi=120)
        plt.close(ax.figure)
    print(f'\ndone in {time.time() - t0:.0f}s; outputs in {out}')


if __name__ == '__main__': main()
