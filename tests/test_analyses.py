"Analyses on real papers: figure references (figrefs), corpus statistics (stats), rephrasing robustness, result tables."
import json, math
from pathlib import Path
import numpy as np
import pytest

from docbench_nb.records import Paper, Figure, Query
from docbench_nb.demo import demo_corpus_dir, demo_queries_path
from docbench_nb.evaluation.core import evaluate
from docbench_nb.latex.corpus import load_papers
from docbench_nb.evaluation.formats import load_queries
from docbench_nb.retrieval.represent import represent, default_tokenizer, token_offsets
from docbench_nb.retrieval.registry import make_retriever
from docbench_nb.evaluation.metrics import robustness_at_k
from docbench_nb.evaluation.figrefs import (figure_reference_cases, figure_reference_table, summarize_figure_references,
                                 references_figure, informative_words, gold_figure, unit_scores)
from docbench_nb.evaluation.corpus_stats import corpus_stats, summarize_corpus, page_histogram, token_histogram, estimate_pages
from docbench_nb.evaluation.robustness import robustness_table, significance_table, robustness_from_per_query, level_significance
from docbench_nb.evaluation.result_tables import load_results, results_table, plot_ndcg_vs_index_size
from docbench_nb.evaluation.grid import grid


@pytest.fixture(scope='module')
def demo(tmp_path_factory):
    cache = tmp_path_factory.mktemp('cache')
    papers, errors = load_papers(demo_corpus_dir(), cache_dir=cache, progress=False)
    assert not errors
    return papers, load_queries(demo_queries_path(), known_doc_ids=[p.id for p in papers])


def _fig_queries(queries): return [q for q in queries if q.evidence_type == 'figure' and q.level == 0]


# ---------------------------------------------------------------- figure references
def test_figure_table_counts_cover_every_figure_query(demo):
    papers, queries = demo
    cases = figure_reference_cases(papers, queries, 'bm25', chunk_size=128)
    t = summarize_figure_references(cases)
    n = len(_fig_queries(queries))
    assert n == 19
    assert (t['n_correct'] == n).all()                      # every demo figure query has a labelled gold figure
    assert (cases.side == 'correct').sum() == n == (cases.side == 'incorrect').sum()
    assert all(sorted(g) == ['correct', 'incorrect'] for _, g in cases.groupby('query_id').side)
    assert ((t['correct'] >= 0) & (t['correct'] <= t['n_correct'])).all()
    assert ((t['incorrect'] >= 0) & (t['incorrect'] <= t['n_incorrect'])).all()
    assert np.allclose(t['correct_pct'], 100 * t['correct'] / t['n_correct'])
    # the correct paper's best chunk is near its figure and restates its caption more often than the runner-up's
    assert t.loc['near', 'correct'] > t.loc['near', 'incorrect']
    assert t.loc['caption_info', 'correct'] > t.loc['caption_info', 'incorrect']


def test_figure_cases_recomputed_independently(demo):
    "Gold figure, chunk position, distance and references re-derived from the records for every correct case."
    papers, queries = demo
    by_id = {p.id: p for p in papers}
    cases = figure_reference_cases(papers, queries, 'bm25', chunk_size=128)
    units = represent(papers, 'text', default_tokenizer(), 128)
    qmeta = {q.id: q for q in _fig_queries(queries)}
    for r in cases[cases.side == 'correct'].itertuples():
        p, q = by_id[r.doc_id], qmeta[r.query_id]
        fig = next(f for f in p.figures if f.label == q.meta['evidence_locator'])
        assert r.figure == fig.label
        mine = [u for u in units if u.doc_id == p.id]
        assert mine[r.chunk].unit_id == r.unit_id
        fchunks = [i for i, u in enumerate(mine) if u.span[0] < fig.span[1] and fig.span[0] < u.span[1]]
        assert fchunks and r.distance == min(abs(r.chunk - j) for j in fchunks)
        assert r.near == (r.distance <= 2)
        assert r.references == references_figure(p, mine[r.chunk].span)
        shared = informative_words(mine[r.chunk].text) & informative_words(fig.caption)
        assert r.n_shared == len(shared)


def test_incorrect_top_chunk_is_the_runs_provenance(demo):
    papers, queries = demo
    cases = figure_reference_cases(papers, queries, 'bm25', chunk_size=128)
    ret = make_retriever('bm25'); ret.index(represent(papers, 'text', default_tokenizer(), 128), progress=False)
    run = ret.search(_fig_queries(queries), k=len(papers))
    inc = cases[(cases.side == 'incorrect') & cases.skipped.isna()]
    assert len(inc) == 19
    for r in inc.itertuples():
        assert run.provenance[r.query_id][r.doc_id] == r.unit_id
        assert r.doc_id not in qgold(queries, r.query_id)


def qgold(queries, qid): return next(q.doc_ids for q in queries if q.id == qid)


def test_figure_reference_on_a_constructed_paper():
    "A query that restates a caption: the gold chunk is the figure's own chunk; a paper without figures is skipped."
    filler = ' '.join(f'word{i} alpha beta gamma.' for i in range(200))
    text = (filler + ' As Fig. shows, glaciers retreat quickly. \\begin{figure}\\caption{Glacier terminus retreat '
            'measured by drone photogrammetry across seven Alpine valleys}\\end{figure} ' + filler)
    a, b = text.index('\\begin{figure}'), text.index('\\end{figure}') + len('\\end{figure}')
    p = Paper('g', text=text, figures=[Figure('fig:g', 'Glacier terminus retreat measured by drone photogrammetry '
                                              'across seven Alpine valleys', span=(a, b))])
    other = Paper('o', text='Deep sea vents host chemosynthetic microbial mats. ' * 60)
    q = Query('q1', 'drone photogrammetry of glacier terminus retreat in Alpine valleys', ['g'], 'figure',
              meta={'evidence_locator': 'fig:g'})
    cases = figure_reference_cases([p, other], [q], 'bm25', chunk_size=64)
    c = cases[cases.side == 'correct'].iloc[0]
    assert c.distance == 0 and c.near and c.caption_info and c.references
    inc = cases[cases.side == 'incorrect'].iloc[0]
    assert inc.skipped and 'no incorrect paper with figures' in inc.skipped
    t = summarize_figure_references(cases)
    assert t.loc['near', 'n_correct'] == 1 and t.loc['near', 'n_incorrect'] == 0
    assert gold_figure(p, Query('x', 'y', ['g'], meta={'evidence_excerpt': 'drone photogrammetry'})) == (0, 'excerpt')


@pytest.mark.slow
def test_figure_reference_dense_on_demo(demo):
    "Dense unit scores reproduce the dense run's max-over-units provenance."
    papers, queries = demo
    cases = figure_reference_cases(papers, queries, 'dense', chunk_size=256)
    ret = make_retriever('dense'); ret.index(represent(papers, 'text', ret.encoder.tokenizer, 256), progress=False)
    run = ret.search(_fig_queries(queries), k=len(papers))
    for r in cases[(cases.side == 'incorrect') & cases.skipped.isna()].itertuples():
        assert run.provenance[r.query_id][r.doc_id] == r.unit_id
    t = summarize_figure_references(cases)
    assert t.loc['near', 'n_correct'] == 19


# ---------------------------------------------------------------- corpus statistics
def _check_stats_against_records(df, papers):
    tok = default_tokenizer()
    assert list(df.index) == [p.id for p in papers]
    for p in papers:
        row = df.loc[p.id]
        assert row.figures == len(p.figures) and row.tables == len(p.tables)
        assert row.equations == len(p.equations) and row.sections == len(p.sections)
        assert row.words == len(p.text.split()) and row.chars == len(p.text)
        assert row.tokens == len(token_offsets(p.text, tok))
        if row.page_source == 'estimate': assert row.pages == estimate_pages(row.tokens)


def test_stats_match_records_on_demo(demo):
    papers, _ = demo
    df = corpus_stats(papers)
    _check_stats_against_records(df, papers)
    s = summarize_corpus(df)
    assert s['n_papers'] == 21 and s['pages_estimated'] == 21 and 'estimate' in s['page_note']
    assert s['total']['tables'] == sum(len(p.tables) for p in papers)
    assert sum(s['pages_histogram'].values()) == 21 == sum(s['tokens_histogram'].values())
    assert s['tokens_histogram']['1k–5k'] == sum(1000 <= len(token_offsets(p.text, default_tokenizer())) < 5000 for p in papers)
    json.dumps(s)


@pytest.mark.slow
def test_stats_over_shared_corpus(shared_dir):
    papers, errors = load_papers(shared_dir / 'corpus' / 'papers', progress=False)
    assert len(papers) + len(errors) == 80 and len(papers) >= 75
    df = corpus_stats(papers)
    _check_stats_against_records(df, papers)
    assert page_histogram(df).sum() == len(papers) == token_histogram(df).sum()
    s = summarize_corpus(df)
    assert s['total']['figures'] == sum(len(p.figures) for p in papers)
    assert s['median']['tokens'] > 1000           # real papers, not stubs


# ---------------------------------------------------------------- robustness
@pytest.fixture(scope='module')
def bm25_results(demo):
    papers, _ = demo
    return [evaluate(demo_corpus_dir(), demo_queries_path(), 'text', 'bm25', chunk_size=c, papers=papers, progress=False)
            for c in (128, 256)]


def test_robustness_table_on_demo(demo, bm25_results):
    _, queries = demo
    tab = robustness_table(bm25_results)
    for res in bm25_results:
        row = tab.loc[('bm25', 'text', res['config']['chunk_size'])]
        for m in ('ndcg@10', 'recall@1', 'recall@5'):
            name, k = m.split('@')
            assert row[(m, 'robust')] == pytest.approx(robustness_at_k(res['run'], queries, int(k), name), abs=1e-12)
            assert row[(m, 'robust')] <= row[(m, 'L0')] + 1e-12
            for l in '0123': assert row[(m, f'L{l}')] == pytest.approx(res['by_level'][l][m], abs=1e-12)
        assert row[('n', 'questions')] == 60


def test_significance_on_demo(bm25_results):
    a, b = bm25_results
    same = significance_table([a, a])
    assert same.loc[0, 'p_value'] == 1.0 and same.loc[0, 'diff'] == 0.0
    sig = significance_table([a, b])
    assert sig.loc[0, 'diff'] == pytest.approx(b['overall']['ndcg@10'] - a['overall']['ndcg@10'], abs=1e-12)
    assert 0 < sig.loc[0, 'p_value'] <= 1 and sig.loc[0, 'diff_ci_lo'] <= sig.loc[0, 'diff'] <= sig.loc[0, 'diff_ci_hi']
    ls = level_significance(a)
    assert ls['n'] == 60 and ls['mean_a'] == pytest.approx(a['by_level']['0']['ndcg@10'])


# ---------------------------------------------------------------- results tables
def test_results_roundtrip_on_demo(demo, tmp_path):
    papers, _ = demo
    t = grid(demo_corpus_dir(), demo_queries_path(), tmp_path, representations=('text', 'text+captions'), retrievers=('bm25',),
             chunk_sizes=(128, 256), describer='source', progress=False, log=lambda *a: None)
    paths = [tmp_path / r['result'] for r in t['rows']]
    (tmp_path / 'summary.json').write_text('[]')                # a grid's summary is not a result
    res = load_results(tmp_path, with_runs=True)
    assert len(paths) == len(res) == 4 and all(r['run'].scores for r in res)
    t = results_table(res)
    for r in res:
        row = t.loc[(r['config']['retriever'], r['config']['representation'], r['config']['chunk_size'])]
        assert row['all'] == pytest.approx(r['overall']['ndcg@10'])
        assert row['avg'] == pytest.approx(np.mean([v['ndcg@10'] for v in r['by_evidence_type'].values()]))
        assert row['index_bytes'] == r['index_bytes'] > 0
    # the table's robustness also works on loaded JSON (no in-memory queries)
    assert robustness_table(res).shape[0] == 4
    import matplotlib; matplotlib.use('Agg')
    ax = plot_ndcg_vs_index_size(res)
    assert len(ax.get_legend().get_texts()) == 2


# ---------------------------------------------------------------- shared corpus figure references
@pytest.fixture(scope='module')
def shared_corpus(shared_dir):
    papers, _ = load_papers(shared_dir / 'corpus' / 'papers', progress=False)
    return papers, load_queries(shared_dir / 'queries' / 'dev.jsonl', known_doc_ids=[p.id for p in papers])


def _check_shared_table(t, cases, queries):
    n = len(_fig_queries(queries))
    assert n == 18
    found = (cases.side == 'correct') & cases.skipped.isna()
    assert t.loc['near', 'n_correct'] == found.sum() >= n - 1     # (almost) every gold figure is located
    assert ((t['correct'] <= t['n_correct']) & (t['incorrect'] <= t['n_incorrect'])).all()
    assert t.loc['caption_info', 'correct'] > t.loc['caption_info', 'incorrect']


@pytest.mark.slow
def test_figure_reference_shared_bm25(shared_corpus):
    papers, queries = shared_corpus
    cases = figure_reference_cases(papers, queries, 'bm25', chunk_size=512)
    _check_shared_table(summarize_figure_references(cases), cases, queries)


@pytest.mark.slow
def test_figure_reference_shared_dense(shared_corpus):
    "Dense MiniLM, 512-token chunks (several minutes cold on 2 cores; embeddings cached afterwards)."
    papers, queries = shared_corpus
    cases = figure_reference_cases(papers, queries, 'dense', chunk_size=512)
    _check_shared_table(summarize_figure_references(cases), cases, queries)
