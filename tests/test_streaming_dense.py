"Streamed dense and late-interaction evaluation: `index_shards` embeds a shard at a time into the saved index, and answers as `index(units)` does."
from pathlib import Path
import pytest
from docbench_nb.context import RunContext
from docbench_nb.evaluation.core import evaluate
from docbench_nb.evaluation.formats import load_queries
from docbench_nb.retrieval import unit_shards, text_retrievers, late as late_mod
from docbench_nb.retrieval.registry import make_retriever
from docbench_nb.retrieval.text_retrievers import DenseRetriever, BM25Retriever, HybridRetriever
from docbench_nb.retrieval.late import LateRetriever
from docbench_nb.retrieval.unit_index import IndexStore
from docbench_nb.demo import demo_corpus_dir, demo_queries_path

N_PAPERS, BATCH = 8, 3
READ_INTO_ONE_LIST = 'units of the shards were read into one list'

@pytest.fixture(scope='module')
def streamed(tmp_path_factory):
    "A streamed dense run on `N_PAPERS` demo papers, `BATCH` papers a shard, with every `embed_cached` call counted."
    srcs = sorted(str(p) for p in Path(demo_corpus_dir()).iterdir() if p.is_dir())[:N_PAPERS]
    ids = {Path(s).name for s in srcs}
    qs = [q for q in load_queries(demo_queries_path()) if set(q.doc_ids) <= ids]
    assert len(srcs) == N_PAPERS and len(qs) >= 20
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(unit_shards, 'SHARD_BATCH', BATCH)
        calls, real = [], text_retrievers.embed_cached
        mp.setattr(text_retrievers, 'embed_cached', lambda enc, texts, kind='unit', *a, **kw: (calls.append((kind, len(texts))), real(enc, texts, kind, *a, **kw))[1])
        ctx = RunContext(cache_dir=str(tmp_path_factory.mktemp('cache')), progress=False)
        ret = make_retriever('dense', ctx=ctx)          # the registry's dense retriever: the cache's embeddings and index store
        res = evaluate(srcs, qs, 'text', ret, ctx=ctx.replace(stream=True))
        yield dict(srcs=srcs, qs=qs, ctx=ctx, ret=ret, res=res, calls=calls, first=list(calls))

def _same(a, b):
    assert a['per_query'] == b['per_query'] and a.run.scores == b.run.scores and a.run.provenance == b.run.provenance
    for k in ('overall', 'n_units', 'n_docs', 'index_bytes'): assert a[k] == b[k], k

def _sibling(w, store, **kw):
    "A dense retriever on the streamed one's encoder and embedding cache (so the same vectors), with `store`."
    r = DenseRetriever(w['ret'].encoder, cache=w['ret'].cache, store=store, **kw)
    r.name = w['ret'].name + ('?index=hnsw' if kw else '')
    return r

def test_streamed_dense_embeds_a_shard_at_a_time(streamed):
    s, units = streamed['res'], [n for kind, n in streamed['first'] if kind == 'unit']
    assert len(units) == -(-N_PAPERS // BATCH) and sum(units) == s['n_units'] and max(units) < s['n_units']
    ix = streamed['ret']._index
    assert ix.units is None and len(ix) == s['n_units'] and ix.n_docs == N_PAPERS       # ids kept, no unit, no text
    assert not any(READ_INTO_ONE_LIST in w for w in s['warnings'])
    assert s.extra['provenance']['context']['stream']['shards'] == len(units)
    assert (streamed['ret'].store.built, streamed['ret'].store.loaded) == (1, 0)

def test_streamed_dense_equals_in_memory_and_each_loads_the_others_index(streamed, tmp_path):
    w, s = streamed, streamed['res']
    mem = _sibling(w, IndexStore(tmp_path / 'store'))                  # built in memory from the same cached vectors
    m = evaluate(w['srcs'], w['qs'], 'text', mem, ctx=w['ctx'])
    _same(s, m)
    assert s['warnings'] == m['warnings'] and mem._index.units is not None and (mem.store.built, mem.store.loaded) == (1, 0)
    back = _sibling(w, IndexStore.for_cache(w['ctx']))       # in memory, finds what the shards built
    _same(evaluate(w['srcs'], w['qs'], 'text', back, ctx=w['ctx']), s)
    assert (back.store.built, back.store.loaded) == (0, 1)
    fwd, before = _sibling(w, mem.store), len(w['calls'])               # streamed, finds what `index(units)` built
    _same(evaluate(w['srcs'], w['qs'], 'text', fwd, ctx=w['ctx'].replace(stream=True)), m)
    assert (mem.store.built, mem.store.loaded) == (1, 1) and fwd._index.units is None
    assert {k for k, _ in w['calls'][before:]} == {'query'}              # nothing embedded for the units

def test_streamed_approximate_dense_reads_the_units_and_says_so(streamed):
    w = streamed
    hnsw = _sibling(w, None, ann={'index': 'hnsw'})
    assert not hasattr(hnsw, 'index_shards')
    s = evaluate(w['srcs'], w['qs'], 'text', hnsw, ctx=w['ctx'].replace(stream=True))
    assert [x for x in s['warnings'] if READ_INTO_ONE_LIST in x] == [f"{hnsw.name} indexes from memory: the {s['n_units']} {READ_INTO_ONE_LIST}"]

def test_streamed_late_equals_in_memory(streamed, tmp_path, monkeypatch):
    "Late interaction (text) streams too (on half the papers: every unit's token states cost a forward pass again)."
    w, calls, real = streamed, [], late_mod.embed_tokens_cached
    srcs = w['srcs'][:N_PAPERS // 2]
    ids = {Path(x).name for x in srcs}
    qs = [q for q in w['qs'] if set(q.doc_ids) <= ids]
    monkeypatch.setattr(late_mod, 'embed_tokens_cached', lambda enc, texts, kind='unit', *a, **kw: (calls.append((kind, len(texts))), real(enc, texts, kind, *a, **kw))[1])
    late = make_retriever('late', ctx=w['ctx'])
    s = evaluate(srcs, qs, 'text', late, ctx=w['ctx'].replace(stream=True))
    units = [n for kind, n in calls if kind == 'unit']
    assert len(units) == -(-len(srcs) // BATCH) > 1 and sum(units) == s['n_units'] and max(units) < s['n_units']
    assert late._index.units is None and not any(READ_INTO_ONE_LIST in x for x in s['warnings'])
    def sibling(store): r = LateRetriever(late.encoder, cache=late.cache, store=store); r.name = late.name; return r
    mem = sibling(IndexStore(tmp_path / 'store'))
    _same(evaluate(srcs, qs, 'text', mem, ctx=w['ctx']), s)                    # in memory, from the same cached matrices
    back = sibling(late.store)
    _same(evaluate(srcs, qs, 'text', back, ctx=w['ctx']), s)                   # in memory, finds what the shards built
    assert (late.store.built, late.store.loaded, mem.store.built) == (1, 1, 1)

def test_streamed_hybrid_streams_both_parts(streamed, tmp_path):
    w = streamed
    hy = make_retriever('hybrid', ctx=w['ctx'])
    s = evaluate(w['srcs'], w['qs'], 'text', hy, ctx=w['ctx'].replace(stream=True))
    assert not any(READ_INTO_ONE_LIST in x for x in s['warnings']) and [r._index.units for r in hy.retrievers] == [None, None]
    store = IndexStore(tmp_path / 'store')                                  # in memory, in a store of its own, same vectors
    mem = HybridRetriever([BM25Retriever(store=store), _sibling(w, store)]); mem.name = hy.name
    _same(evaluate(w['srcs'], w['qs'], 'text', mem, ctx=w['ctx']), s)
    assert (store.built, store.loaded) == (2, 0)
