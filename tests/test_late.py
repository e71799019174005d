"Late interaction: exact MaxSim index against brute force, storage accounting, persistence, MiniLM token retrieval."
import json, re, shutil, zlib
from pathlib import Path
import numpy as np
import pytest
from docbench_nb.records import Unit, Query
from docbench_nb.retrieval.late import (maxsim, pool_tokens, LateInteractionIndex, TokenCache, embed_tokens_cached,
                              HFTokenEncoder, LateRetriever)
from docbench_nb.retrieval.registry import make_retriever


def _rand_mats(rng, n, dim, max_tokens=40):
    ms = [rng.standard_normal((int(rng.integers(1, max_tokens)), dim)).astype(np.float32) for _ in range(n)]
    return [m / np.linalg.norm(m, axis=1, keepdims=True) for m in ms]


def _corpus(seed=0, n_docs=25, dim=12):
    rng = np.random.default_rng(seed)
    spec = {f"d{i}": int(rng.integers(1, 6)) for i in range(n_docs)}
    units = [Unit(d, f"{d}#{j}") for d, n in spec.items() for j in range(n)]
    order = rng.permutation(len(units))                       # units of one doc arrive scattered
    units = [units[i] for i in order]
    mats = _rand_mats(rng, len(units), dim)
    return rng, spec, units, mats


@pytest.mark.parametrize('block_bytes', [None, 4 * 12 * 30, 1])
def test_maxsim_index_equals_brute_force(block_bytes):
    rng, spec, units, mats = _corpus()
    by_id = {u.unit_id: m for u, m in zip(units, mats)}
    ix = LateInteractionIndex(12).add(units[:30], mats[:30]).add(units[30:], mats[30:])
    queries = _rand_mats(rng, 9, 12, max_tokens=20)
    run = ix.search([f"q{i}" for i in range(9)], queries, k=len(spec), block_bytes=block_bytes)
    for i, q in enumerate(queries):
        brute = {d: [maxsim(q, by_id[f"{d}#{j}"]) for j in range(n)] for d, n in spec.items()}
        # MaxSim itself, written out once more without numpy reductions over both axes
        u0 = by_id[f"{next(iter(spec))}#0"]
        assert maxsim(q, u0) == pytest.approx(sum(max(float(a @ b) for b in u0) for a in q), abs=1e-4)
        got = run.scores[f"q{i}"]
        assert set(got) == set(spec)
        for d, s in brute.items():
            assert got[d] == pytest.approx(max(s), abs=1e-4)
            assert run.provenance[f"q{i}"][d] == f"{d}#{int(np.argmax(s))}"
        assert run.ranking(f"q{i}") == sorted(spec, key=lambda d: (max(brute[d]), d), reverse=True)


def test_top_k_and_unit_scores_shape():
    rng, spec, units, mats = _corpus(1)
    ix = LateInteractionIndex(12).add(units, mats)
    q = _rand_mats(rng, 3, 12)
    full = ix.search(['a', 'b', 'c'], q, k=len(spec))
    top = ix.search(['a', 'b', 'c'], q, k=5)
    for qid in 'abc':
        assert top.ranking(qid) == full.ranking(qid)[:5]
    assert ix.unit_scores(q).shape == (len(units), 3)
    assert ix.n_docs == len(spec) and len(ix) == len(units)


def test_index_bytes_counts_every_token_vector():
    _, _, units, mats = _corpus(2)
    n_tokens = sum(len(m) for m in mats)
    assert LateInteractionIndex(12).add(units, mats).index_bytes == n_tokens * 12 * 4
    assert LateInteractionIndex(12, 'float16').add(units, mats).index_bytes == n_tokens * 12 * 2
    assert LateInteractionIndex(12).index_bytes == 0


def test_float16_scores_close_to_float32():
    rng, spec, units, mats = _corpus(3)
    q = _rand_mats(rng, 4, 12)
    a = LateInteractionIndex(12).add(units, mats).search(list('abcd'), q, k=len(spec))
    b = LateInteractionIndex(12, 'float16').add(units, mats).search(list('abcd'), q, k=len(spec))
    for qid in 'abcd':
        for d in spec: assert b.scores[qid][d] == pytest.approx(a.scores[qid][d], abs=0.03)


def test_save_load_roundtrip(tmp_path):
    rng, spec, units, mats = _corpus(4)
    ix = LateInteractionIndex(12, 'float16').add(units, mats)
    q = _rand_mats(rng, 2, 12)
    ix.save(tmp_path/'ix')
    for mmap in (False, True):
        ix2 = LateInteractionIndex.load(tmp_path/'ix', mmap=mmap)
        assert (ix2.dtype, ix2.index_bytes, ix2.n_docs) == ('float16', ix.index_bytes, len(spec))
        assert ix2.search(['x', 'y'], q, k=7) == ix.search(['x', 'y'], q, k=7)
    with pytest.raises(ValueError, match='no saved LateInteractionIndex'):
        LateInteractionIndex.load(tmp_path/'missing')
    meta = json.loads((tmp_path/'ix'/'index.json').read_text()); meta['n_tokens'] += 1
    (tmp_path/'ix'/'index.json').write_text(json.dumps(meta))
    with pytest.raises(ValueError, match='disagrees'):
        LateInteractionIndex.load(tmp_path/'ix')


def test_add_rejects_bad_input():
    ix = LateInteractionIndex(4)
    u = [Unit('d', 'd#0')]
    with pytest.raises(ValueError, match='no token vectors'): ix.add(u, [np.zeros((0, 4))])
    with pytest.raises(ValueError, match=r'must be \(n, 4\)'): ix.add(u, [np.zeros((3, 5))])
    with pytest.raises(ValueError, match='NaN'): ix.add(u, [np.full((2, 4), np.nan)])
    with pytest.raises(ValueError, match='2 matrices'): ix.add(u, [np.ones((1, 4))] * 2)
    ix.add(u, [np.ones((1, 4))])
    with pytest.raises(ValueError, match='duplicate unit ids'): ix.add(u, [np.ones((1, 4))])
    with pytest.raises(ValueError, match='k must be'): ix.search(['q'], [np.ones((1, 4))], k=0)
    with pytest.raises(ValueError, match='duplicate query ids'): ix.search(['q', 'q'], [np.ones((1, 4))] * 2)


def test_pool_tokens():
    rng = np.random.default_rng(5)
    x = _rand_mats(rng, 1, 8, max_tokens=30)[0]
    n = len(x)
    for f in (2, 3, 5):
        p = pool_tokens(x, f)
        assert p.shape == (-(-n // f), 8)
        np.testing.assert_allclose(np.linalg.norm(p, axis=1), 1, atol=1e-5)
        h = pool_tokens(x, f, 'hierarchical')
        assert 1 <= len(h) <= max(1, n // f)
    # hierarchical pooling merges near-duplicate tokens wherever they are; sequential pooling cannot
    base = _rand_mats(rng, 1, 8, max_tokens=2)[0]
    base = np.vstack([base, _rand_mats(rng, 1, 8)[0][:1]])     # two distinct directions
    x2 = np.vstack([base[0], base[1], base[0] + 1e-4, base[1] + 1e-4]).astype(np.float32)
    h2 = pool_tokens(x2, 2, 'hierarchical')
    np.testing.assert_allclose(np.sort(np.abs(h2 @ (base / np.linalg.norm(base, axis=1, keepdims=True)).T).max(1)), [1, 1], atol=1e-3)
    with pytest.raises(ValueError): pool_tokens(x, 0)
    with pytest.raises(ValueError): pool_tokens(x, 2, 'kmeans')


def test_token_cache_roundtrip(tmp_path):
    class Fake:
        "Token encoder without weights: one row per word, deterministic."
        name, dim, fingerprint = 'fake', 6, 'fake-v1'
        calls = 0
        def _m(self, t):
            return np.stack([np.random.default_rng(zlib.crc32(w.encode())).standard_normal(6) for w in (t.split() or [''])]).astype(np.float32)
        def encode_units(self, texts, batch_size=32, progress=False): Fake.calls += 1; return [self._m(t) for t in texts]
        encode_queries = encode_units
    texts = ['a b c', 'd e', 'a b c', 'f']
    c = TokenCache(tmp_path/'tok', dtype='float32')
    m1 = embed_tokens_cached(Fake(), texts, cache=c, progress=False, shard_size=2)
    assert (c.misses, c.embedded, Fake.calls) == (3, 3, 2)
    c2 = TokenCache(tmp_path/'tok')
    m2 = embed_tokens_cached(Fake(), texts, cache=c2, progress=False)
    assert (c2.hits, c2.misses) == (3, 0)
    for a, b in zip(m1, m2): np.testing.assert_array_equal(a, b)
    assert [len(m) for m in m2] == [3, 2, 3, 1]


@pytest.fixture(scope='module')
def minilm_tokens():
    return HFTokenEncoder()


@pytest.mark.slow
def test_token_encoder_windows_batches_and_projection(minilm_tokens):
    enc = minilm_tokens
    long = ' '.join(f"galaxy{i} cluster" for i in range(200))
    ids = enc.tokenizer(long, add_special_tokens=False, verbose=False)['input_ids']
    assert len(ids) > 2 * enc.max_length
    full = enc.encode_units([long])[0]
    assert full.shape == (len(ids), 384)                                  # every token of every window kept
    np.testing.assert_allclose(np.linalg.norm(full, axis=1), 1, atol=1e-5)
    texts = ['Dark energy drives the accelerated expansion.', 'Short.', 'Proteins fold into three-dimensional structures!']
    together = enc.encode_units(texts, batch_size=3)
    for t, m in zip(texts, together): np.testing.assert_allclose(enc.encode_units([t])[0], m, atol=1e-4)
    assert together[1].shape[0] == 1                                     # 'short' — '.' and [CLS]/[SEP] dropped
    q = enc.encode_queries(['word ' * 200])[0]
    assert len(q) == enc.query_max_length - 2                            # queries are truncated, not windowed


@pytest.mark.slow
def test_late_retriever_minilm_ranks_right_doc_first(tmp_path):
    units = [Unit('gw', 'gw#0', text='We report gravitational waves from a binary black hole merger.'),
             Unit('gw', 'gw#1', text='The laser interferometer has arms four kilometres long.'),
             Unit('bio', 'bio#0', text='CRISPR-Cas9 allows targeted editing of the genome in living cells.'),
             Unit('ml', 'ml#0', text='We pretrain a transformer language model with masked token prediction.'),
             Unit('cmb', 'cmb#0', text='Temperature anisotropies of the cosmic microwave background are mapped.')]
    qs = [Query('q1', 'how long are the interferometer arms'), Query('q2', 'editing genomes of cells'),
          Query('q3', 'masked language model pretraining')]
    r = make_retriever('late', cache_dir=tmp_path)
    assert (r.name, r.tokenizer is r.encoder.tokenizer) == ('late', True)
    r.index(units, progress=False)
    run = r.search(qs, k=5)
    assert [run.ranking(q.id)[0] for q in qs] == ['gw', 'bio', 'ml']
    assert run.provenance['q1']['gw'] == 'gw#1'
    mats = embed_tokens_cached(r.encoder, [u.text for u in units], cache=False)
    assert r.index_bytes == sum(len(m) for m in mats) * 384 * 4
    r2 = make_retriever('late', cache_dir=tmp_path)
    r2.index(units, progress=False)
    assert (r2.store.loaded, r2.store.built, r2.cache.hits, r2.cache.misses) == (1, 0, 0, 0)   # the saved index came from disk
    for q in qs:
        assert r2.search([q], k=5).ranking(q.id) == run.ranking(q.id)
    with pytest.raises(ValueError, match='OCR them first'):
        r.index([Unit('p', 'p#page', kind='page', images=['/x.png'])], progress=False)


def _words(tex):
    body = tex.split('\\begin{document}', 1)[-1]
    body = re.sub(r'(?<!\\)%.*', ' ', body)
    body = re.sub(r'\\[a-zA-Z@]+\*?', ' ', body)
    return [w for w in re.findall(r"[A-Za-z][A-Za-z\-']+", body) if len(w) > 2]


@pytest.mark.slow
def test_late_retriever_on_real_papers(shared_dir, tmp_path):
    "Units from the raw LaTeX of real papers; a 20-word span of a unit must bring its paper to rank 1."
    manifest = [json.loads(l) for l in (shared_dir/'corpus'/'manifest.jsonl').read_text().splitlines() if l.strip()]
    units, queries = [], []
    for rec in manifest[:8]:
        path = shared_dir/'corpus'/'papers'/rec['id']/rec['main_tex']
        if not path.is_file(): continue
        w = _words(path.read_text(errors='replace'))
        if len(w) < 800: continue
        mid = len(w) // 2
        for j in range(3):
            units.append(Unit(rec['id'], f"{rec['id']}#{j}", text=' '.join(w[mid + 120 * j: mid + 120 * (j + 1)])))
        queries.append(Query(f"q-{rec['id']}", ' '.join(w[mid + 140: mid + 160]), doc_ids=[rec['id']]))
    assert len(queries) >= 4
    r = LateRetriever(cache=TokenCache(tmp_path/'tok'))
    r.index(units, progress=False)
    run = r.search(queries, k=3)
    hits = sum(run.ranking(q.id)[0] == q.doc_ids[0] for q in queries)
    assert hits >= len(queries) - 1, {q.id: run.ranking(q.id) for q in queries}
    for q in queries:
        if run.ranking(q.id)[0] == q.doc_ids[0]: assert run.provenance[q.id][q.doc_ids[0]] == f"{q.doc_ids[0]}#1"


@pytest.mark.slow
def test_chunked_index_and_mmap_identical_on_real_papers(shared_dir, tmp_path, monkeypatch):
    """Streaming `LateRetriever.index` (small chunks, preallocated merge) and a memory-mapped reload give the same ranking
    and scores as one in-memory `add` of all matrices."""
    import docbench_nb.retrieval.late as late
    manifest = [json.loads(l) for l in (shared_dir/'corpus'/'manifest.jsonl').read_text().splitlines() if l.strip()]
    units, queries = [], []
    for rec in manifest[:10]:
        path = shared_dir/'corpus'/'papers'/rec['id']/rec['main_tex']
        if not path.is_file(): continue
        w = _words(path.read_text(errors='replace'))
        if len(w) < 600: continue
        units += [Unit(rec['id'], f"{rec['id']}#{j}", text=' '.join(w[80 * j: 80 * (j + 1)])) for j in range(4)]
        queries.append(Query(f"q-{rec['id']}", ' '.join(w[250:265])))
    units = units[1::2] + units[0::2]                                         # docs arrive scattered
    assert len(queries) >= 4
    r = LateRetriever(cache=TokenCache(tmp_path/'tok'))
    monkeypatch.setattr(late, '_INDEX_CHUNK', 5)
    r.index(units, progress=False)
    mats = embed_tokens_cached(r.encoder, [u.text for u in units], cache=r.cache)
    ref = LateInteractionIndex(384).add(units, mats)                          # one in-memory add of everything
    qm = embed_tokens_cached(r.encoder, [q.text for q in queries], 'query', cache=r.cache)
    qids = [q.id for q in queries]
    a, b = r._index.search(qids, qm, k=10), ref.search(qids, qm, k=10)
    assert [u.unit_id for u in r._index.units] == [u.unit_id for u in ref.units]
    np.testing.assert_array_equal(r._index.tokens, ref.tokens)
    for q in qids:
        assert a.ranking(q) == b.ranking(q) and a.scores[q] == b.scores[q] and a.provenance[q] == b.provenance[q]
    r._index.save(tmp_path/'ix')
    mm = LateInteractionIndex.load(tmp_path/'ix', mmap=True)
    assert isinstance(mm.tokens, np.memmap)
    c = mm.search(qids, qm, k=10, block_bytes=1 << 16)                         # small blocks over the memory map
    for q in qids:
        assert c.ranking(q) == a.ranking(q)
        assert c.scores[q] == pytest.approx(a.scores[q], abs=1e-5)


# ---- ColBERT / PyLate checkpoints: equal to PyLate's own vectors and scores --------------------------------------
FIXTURES = Path(__file__).resolve().parent / 'fixtures'

def test_colbert_checkpoint_equals_pylate():
    "Token vectors (shapes included) and MaxSim scores of the tiny PyLate checkpoint equal PyLate's to 1e-5."
    from docbench_nb.retrieval.late import token_encoder, ColBERTEncoder
    ref = np.load(FIXTURES / 'tiny-colbert-ref.npz'); t = json.loads(str(ref['texts']))
    enc = token_encoder(str(FIXTURES / 'tiny-colbert'))
    assert isinstance(enc, ColBERTEncoder) and enc.dim == 8 and enc.query_length == 12
    D, Q = enc.encode_units(t['docs'], batch_size=2), enc.encode_queries(t['queries'], batch_size=3)
    for i, x in enumerate(D):
        assert x.shape == ref[f'doc{i}'].shape, i                       # skiplist and [D] marker as PyLate keeps them
        np.testing.assert_allclose(x, ref[f'doc{i}'], atol=1e-5)
    for i, x in enumerate(Q):
        assert x.shape == (12, 8)                                         # [Q] + text + [MASK] expansion to query_length
        np.testing.assert_allclose(x, ref[f'query{i}'], atol=1e-5)
    S = np.array([[(q @ d.T).max(1).sum() for d in D] for q in Q])
    np.testing.assert_allclose(S, ref['scores'], atol=1e-5)

def test_colbert_spec_through_the_registry_and_refusals(tmp_path):
    "`late:FOLDER` on a ColBERT checkpoint uses its projection; options it cannot honour and plain hidden states are refused."
    from docbench_nb.retrieval.registry import make_retriever
    from docbench_nb.retrieval.late import HFTokenEncoder
    r = make_retriever(f"late:{FIXTURES / 'tiny-colbert'}", cache_dir=tmp_path)
    assert type(r.encoder).__name__ == 'ColBERTEncoder' and r.encoder.dim == 8 and r.window == 37     # 40 kept by PyLate less [CLS], [D], [SEP]
    with pytest.raises(ValueError, match='do not apply to a ColBERT checkpoint'):
        make_retriever(f"late:{FIXTURES / 'tiny-colbert'}?dim=4", cache_dir=tmp_path)
    with pytest.raises(ValueError, match='refuses rather than approximate'):
        HFTokenEncoder(str(FIXTURES / 'tiny-colbert'))
    bad = tmp_path / 'act'; shutil.copytree(FIXTURES / 'tiny-colbert', bad)
    cfg = json.loads((bad / '1_Dense' / 'config.json').read_text()); cfg['activation_function'] = 'torch.nn.modules.activation.Tanh'
    (bad / '1_Dense' / 'config.json').write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match='identity only'):
        make_retriever(f'late:{bad}', cache_dir=tmp_path)
