"""The page task streamed (`--stream --task page`): each batch of papers is mapped to pages and its units turned into
page units before they are stored, so the run holds one batch; the numbers equal the in-memory page task's."""
import json
from pathlib import Path
import pytest
from docbench_nb.context import RunContext
from docbench_nb.evaluation.core import evaluate
from docbench_nb.evaluation import core
from docbench_nb.evaluation.formats import load_queries
from docbench_nb.evaluation import page_task
from docbench_nb.retrieval import unit_shards

IDS = ('3I-ATLAS-discovery', 'dong-obliquity', 'arxiv-1911.02782')     # small papers with dev queries (as tests/test_pagetask.py)
BATCH = 2


@pytest.fixture(scope='module')
def three(shared_dir):
    if not __import__('shutil').which('pdflatex'): pytest.skip('needs pdflatex')
    srcs = [str(shared_dir / 'corpus' / 'papers' / i) for i in IDS]
    qs = [q for q in load_queries(shared_dir / 'queries' / 'dev.jsonl') if set(q.doc_ids) <= set(IDS)]
    assert len(qs) >= 8
    return srcs, qs


def test_streamed_page_task_equals_in_memory_one_batch_at_a_time(three, tmp_path, monkeypatch):
    srcs, qs = three
    monkeypatch.setattr(unit_shards, 'SHARD_BATCH', BATCH)
    mapped, real_maps = [], page_task.page_maps
    counting = lambda papers, *a, **kw: (mapped.append(len(papers)), real_maps(papers, *a, **kw))[1]
    for mod in (page_task, core): monkeypatch.setattr(mod, 'page_maps', counting)
    ctx = RunContext(cache_dir=str(tmp_path), progress=False)
    m = evaluate(srcs, qs, 'text', 'bm25', 256, task='page', ctx=ctx)
    assert mapped == [3]
    mapped.clear()
    s = evaluate(srcs, qs, 'text', 'bm25', 256, task='page', ctx=ctx.replace(stream=True))
    gold = len({d for q in qs for d in q.doc_ids})
    assert mapped == [2, 1, gold], mapped        # a batch of papers at a time (the step), then the queries' gold papers (cached)
    for k in ('per_query', 'overall', 'by_level', 'n_units', 'n_docs', 'n_queries', 'index_bytes', 'warnings'): assert s[k] == m[k], k
    assert s.run.scores == m.run.scores and s.config['task'] == 'page'
    assert s.extra['page_units'] == m.extra['page_units'] and s.extra['page_qrels'] == m.extra['page_qrels']
    assert s.extra['provenance']['context']['stream'] == {'shards': 2, 'cached': False}
    assert m.n_docs > len(IDS) and s.n_units > 0
    # warm: the page units come from the cached shards; only the queries' gold papers are mapped again (from the cache)
    mapped.clear()
    w = evaluate(srcs, qs, 'text', 'bm25', 256, task='page', ctx=ctx.replace(stream=True))
    assert w['per_query'] == s['per_query'] and w['n_docs'] == s['n_docs'] and w.extra['page_units'] == s.extra['page_units']
    assert w.extra['provenance']['context']['stream']['cached'] is True and mapped == [gold]


def test_page_maps_out_of_time_keep_the_shards_out_of_the_cache(three, tmp_path, monkeypatch):
    """A page map that failed for want of time on a loaded machine (its render not cached: `PageMap.transient`) is tried
    again next run: the shards are not cached. A cached failure (a TeX loop killed with its CPU) is the paper's: cached."""
    srcs, qs = three
    from docbench_nb.pages.pagemap import PageMap
    real = page_task.map_paper
    busy = 'render pdflatex killed after 90.00 s wall with 0.20 CPU s: not cached; it is tried again on the next run'
    monkeypatch.setattr(page_task, 'map_paper', lambda p, **kw: PageMap(p.id, error='render failed: real compile failed: timed out',
                                                                        transient=busy) if p.id == IDS[0] else real(p, **kw))
    ctx = RunContext(cache_dir=str(tmp_path / 'a'), progress=False, stream=True)
    with pytest.warns(UserWarning, match='unit shards not cached'):
        s = evaluate(srcs, qs, 'text', 'bm25', 256, task='page', ctx=ctx)
    assert s.extra['provenance']['context']['stream']['cached'] is False
    monkeypatch.setattr(page_task, 'map_paper', real)
    again = evaluate(srcs, qs, 'text', 'bm25', 256, task='page', ctx=ctx)
    assert again.extra['provenance']['context']['stream']['cached'] is False          # made again, now cached for the next run
    assert again.n_docs > s.n_docs                                                    # the first paper's pages are back
    # the same failure, cached (no `transient`): the paper's fact, so the shards are cached with it
    monkeypatch.setattr(page_task, 'map_paper', lambda p, **kw: PageMap(p.id, error='render failed: real compile failed: timed out')
                        if p.id == IDS[0] else real(p, **kw))
    ctx = ctx.replace(cache_dir=str(tmp_path / 'b'))
    first = evaluate(srcs, qs, 'text', 'bm25', 256, task='page', ctx=ctx)
    warm = evaluate(srcs, qs, 'text', 'bm25', 256, task='page', ctx=ctx)
    assert (first.n_docs, warm['per_query']) == (s.n_docs, first['per_query'])
    assert warm.extra['provenance']['context']['stream']['cached'] is True


def test_a_page_map_of_an_uncached_render_keeps_the_shards_out_of_the_cache(three, tmp_path, monkeypatch):
    "A render a busy machine may have shaped is not cached (`render_paper`); the page map made from it is not, nor are the shards."
    srcs, qs = three
    real = page_task.map_paper
    def shaped(p, **kw):
        pm = real(p, **kw)
        if p.id == IDS[1]: pm.transient = 'render pdflatex killed after 3s with 0.4 s CPU: not cached; it is tried again on the next run'
        return pm
    monkeypatch.setattr(page_task, 'map_paper', shaped)
    ctx = RunContext(cache_dir=str(tmp_path), progress=False, stream=True)
    with pytest.warns(UserWarning, match='unit shards not cached'):
        s = evaluate(srcs, qs, 'text', 'bm25', 256, task='page', ctx=ctx)
    monkeypatch.setattr(page_task, 'map_paper', real)
    again = evaluate(srcs, qs, 'text', 'bm25', 256, task='page', ctx=ctx)
    assert again.extra['provenance']['context']['stream']['cached'] is False and again['per_query'] == s['per_query']
    assert evaluate(srcs, qs, 'text', 'bm25', 256, task='page', ctx=ctx).extra['provenance']['context']['stream']['cached'] is True


def test_page_latex_units_of_a_map_without_a_cached_render_keep_the_shards_out_of_the_cache(monkeypatch):
    "A failed map whose render was not cached (here: render_paper raised) warns with the not-cached marker, whatever its text."
    from docbench_nb.retrieval import visual_units as V, unit_shards as S
    from docbench_nb.retrieval.represent import represent
    from docbench_nb.pages.pagemap import PageMap
    from docbench_nb.records import Paper
    err = ('render failed: ' + 'real compile failed: x; ' * 40)[:500]        # long: a marker at its end would be cut off
    monkeypatch.setattr(V, 'map_paper', lambda p, **kw: PageMap(p.id, error=err, transient='render failed: OSError: disk full'))
    rep = represent([Paper(id='a', title='T', text='Some text.')], 'page-latex', progress=False, workers=1)
    assert rep.units == []
    tr = S._transient([], rep)
    assert len(tr) == 1 and 'OSError: disk full' in tr[0], rep.warnings
    monkeypatch.setattr(V, 'map_paper', lambda p, **kw: PageMap(p.id, error=err))          # a cached failure: the paper's
    assert S._transient([], represent([Paper(id='a', title='T', text='Some text.')], 'page-latex', progress=False, workers=1)) == []
