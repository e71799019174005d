"Saved indexes keyed in the cache: a warm rerun loads (builds nothing) with identical results; changes rebuild; damage is caught."
import os
import numpy as np
import pytest
import bm25s
from docbench_nb.records import Unit, Query
from docbench_nb.evaluation.core import evaluate_units
from docbench_nb.retrieval import text_retrievers as tr, unit_index as ui
from docbench_nb.retrieval.registry import make_retriever
from docbench_nb.retrieval.text_retrievers import BM25Retriever, DenseRetriever
from docbench_nb.retrieval.unit_index import IndexStore
from docbench_nb.retrieval.encoders import as_encoder

TOPICS = {'gw': 'gravitational wave detector interferometer strain merger black hole ringdown',
          'cmb': 'cosmic microwave background anisotropy polarization temperature map spectrum',
          'nlp': 'language model transformer attention token pretraining sentiment classification',
          'bio': 'genome editing crispr protein sequence cell expression gene',
          'ml': 'gradient descent optimizer convergence loss regularization neural network',
          'qc': 'quantum circuit qubit entanglement error correction gate fidelity'}


def corpus(n_docs=36, per_doc=3, seed=0):
    "Units of `n_docs` papers on six topics (words drawn from the topic and a shared pool), and one query per topic."
    rng = np.random.default_rng(seed)
    pool = 'the of results we show method data analysis model paper study approach large small new'.split()
    units, topics = [], list(TOPICS)
    for d in range(n_docs):
        t = topics[d % len(topics)]
        for j in range(per_doc):
            words = rng.choice(TOPICS[t].split() + pool, 18)
            units.append(Unit(f'{t}{d}', f'{t}{d}#{j}', text=' '.join(words) + f' section {j} of paper {d}.'))
    qs = [Query(f'q-{t}', ' '.join(TOPICS[t].split()[:3]), doc_ids=[f'{t}{i}' for i in range(topics.index(t), n_docs, len(topics))])
          for t in topics]
    return units, qs


def spy(monkeypatch, obj, name, pred=lambda *a, **k: True):
    "Count calls of `obj.name` for which `pred(*args, **kw)` holds; the original still runs."
    calls, orig = [], getattr(obj, name)
    def wrapped(*a, **k):
        if pred(*a, **k): calls.append(1)
        return orig(*a, **k)
    monkeypatch.setattr(obj, name, wrapped)
    return calls


def files_under(p): return sorted(q for q in p.rglob('*') if q.is_file())


@pytest.fixture
def elsewhere(tmp_path, monkeypatch):
    "The default cache root points here: nothing may be written to it when a cache folder is given."
    d = tmp_path / 'default-cache'
    monkeypatch.setenv('DOCBENCH_CACHE', str(d))
    return d


def test_bm25_warm_rerun_loads_identical_results(tmp_path, monkeypatch, elsewhere):
    units, qs = corpus()
    cache = tmp_path / 'cache'
    builds = spy(monkeypatch, bm25s.BM25, 'index')
    cold = evaluate_units(units, qs, 'bm25', k=10, cache_dir=cache, progress=False)
    assert len(builds) == 1
    saved = files_under(cache / 'indexes')
    assert {p.name for p in saved} >= {'manifest.json', 'data.csc.index.npy', 'vocab.index.json'}
    warm = evaluate_units(units, qs, 'bm25', k=10, cache_dir=cache, progress=False)
    assert len(builds) == 1                                   # the warm run tokenized and indexed nothing
    assert warm.run.scores == cold.run.scores and warm.run.provenance == cold.run.provenance
    assert warm.per_query == cold.per_query and warm.index_bytes == cold.index_bytes
    assert all(warm.run.ranking(q.id) for q in qs)            # not vacuous: every query found papers
    plain = BM25Retriever(); plain.index(units, progress=False)          # no store: built in memory, as before
    assert plain.search(qs, k=10).scores == cold.run.scores and len(builds) == 2
    assert files_under(cache / 'indexes') == saved            # no store, nothing written
    assert not elsewhere.exists()                             # nothing outside the given cache root
    assert all(p.is_relative_to(cache / 'indexes') for p in files_under(tmp_path) if 'indexes' in p.parts)


def test_bm25_changed_unit_or_option_is_a_new_index(tmp_path, monkeypatch):
    units, qs = corpus()
    builds = spy(monkeypatch, bm25s.BM25, 'index')
    def run(us, spec='bm25'):
        r = make_retriever(spec, cache_dir=tmp_path); r.index(us, progress=False)
        return r, r.search(qs, k=10)
    r0, cold = run(units)
    changed = list(units); changed[4] = Unit(units[4].doc_id, units[4].unit_id, text=units[4].text + ' interferometer')
    r1, after = run(changed)
    assert len(builds) == 2 and (r1.store.built, r1.store.loaded) == (1, 0)
    fresh = BM25Retriever(); fresh.index(changed, progress=False)
    assert after.scores == fresh.search(qs, k=10).scores      # the rebuilt index is the changed units' index
    assert len(builds) == 3
    run(units[::-1]); run(units, 'bm25?k1=1.2')               # order and options are part of the key
    assert len(builds) == 5
    r5, again = run(units)
    assert len(builds) == 5 and r5.store.loaded == 1 and again.scores == cold.scores
    assert len(list((tmp_path / 'indexes' / 'bm25').glob('*/*/manifest.json'))) == 4


@pytest.mark.parametrize('damage,why', [('flip', 'does not match its checksum'), ('truncate', 'bytes'),
                                        ('manifest', 'has no manifest.json')])
def test_bm25_damaged_saved_index_is_rebuilt_with_a_warning(tmp_path, monkeypatch, damage, why):
    units, qs = corpus()
    builds = spy(monkeypatch, bm25s.BM25, 'index')
    r = make_retriever('bm25', cache_dir=tmp_path); r.index(units, progress=False)
    cold = r.search(qs, k=10)
    data = next((tmp_path / 'indexes').rglob('data.csc.index.npy'))
    b = bytearray(data.read_bytes())
    if damage == 'flip': b[-8:] = bytes(x ^ 0xFF for x in b[-8:]); data.write_bytes(bytes(b))
    elif damage == 'truncate': data.write_bytes(bytes(b[:len(b) // 2]))
    else: (data.parents[1] / 'manifest.json').unlink()
    r2 = make_retriever('bm25', cache_dir=tmp_path)
    with pytest.warns(UserWarning, match=why):
        r2.index(units, progress=False)
    assert len(builds) == 2 and (r2.store.damaged, r2.store.built, r2.store.loaded) == (1, 1, 0)
    assert r2.search(qs, k=10).scores == cold.scores
    r3 = make_retriever('bm25', cache_dir=tmp_path); r3.index(units, progress=False)      # the rebuilt one is intact
    assert (len(builds), r3.store.loaded) == (2, 1) and r3.search(qs, k=10).scores == cold.scores


def test_dense_exact_and_hnsw_warm_load_builds_nothing(tmp_path, monkeypatch, elsewhere):
    units, qs = corpus(n_docs=24)
    cache = tmp_path / 'cache'
    embeds = spy(monkeypatch, tr, 'embed_cached', lambda *a, **k: k.get('kind') == 'unit')
    graphs = spy(monkeypatch, ui, '_build_faiss')
    first = make_retriever('dense', cache_dir=cache)
    assert first.store is not None and first.store.root == cache / 'indexes'
    enc = first.encoder
    for spec, ann in (('dense', {}), ('dense?index=hnsw&m=8', {'index': 'hnsw', 'm': 8})):
        n_emb, n_graph = len(embeds), len(graphs)
        mk = lambda: DenseRetriever(enc, cache=tr._embedding_cache(cache), ann=ann, store=IndexStore.for_cache(cache))
        cold_r = first if spec == 'dense' else mk()
        cold_r.index(units, progress=False); cold = cold_r.search(qs, k=10)
        assert (len(embeds) - n_emb, len(graphs) - n_graph) == (1, 0 if spec == 'dense' else 1)
        warm_r = mk(); warm_r.index(units, progress=False); warm = warm_r.search(qs, k=10)
        assert (len(embeds) - n_emb, len(graphs) - n_graph) == (1, 0 if spec == 'dense' else 1)   # warm: no embedding, no graph
        assert (warm_r.store.loaded, warm_r.store.built) == (1, 0)
        assert isinstance(warm_r._index.vectors, np.memmap)
        assert warm.scores == cold.scores and warm.provenance == cold.provenance       # identical rankings and scores
        assert [warm.ranking(q.id)[0] for q in qs] == [cold.ranking(q.id)[0] for q in qs] and all(cold.ranking(q.id) for q in qs)
        S1, ids1 = cold_r.unit_scores(qs); S2, ids2 = warm_r.unit_scores(qs)
        assert ids1 == ids2 and np.array_equal(S1, S2)
        changed = list(units); changed[0] = Unit(units[0].doc_id, units[0].unit_id, text='a different first unit')
        r = mk(); r.index(changed, progress=False)
        assert (r.store.built, len(embeds) - n_emb) == (1, 2)                          # a changed unit: a new index
    ann_file = next((cache / 'indexes').rglob('ann.faiss'))
    ann_file.write_bytes(ann_file.read_bytes()[:1000])
    r = DenseRetriever(enc, cache=tr._embedding_cache(cache), ann={'index': 'hnsw', 'm': 8}, store=IndexStore.for_cache(cache))
    with pytest.warns(UserWarning, match='ann.faiss of 1000 bytes'):
        r.index(units, progress=False)
    assert r.store.damaged == 1 and r.search(qs, k=10).scores == warm.scores
    assert all(p.is_relative_to(cache) for p in files_under(tmp_path) if not p.is_relative_to(tmp_path / 'default-cache'))
    assert not elsewhere.exists()
    assert not [p for p in (cache / 'indexes').rglob('.*')]                              # no temporary folder left behind


def test_dense_another_model_is_a_new_index(tmp_path):
    units, qs = corpus(n_docs=6)

    class Hashing:
        "A bag-of-words hashing encoder; `fingerprint` names its (fixed) weights."
        name, dim = 'hashing', 32
        def __init__(self, fp, seed): self.fingerprint, self.seed = fp, seed
        def encode(self, texts):
            out = np.zeros((len(texts), self.dim), np.float32)
            for i, t in enumerate(texts):
                for w in t.split(): out[i, (hash(w) + self.seed) % self.dim] += 1
            return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-9)
    store = IndexStore.for_cache(tmp_path)
    for fp, seed in (('hash-a', 0), ('hash-b', 1), ('hash-a', 0)):
        DenseRetriever(as_encoder(Hashing(fp, seed)), cache=False, store=store).index(units, progress=False)
    assert (store.built, store.loaded) == (2, 1)


def test_store_refuses_links_and_foreign_names(tmp_path):
    units, _ = corpus(n_docs=6)
    outside = tmp_path / 'outside'; outside.mkdir()
    store = IndexStore(tmp_path / 'cache' / 'indexes')
    key = store.key('bm25', {}, units)
    (tmp_path / 'cache' / 'indexes').mkdir(parents=True)
    os.symlink(outside, tmp_path / 'cache' / 'indexes' / 'bm25')
    with pytest.raises(ValueError, match='link'):
        store.get_or_build('bm25', key, dict, lambda o, d: None, lambda d: {})
    assert list(outside.iterdir()) == []
    with pytest.raises(ValueError, match='not a store name'):
        store.folder('bm25', '../../x' + key)
