"A cache that checks itself: damaged vector shards, token shards and parsed papers are reported by path, dropped and recomputed."
import json, shutil, warnings
from pathlib import Path
import numpy as np
import pytest
from docbench_nb.cache import stage_dir, cache_verify, cache_clear, load_npy_checked, file_sha256
from docbench_nb.encoders import EmbeddingCache, embed_cached, text_key
from docbench_nb.late import TokenCache
from docbench_nb.evaluation import load_papers, source_key


class HashEncoder:
    "Deterministic encoder (vectors seeded by the text) standing in for a model: the cache logic is what is tested."
    name, dim, tokenizer, max_length, fingerprint = 'hash', 16, None, 512, 'hash-v1'
    def __init__(self): self.seen = []
    def _enc(self, texts):
        self.seen += list(texts)
        return np.stack([np.random.default_rng(int(text_key('x', t)[:8], 16)).standard_normal(16) for t in texts]).astype(np.float32)
    def encode_units(self, texts, batch_size=32, progress=False): return self._enc(texts)
    def encode_queries(self, texts, batch_size=32, progress=False): return self._enc(texts)


@pytest.fixture(scope='module')
def paragraphs(shared_papers, tmp_path_factory):
    papers, _ = load_papers(shared_papers[:3], cache_dir=tmp_path_factory.mktemp('c'), progress=False, workers=1)
    return [p.span_text(q.span) for p in papers for q in p.paragraphs][:120]


def _warned(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter('always'); out = fn()
    return out, [str(c.message) for c in caught]


@pytest.mark.parametrize('damage', ['random_floats', 'zero_bytes', 'truncated', 'nan'])
def test_damaged_vector_shard_is_reported_dropped_and_recomputed(paragraphs, tmp_path, damage):
    clean = embed_cached(HashEncoder(), paragraphs, cache=EmbeddingCache(tmp_path), shard_size=32, progress=False)
    shard = sorted((tmp_path / 'hash-v1').glob('*.vecs.npy'))[1]
    n = np.load(shard).shape
    if damage == 'random_floats': np.save(shard, np.random.default_rng(1).random(n, dtype=np.float32))
    elif damage == 'zero_bytes': shard.write_bytes(b'')
    elif damage == 'truncated': shard.write_bytes(shard.read_bytes()[:200])
    else:
        a = np.load(shard); a[3, 2] = np.nan; np.save(shard, a); Path(f'{shard}.sha256').unlink()   # no checksum to go by
    enc = HashEncoder()
    out, msgs = _warned(lambda: embed_cached(enc, paragraphs, cache=EmbeddingCache(tmp_path), shard_size=32, progress=False))
    assert any(str(shard) in m and 'dropped' in m for m in msgs), msgs
    np.testing.assert_array_equal(out, clean)                            # the result equals the clean run
    assert 0 < len(enc.seen) <= 32                                      # only the damaged shard was embedded again
    _, msgs = _warned(lambda: [load_npy_checked(f) for f in sorted(tmp_path.rglob('*.npy'))])
    assert msgs == [] and shard.exists()                                 # the recomputed shard was stored again, clean


def test_damaged_token_shard(paragraphs, tmp_path):
    tc = TokenCache(tmp_path)
    mats = [np.full((1 + i % 5, 4), i, np.float32) for i in range(40)]
    keys = [text_key('unit', t) for t in paragraphs[:40]]
    tc.put('fp', keys[:20], mats[:20]); tc.put('fp', keys[20:], mats[20:])
    tok = sorted((tmp_path / 'fp').glob('*.tok.npy'))[0]
    a = np.load(tok); np.save(tok, np.random.default_rng(0).random(a.shape).astype(a.dtype))
    got, msgs = _warned(lambda: TokenCache(tmp_path).lookup('fp', keys))
    assert any(str(tok) in m for m in msgs) and len(got) == 20           # the good shard is still used
    for k, m in zip(keys, mats):
        if k in got: np.testing.assert_array_equal(got[k], m)


def test_truncated_paper_entry_names_the_file(shared_papers, tmp_path):
    srcs = [str(p) for p in shared_papers[:3]]
    clean, _ = load_papers(srcs, cache_dir=tmp_path, progress=False, workers=1)
    f = stage_dir('papers', tmp_path) / f'{source_key(srcs[1])}.json'
    f.write_text(f.read_text()[:1000])
    rep = cache_verify(tmp_path)
    assert [b['path'] for b in rep['bad']] == [str(f)] and rep['by_stage']['papers'] == 3
    (again, _), msgs = _warned(lambda: load_papers(srcs, cache_dir=tmp_path, progress=False, workers=1))
    assert any(str(f) in m for m in msgs)
    strip = lambda p: {k: v for k, v in p.to_dict().items() if k != 'meta'}
    assert [strip(p) for p in again] == [strip(p) for p in clean]
    assert cache_verify(tmp_path)['bad'] == []
    freed = cache_clear(tmp_path, kinds=['papers'])
    assert freed['papers'] > 0 and not stage_dir('papers', tmp_path).exists()


@pytest.mark.slow
def test_damaged_dense_cache_gives_the_clean_result(tmp_path):
    from docbench_nb.evaluation import evaluate
    from docbench_nb.demo import demo_corpus_dir, demo_queries_path
    run = lambda: evaluate(demo_corpus_dir(), demo_queries_path(), retriever='dense', cache_dir=tmp_path, progress=False)
    clean = run()
    shards = sorted(stage_dir('embeddings', tmp_path).rglob('*.vecs.npy'))
    np.save(shards[0], np.random.default_rng(0).random(np.load(shards[0]).shape, dtype=np.float32))
    res, msgs = _warned(run)
    assert any(str(shards[0]) in m for m in msgs)
    assert res['overall'] == clean['overall']
