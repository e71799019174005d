"Context-length scaling: window geometry on real papers, and the experiment end to end on demo papers."
import shutil
import pytest
from docbench_nb.demo import demo_corpus_dir
from docbench_nb.latex.corpus import load_papers
from docbench_nb.retrieval.represent import default_tokenizer, token_offsets
from docbench_nb.evaluation.scaling import (context_windows, window_text, prose_fraction, parse_route, scaling_experiment,
                                 DEFAULT_ROUTES)


@pytest.fixture(scope='module')
def tok(): return default_tokenizer()


@pytest.fixture(scope='module')
def demo_papers(): return sorted(load_papers(demo_corpus_dir(), progress=False)[0], key=lambda p: p.id)


def ntok(tok, text): return len(tok(text, add_special_tokens=False, verbose=False)['input_ids'])


def check_windows(paper, w, tok, lengths, query_tokens, eps=15):
    "Token lengths within `eps`, strict nesting, query verbatim inside the base window and centred in it."
    assert w['lengths'] == sorted(lengths)
    for L in lengths:
        s, e = w['token_spans'][L]
        assert abs((e - s) - L) <= 16, (paper.id, L, s, e)                  # tokens of the paper's own tokenization
        assert abs(ntok(tok, window_text(paper, w, L)) - L) <= eps, (paper.id, L)   # re-tokenized alone
    spans = [w['windows'][L] for L in sorted(lengths)]
    for (a, b), (c, d) in zip(spans, spans[1:]): assert c <= a < b <= d, (paper.id, spans)
    qs, qe = w['query_span']; bs, be = spans[0]
    assert bs <= qs < qe <= be
    assert paper.text[qs:qe] == w['query']
    assert abs(ntok(tok, w['query']) - query_tokens) <= 10
    mid_q, mid_b = (qs + qe) / 2, (bs + be) / 2
    assert abs(mid_q - mid_b) < 0.25 * (be - bs), (paper.id, mid_q, mid_b)


def test_windows_demo(demo_papers, tok):
    lengths = (100, 400, 1200)
    n = 0
    for p in demo_papers:
        w = context_windows(p, tok, lengths, query_tokens=50)
        assert w is not None                           # every demo paper has >= 1,500 tokens
        check_windows(p, w, tok, lengths, 50)
        n += 1
    assert n == len(demo_papers) >= 20


def test_windows_deterministic_and_short_policy(demo_papers, tok):
    p = demo_papers[0]
    a, b = context_windows(p, tok, (250, 1000)), context_windows(p, tok, (250, 1000))
    assert a == b
    n = len(token_offsets(p.text, tok))
    assert context_windows(p, tok, (500, n + 1)) is None
    c = context_windows(p, tok, (500, n + 1), short='cap')
    assert c['capped'] == [n + 1] and c['token_spans'][n + 1] == (0, n)
    with pytest.raises(ValueError, match='query_tokens'): context_windows(p, tok, (80, 500), query_tokens=100)
    with pytest.raises(ValueError, match="'skip' or 'cap'"): context_windows(p, tok, (500,), short='pad')


def test_prose_preference(demo_papers, tok):
    "Chosen base windows are prose-like; prose_fraction tells prose from math."
    assert prose_fraction('Bats forage along hedgerows at night, avoiding lit roads.') > 0.95
    assert prose_fraction(r'\begin{equation} E = \sum_i m_i c^2 \end{equation}') == 0
    ws = [context_windows(p, tok, (250, 1000)) for p in demo_papers]
    assert sum(w['prose_ok'] for w in ws) >= len(ws) - 2
    assert all(w['prose'] >= 0.7 for w in ws if w['prose_ok'])


@pytest.mark.slow
def test_windows_shared_corpus(shared_dir, tok):
    "The study's geometry (500/1000/4000/8000, 100-token query) on every long shared paper."
    papers, _ = load_papers(shared_dir / 'corpus' / 'papers', progress=False)
    lengths = (500, 1000, 4000, 8000)
    done = 0
    for p in papers:
        w = context_windows(p, tok, lengths, 100)
        if w is None:
            assert len(token_offsets(p.text, tok)) < 8000
            continue
        check_windows(p, w, tok, lengths, 100, eps=20)
        done += 1
    assert done >= 60


def test_parse_route():
    assert [parse_route(r)['source'] for r in DEFAULT_ROUTES] == ['text', 'text', 'image-ocr', 'image-ocr']
    assert parse_route('text-bm25-full') == {'route': 'text-bm25-full', 'source': 'text', 'retriever': 'bm25', 'chunked': False,
                                             'ocr_scale': 1.0}
    assert parse_route('image-ocr2x-dense')['ocr_scale'] == 2.0
    for bad in ('text-clip:x', 'image-dense', 'ocr-bm25', 'image-ocr0.5x-bm25', ''):
        with pytest.raises(ValueError, match='unknown route'): parse_route(bad)


needs_tools = pytest.mark.skipif(not all(shutil.which(t) for t in ('pdflatex', 'pdftoppm', 'tesseract')),
                                 reason='needs pdflatex, poppler-utils and tesseract')


@pytest.fixture(scope='module')
def cache(tmp_path_factory): return tmp_path_factory.mktemp('scaling-cache')


@pytest.mark.slow
@needs_tools
def test_experiment_demo(demo_papers, cache):
    papers = demo_papers[:4]
    df = scaling_experiment(papers, lengths=(100, 400), query_tokens=50, cache_dir=cache, progress=False)
    assert len(df) == len(DEFAULT_ROUTES) * 2
    assert {(r, L) for r, L in zip(df.route, df.length)} == {(r, L) for r in DEFAULT_ROUTES for L in (100, 400)}
    for m in ('ndcg@10', 'recall@1', 'recall@10', 'mrr@10'): assert df[m].between(0, 1).all(), m
    assert (df.n_docs == 4).all()
    # verbatim queries: BM25 over the text finds every one at the shortest length
    row = df[(df.route == 'text-bm25') & (df.length == 100)].iloc[0]
    assert row['ndcg@10'] == 1.0 and row['recall@1'] == 1.0
    assert (df[df.source == 'text'].query_words_found == 1.0).all()
    # 100 and 400 tokens fit one 10 pt page at 1M pixels: OCR reads most query words back
    ocr = df[df.source == 'image-ocr']
    assert (ocr.font_pt == 10).all() and (ocr.empty_docs == 0).all()
    assert ocr.query_words_found.min() > 0.5
    assert len(df.attrs['windows']) == 4 and len(df.attrs['pages']) == 8
    # rerun: renders and OCR come from the cache (recomputing either would raise here), same numbers
    import docbench_nb.pages.render, docbench_nb.retrieval.ocr
    def recomputed(*a, **k): raise AssertionError('cache miss: the rerun recomputed a render or an OCR')
    with pytest.MonkeyPatch.context() as mp:
        for mod, fn in ((docbench_nb.pages.render, 'render_pages'), (docbench_nb.retrieval.ocr, '_ocr_tesseract'), (docbench_nb.retrieval.ocr, '_ocr_rapidocr')):
            mp.setattr(mod, fn, recomputed)
        df2 = scaling_experiment(papers, lengths=(100, 400), query_tokens=50, cache_dir=cache, progress=False)
    assert df2['ndcg@10'].tolist() == df['ndcg@10'].tolist()
    assert not any(v['error'] for v in df2.attrs['pages'].values())


@pytest.mark.slow
@needs_tools
def test_experiment_vision_route(demo_papers, cache, tmp_path):
    "A true image route (here a tiny random CLIP: plumbing only) indexes the same page images, one unit per document."
    from docbench_nb.testing import make_tiny_vision_models
    clip = make_tiny_vision_models(tmp_path / 'models')['clip']
    df = scaling_experiment(demo_papers[:4], lengths=(100, 400), query_tokens=50, routes=('text-bm25', f'image-clip:{clip}'),
                            cache_dir=cache, progress=False)
    img = df[df.source == 'image']
    assert len(img) == 2 and (img.n_units == 4).all() and img['ndcg@10'].between(0, 1).all()
    assert img.font_pt.notna().all() and img.query_words_found.isna().all()
