"""Every stage before scoring on Ray: rendered pages read by OCR on the page task, late interaction, an image encoder
and the grid, each equal to the local engine run in a separate cold cache, with the driver's own work counted from
the cache (`driver_work`: what the local pass wrote; only the index it builds is expected)."""
import json, shutil
from pathlib import Path
import pytest

ray = pytest.importorskip('ray')
from docbench_nb.demo import demo_corpus_dir, demo_queries_path
from docbench_nb.evaluation.core import evaluate
from docbench_nb.evaluation.grid import grid
from docbench_nb.evaluation import ray_engine

IDS = ('curneg-dense-retrieval', 'lateprune-multivector', 'glacier-melt-isotopes')   # small demo papers with figures


@pytest.fixture(scope='module')
def small(tmp_path_factory):
    d = tmp_path_factory.mktemp('ray_stages')
    corpus = d / 'papers'; corpus.mkdir()
    for i in IDS: shutil.copytree(demo_corpus_dir() / i, corpus / i)
    q = d / 'q.jsonl'
    q.write_text(''.join(l for l in open(demo_queries_path()) if json.loads(l)['doc_id'] in IDS))
    started = ray_engine.start_ray(num_cpus=2)          # one local instance for the module; evaluate_ray joins it
    yield d, corpus, q
    if started: ray.shutdown()


def _same(r, l, exact=True):
    assert [(a['query_id'], a['level']) for a in r.per_query] == [(b['query_id'], b['level']) for b in l.per_query]
    for a, b in zip(r.per_query, l.per_query): assert a['ndcg@10'] == pytest.approx(b['ndcg@10'], abs=1e-9), a['query_id']
    if exact: assert r.run.scores == l.run.scores
    for qid in l.run.scores: assert r.run.ranking(qid) == l.run.ranking(qid), qid
    assert (r.n_docs, r.n_units, r.index_bytes) == (l.n_docs, l.n_units, l.index_bytes)


def _driver_only_indexed(eng):
    assert set(eng['driver_work']) <= set(ray_engine.DRIVER_EXPECTED), eng['driver_work']   # counted from the cache


@pytest.mark.slow
def test_pages_with_ocr_on_the_page_task(small):
    d, corpus, q = small
    kw = dict(task='page', progress=False)
    r = ray_engine.evaluate_ray(corpus, q, 'pages', 'ocr:tesseract+dense', cache_dir=d / 'ray', log=lambda m: None, **kw)
    eng = r.config['engine']
    _driver_only_indexed(eng)
    assert eng['parse']['parsed'] == 3 and eng['prefill']['units'] == r.n_units > 3          # one unit per rendered page
    assert eng['prefill']['encoded'] == r.n_units + eng['prefill']['queries']               # every page and query, by the actor
    assert len(list((d / 'ray' / 'ocr').rglob('*.json'))) == r.n_units                      # each page OCR'd once, in tasks
    local = evaluate(corpus, q, 'pages', 'ocr:tesseract+dense', cache_dir=d / 'local', **kw)
    _same(r, local, exact=False)                # vectors from batches of another make-up: equal to float32 rounding
    for qid in local.run.scores:
        for doc, s in local.run.scores[qid].items(): assert r.run.scores[qid][doc] == pytest.approx(s, abs=1e-5)
    assert r.extra['page_qrels'] == local.extra['page_qrels']


@pytest.mark.slow
def test_late_interaction_on_actors(small):
    d, corpus, q = small
    r = ray_engine.evaluate_ray(corpus, q, 'text', 'late', cache_dir=d / 'ray_late', actors=2, batch_size=8, progress=False, log=lambda m: None)
    eng = r.config['engine']
    _driver_only_indexed(eng)
    assert eng['prefill']['encoded'] == r.n_units + eng['prefill']['queries'] and eng['driver_embedded'] == 0
    local = evaluate(corpus, q, 'text', 'late', cache_dir=d / 'local_late', progress=False)
    _same(r, local, exact=False)


@pytest.mark.slow
def test_image_encoder_on_actors(small, tmp_path):
    from docbench_nb.testing import make_tiny_vision_models
    d, corpus, q = small
    spec = f"colpali:{make_tiny_vision_models(tmp_path / 'models')['colqwen2']}"
    kw = dict(max_pixels=28 * 28 * 16, progress=False)
    r = ray_engine.evaluate_ray(corpus, q, 'figures', spec, cache_dir=d / 'ray_img', log=lambda m: None, **kw)
    eng = r.config['engine']
    _driver_only_indexed(eng)
    assert eng['prefill']['encoded'] > eng['prefill']['queries'] > 0 and 'tokens' not in eng['driver_work']
    _same(r, evaluate(corpus, q, 'figures', spec, cache_dir=d / 'local_img', **kw), exact=False)


@pytest.mark.slow
def test_grid_on_ray_equals_local(small):
    d, corpus, q = small
    rows = dict(representations='text', retrievers='bm25,dense', progress=False, log=lambda m: None)
    t = ray_engine.grid_ray(corpus, q, d / 'grid_ray', cache_dir=d / 'ray_grid', **rows)
    lt = grid(corpus, q, d / 'grid_local', cache_dir=d / 'local_grid', **rows)
    assert t['failed'] == lt['failed'] == 0
    for a, b in zip(t['rows'], lt['rows']):
        assert a['label'] == b['label'] and a['ndcg@10'] == pytest.approx(b['ndcg@10'], abs=1e-9)
        res = json.loads((d / 'grid_ray' / a['result']).read_text())
        _driver_only_indexed(res['config']['engine'])
    dense = json.loads((d / 'grid_ray' / t['rows'][1]['result']).read_text())['config']['engine']
    assert dense['prefill']['encoded'] > 0 and dense['parse'] == {'parsed': 3, 'cached': 0}
