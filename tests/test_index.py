"Index: exact max-over-units document scoring (dense and BM25) against brute-force references, persistence, RRF, retrievers."
import numpy as np
import pytest

from docbench_nb.records import Unit, Query, Run
from docbench_nb.retrieval.text_retrievers import BM25Index, rrf_fuse, DenseRetriever, BM25Retriever, HybridRetriever
from docbench_nb.retrieval.unit_index import DenseIndex, group_by_doc
from docbench_nb.retrieval.registry import make_retriever


def random_corpus(seed, n_docs=60, max_units=40, dim=24, shuffle=True):
    "Units with very uneven counts per doc (1..max_units), optionally interleaved across docs."
    rng = np.random.default_rng(seed)
    counts = rng.integers(1, max_units + 1, n_docs)
    counts[0] = max_units * 5                                           # one huge paper that floods unit lists
    units = [Unit(f"d{d:03d}", f"d{d:03d}#{i}") for d in range(n_docs) for i in range(counts[d])]
    vecs = rng.standard_normal((len(units), dim)).astype(np.float32)
    if shuffle:
        perm = rng.permutation(len(units))
        units, vecs = [units[i] for i in perm], vecs[perm]
    return units, vecs


def brute_force(units, vecs, q, k):
    "Reference: per doc, max over its units by a Python loop; top-k by (-score, doc)."
    out = []
    for qv in q:
        best = {}
        for u, v in zip(units, vecs):
            s = float(np.dot(qv.astype(np.float64), v.astype(np.float64)))
            if u.doc_id not in best or s > best[u.doc_id][0]: best[u.doc_id] = (s, u.unit_id)
        top = sorted(best, key=lambda d: (-best[d][0], d))[:k]
        out.append([(d, best[d][0], best[d][1]) for d in top])
    return out


@pytest.mark.parametrize('backend', ['numpy', 'faiss'])
@pytest.mark.parametrize('k', [1, 10, 100])
def test_dense_maxpool_exact_vs_bruteforce(backend, k):
    units, vecs = random_corpus(1)
    q = np.random.default_rng(2).standard_normal((12, vecs.shape[1])).astype(np.float32)
    ix = DenseIndex(vecs.shape[1], backend)
    ix.add(units[:700], vecs[:700]).add(units[700:], vecs[700:])       # two adds, interleaved docs
    qids = [f"q{i}" for i in range(len(q))]
    run = ix.search(qids, q, k=k, unit_k=5 if backend == 'faiss' else None)
    for qid, ref in zip(qids, brute_force(units, vecs, q, k)):
        assert run.ranking(qid) == [d for d, _, _ in ref]
        np.testing.assert_allclose([run.scores[qid][d] for d, _, _ in ref], [s for _, s, _ in ref], rtol=1e-5, atol=1e-5)
        assert {d: run.provenance[qid][d] for d, _, _ in ref} == {d: u for d, _, u in ref}
    assert ix.index_bytes == len(units) * vecs.shape[1] * 4 and ix.n_docs == 60


def test_faiss_and_numpy_rank_identically():
    units, vecs = random_corpus(3, n_docs=400, max_units=30, dim=64)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    q = np.random.default_rng(4).standard_normal((40, 64)).astype(np.float32)
    qids = [f"q{i}" for i in range(40)]
    a = DenseIndex(64, 'numpy').add(units, vecs).search(qids, q, k=20)
    b = DenseIndex(64, 'faiss').add(units, vecs).search(qids, q, k=20)
    for qid in qids:
        assert a.ranking(qid) == b.ranking(qid)
        assert a.provenance[qid] == b.provenance[qid]
        np.testing.assert_allclose(list(a.scores[qid].values()), [b.scores[qid][d] for d in a.scores[qid]], atol=1e-5)
    assert DenseIndex(64).backend == 'numpy'                            # 'auto' (measured: see bench/bench_index.py)


def test_dense_save_load_roundtrip(tmp_path):
    units, vecs = random_corpus(5, n_docs=30, max_units=8)
    q = np.random.default_rng(6).standard_normal((5, vecs.shape[1])).astype(np.float32)
    ix = DenseIndex(vecs.shape[1]).add(units, vecs)
    ix.save(tmp_path / 'ix')
    assert not list((tmp_path / 'ix').glob('*.tmp'))
    qids = list('abcde')
    for mmap in (False, True):
        ix2 = DenseIndex.load(tmp_path / 'ix', mmap=mmap)
        assert ix2.search(qids, q, k=7) == ix.search(qids, q, k=7)
        assert ix2.index_bytes == ix.index_bytes
        assert sorted(u.unit_id for u in ix2.units) == sorted(u.unit_id for u in units)
    assert DenseIndex.load(tmp_path / 'ix', backend='faiss').search(qids, q, k=7).provenance == ix.search(qids, q, k=7).provenance
    with pytest.raises(ValueError, match='no saved DenseIndex'):
        DenseIndex.load(tmp_path)


def test_dense_input_errors():
    units, vecs = random_corpus(7, n_docs=3, max_units=2, dim=4)
    ix = DenseIndex(4).add(units, vecs)
    with pytest.raises(ValueError, match='duplicate unit ids'):
        ix.add(units[:1], vecs[:1])
    with pytest.raises(ValueError, match='NaN'):
        DenseIndex(4).add(units[:1], np.full((1, 4), np.nan))
    with pytest.raises(ValueError, match=r'must be \(n, 4\)'):
        ix.search(['q'], np.zeros((1, 5)))
    with pytest.raises(ValueError, match='duplicate query ids'):
        ix.search(['q', 'q'], np.zeros((2, 4)))
    assert DenseIndex(4).search(['q'], np.ones((1, 4))).scores == {'q': {}}
    assert len(ix.search(['q'], np.ones((1, 4)), k=50).scores['q']) == 3


def test_group_by_doc_keeps_first_appearance_order():
    order, starts, docs = group_by_doc(['x', 'y', 'x', 'z', 'y', 'x'])
    assert docs == ['x', 'y', 'z'] and order.tolist() == [0, 2, 5, 1, 4, 3] and starts.tolist() == [0, 3, 5]


# ---------------------------------------------------------------- BM25
WORDS = [f"w{i}" for i in range(300)]


def random_text_units(seed, n_docs=40):
    rng = np.random.default_rng(seed)
    p = 1 / np.arange(1, len(WORDS) + 1); p /= p.sum()                  # Zipf-like vocabulary
    units = []
    for d in range(n_docs):
        for i in range(int(rng.integers(1, 12))):
            units.append(Unit(f"doc{d}", f"doc{d}#{i}", text=' '.join(rng.choice(WORDS, int(rng.integers(5, 60)), p=p))))
    rng.shuffle(units)
    return units


def test_bm25_doc_max_equals_bm25s_on_units():
    import bm25s
    units = random_text_units(0)
    queries = [' '.join(np.random.default_rng(i).choice(WORDS[:120], 4)) for i in range(15)]
    ours = BM25Index().add(units).search([f"q{i}" for i in range(15)], queries, k=1000)
    ref = bm25s.BM25(k1=1.5, b=0.75, method='lucene')
    ref.index(bm25s.tokenize([u.text for u in units], stopwords='en', show_progress=False), show_progress=False)
    qtok = bm25s.tokenize(queries, stopwords='en', show_progress=False)
    res, sc = ref.retrieve(qtok, k=len(units), show_progress=False)
    for i in range(15):
        best = {}
        for j, s in zip(res[i], sc[i]):
            d = units[j].doc_id
            if s > 0 and (d not in best or s > best[d][0]): best[d] = (float(s), units[j].unit_id)
        got = ours.scores[f"q{i}"]
        assert set(got) == set(best) and len(best) > 0
        np.testing.assert_allclose([got[d] for d in best], [best[d][0] for d in best], rtol=1e-5)
        # provenance: the unit with the max score (ties possible only between identical-score units)
        for d in best:
            assert ours.provenance[f"q{i}"][d] in {units[j].unit_id for j, s in zip(res[i], sc[i])
                                                   if units[j].doc_id == d and abs(s - best[d][0]) < 1e-6}


def test_bm25_exact_term_unit_ranks_first():
    units = random_text_units(1)
    units.append(Unit('target', 'target#0', text='w3 w5 the quasiperiodic oscillation w7'))
    units.append(Unit('target', 'target#1', text='w1 w2 w3'))
    run = BM25Index().add(units).search(['q'], ['quasiperiodic oscillation'], k=5)
    assert run.ranking('q') == ['target'] and run.provenance['q']['target'] == 'target#0'


def test_bm25_save_load_and_size(tmp_path):
    units = random_text_units(2)
    ix = BM25Index(k1=1.2, b=0.6).add(units)
    qs = ['w1 w17 w40', 'w200 w3', 'nothing matches here']
    ix.save(tmp_path / 'bm')
    ix.save(tmp_path / 'bm')                                             # overwriting works
    ix2 = BM25Index.load(tmp_path / 'bm')
    assert (ix2.k1, ix2.b) == (1.2, 0.6)
    assert ix2.search(['a', 'b', 'c'], qs, k=10) == ix.search(['a', 'b', 'c'], qs, k=10)
    assert ix.search(['c'], qs[2:]).scores == {'c': {}}
    sc = ix._bm25.scores
    assert ix.index_bytes == sc['data'].nbytes + sc['indices'].nbytes + sc['indptr'].nbytes > 0


def test_bm25_optional_stemmer():
    try:
        import Stemmer  # noqa: F401
    except ImportError:
        assert BM25Index(stemmer='auto').stemmer is None
        with pytest.raises(ImportError, match='PyStemmer'):
            BM25Index(stemmer='english')
    else:
        ix = BM25Index(stemmer='english').add([Unit('a', 'a#0', text='running quickly'), Unit('b', 'b#0', text='walked')])
        assert ix.search(['q'], ['runs'], k=2).ranking('q') == ['a']


def test_bm25_empty_and_stopword_only_corpus():
    ix = BM25Index().add([Unit('a', 'a#0', text='the of and'), Unit('b', 'b#0', text='')])
    assert ix.search(['q'], ['the'], k=3).scores == {'q': {}} and ix.index_bytes == 0


# ---------------------------------------------------------------- fusion
def test_rrf_hand_computed():
    a = Run(scores={'q': {'d1': 9., 'd2': 8., 'd3': 7.}, 'r': {'x': 1.}}, provenance={'q': {'d1': 'd1#a', 'd2': 'd2#a', 'd3': 'd3#a'}}, name='A')
    b = Run(scores={'q': {'d3': .9, 'd1': .8, 'd4': .1}}, provenance={'q': {'d3': 'd3#b', 'd4': 'd4#b', 'd1': 'd1#b'}}, name='B')
    f = rrf_fuse([a, b], k=10)
    exp = {'d1': 1 / 11 + 1 / 12, 'd2': 1 / 12, 'd3': 1 / 13 + 1 / 11, 'd4': 1 / 13}
    assert f.scores['q'].keys() == exp.keys()
    for d, v in exp.items(): assert f.scores['q'][d] == pytest.approx(v)
    assert f.ranking('q') == ['d1', 'd3', 'd2', 'd4']
    assert f.provenance['q'] == {'d1': 'd1#a', 'd3': 'd3#b', 'd2': 'd2#a', 'd4': 'd4#b'}   # from the list ranking it best
    assert f.scores['r'] == {'x': pytest.approx(1 / 11)} and f.name == 'rrf(A+B)'
    w = rrf_fuse([a, b], k=10, weights=[2, 0.5], depth=2)
    assert w.scores['q'] == pytest.approx({'d1': 2 / 11 + 0.5 / 12, 'd2': 2 / 12, 'd3': 0.5 / 11})
    with pytest.raises(ValueError, match='weights'):
        rrf_fuse([a, b], weights=[1])


# ---------------------------------------------------------------- retrievers
TOY = [Unit('gw', 'gw#0', text='We report the observation of gravitational waves from a binary black hole merger.'),
       Unit('gw', 'gw#1', text='The detector is a laser interferometer with four-kilometre arms.'),
       Unit('nlp', 'nlp#0', text='Our language model is pretrained with masked token prediction and fine-tuned on GLUE.'),
       Unit('nlp', 'nlp#1', text='Table 2: accuracy of BERT variants on sentiment classification.'),
       Unit('bio', 'bio#0', text='CRISPR-Cas9 enables targeted editing of the genome in living cells.'),
       Unit('cmb', 'cmb#0', text='We map temperature anisotropies of the cosmic microwave background.')]
QS = [Query('q1', 'ripples in spacetime produced by colliding black holes', doc_ids=['gw']),
      Query('q2', 'tools for modifying DNA sequences', doc_ids=['bio']),
      Query('q3', 'how well does BERT classify sentiment', doc_ids=['nlp'])]


@pytest.mark.slow
def test_dense_retriever_minilm_with_cache(tmp_path):
    ret = make_retriever('dense', cache_dir=tmp_path)
    assert isinstance(ret, DenseRetriever) and ret.name == 'dense' and (ret.window, ret.tokenizer is ret.encoder.tokenizer) == (256, True)
    ret.index(TOY, progress=False)
    run = ret.search(QS, k=3)
    assert [run.ranking(q.id)[0] for q in QS] == ['gw', 'bio', 'nlp']
    assert run.provenance['q3']['nlp'] == 'nlp#1' and run.provenance['q1']['gw'] == 'gw#0'
    assert ret.index_bytes == len(TOY) * 384 * 4
    assert ret.cache.misses == len(TOY) + len(QS)
    ret.cache.reset_counters(); store, ret.store = ret.store, None      # without the saved index: the embedding cache serves
    ret.index(TOY, progress=False); run2 = ret.search(QS, k=3)
    assert (ret.cache.hits, ret.cache.misses) == (len(TOY) + len(QS), 0) and run2 == run
    ret.cache.reset_counters(); ret.store = store                        # with it: the index loads, no unit is looked up
    ret.index(TOY, progress=False)
    assert ret.cache.hits == ret.cache.misses == 0 and store.loaded >= 1 and ret.search(QS, k=3) == run
    hyb = make_retriever('hybrid', cache_dir=tmp_path)
    assert isinstance(hyb, HybridRetriever) and hyb.name == 'hybrid' and hyb.window == 256
    hyb.index(TOY, progress=False)
    h = hyb.search(QS, k=2)
    assert all(len(h.scores[q.id]) <= 2 for q in QS) and h.ranking('q1')[0] == 'gw'
    assert hyb.index_bytes == ret.index_bytes + hyb.retrievers[0].index_bytes


def test_bm25_retriever_and_specs():
    ret = make_retriever('bm25')
    assert isinstance(ret, BM25Retriever)
    ret.index(TOY, progress=False)
    run = ret.search(QS, k=3)
    assert run.ranking('q3')[0] == 'nlp' and run.provenance['q3']['nlp'] == 'nlp#1' and run.name == 'bm25'
    with pytest.raises(RuntimeError, match='index'):
        BM25Retriever().search(QS)
    for bad, why in (('colbert', "unknown kind 'colbert'"), ('dense:', "empty model after ':'"), ('hybrid:', "empty model after ':'"),
                     ('', 'is empty'), ('bm25?k1=x', 'is not a float')):
        with pytest.raises(ValueError, match=why):
            make_retriever(bad)


def test_dense_retriever_refuses_image_only_units(tmp_path):
    from docbench_nb.retrieval.encoders import as_encoder

    class Bow:
        name, dim = 'bow', 8
        fingerprint = 'bow-test'
        def encode(self, texts): return np.ones((len(texts), 8))
    ret = DenseRetriever(as_encoder(Bow()), cache=False)
    with pytest.raises(ValueError, match='image-only'):
        ret.index([Unit('a', 'a#0', kind='page', text='', images=['/x.png'])], progress=False)


@pytest.mark.slow
def test_approximate_indexes_on_real_minilm_vectors(shared_dir, tmp_path):
    "HNSW / IVF on MiniLM vectors of real LaTeX windows: IVF scanning every list equals exact, HNSW near it; settings persist."
    from docbench_nb.retrieval.encoders import HFTextEncoder
    from docbench_nb.context import RunContext
    texts, docs = [], []
    for tex in sorted((shared_dir/'corpus'/'papers').glob('*/*.tex'))[:30]:
        w = tex.read_text(errors='ignore').split()
        for j in range(0, min(len(w) - 60, 60 * 10), 60):
            texts.append(' '.join(w[j:j + 60])); docs.append(tex.parent.name)
    assert len(texts) >= 200
    enc = HFTextEncoder(ctx=RunContext(device='cpu'))
    V = enc.encode_units(texts, batch_size=32)
    units = [Unit(d, f"{d}#{i}") for i, d in enumerate(docs)]
    Q = V[::7] + 0.02 * np.random.default_rng(0).standard_normal((len(V[::7]), 384)).astype(np.float32)
    qids = [f"q{i}" for i in range(len(Q))]
    exact = DenseIndex(384).add(units, V).search(qids, Q, k=5)
    ivf = DenseIndex(384, index='ivf', nlist=8, nprobe=8).add(units, V)
    run = ivf.search(qids, Q, k=5)
    for q in qids:
        assert run.ranking(q) == exact.ranking(q)
        assert run.scores[q] == pytest.approx(exact.scores[q], abs=1e-5)
    hn = DenseIndex(384, index='hnsw', m=16, ef_search=64).add(units, V)
    r = hn.search(qids, Q, k=5)
    recall = np.mean([len(set(r.ranking(q)) & set(exact.ranking(q))) / len(exact.ranking(q)) for q in qids])
    assert recall >= 0.95, recall
    hn.save(tmp_path/'hn')
    back = DenseIndex.load(tmp_path/'hn')
    assert back.ann == hn.ann and back.ann['index'] == 'hnsw'
    assert [back.search(qids, Q, k=5).ranking(q) for q in qids] == [r.ranking(q) for q in qids]
    with pytest.raises(Exception, match="index='flat' is not one of"):
        make_retriever('dense?index=flat')
