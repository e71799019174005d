"A cache that checks itself: damaged vector shards, token shards and parsed papers are reported by path, dropped and recomputed."
import json, shutil, warnings
from pathlib import Path
import numpy as np
import pytest
from docbench_nb.cache import stage_dir, cache_verify, cache_clear, load_npy_checked, file_sha256
from docbench_nb.retrieval.encoders import EmbeddingCache, embed_cached, text_key
from docbench_nb.retrieval.late import TokenCache
from docbench_nb.latex.corpus import load_papers, source_key


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
    from docbench_nb.evaluation.core import evaluate
    from docbench_nb.demo import demo_corpus_dir, demo_queries_path
    run = lambda: evaluate(demo_corpus_dir(), demo_queries_path(), retriever='dense', cache_dir=tmp_path, progress=False)
    clean = run()
    shards = sorted(stage_dir('embeddings', tmp_path).rglob('*.vecs.npy'))
    np.save(shards[0], np.random.default_rng(0).random(np.load(shards[0]).shape, dtype=np.float32))
    res, msgs = _warned(run)
    assert any(str(shards[0]) in m for m in msgs)
    assert res['overall'] == clean['overall']


def test_cache_never_acts_outside_its_root(tmp_path):
    "A stage folder that is a link, and a link entry inside a stage: reported and removed as links; the targets are untouched."
    import os
    from docbench_nb.cli import main
    outside = tmp_path / 'precious'; outside.mkdir()
    (outside / 'notes.json').write_text('{not json'); (outside / 'vec.npy').write_bytes(b'')
    cache = tmp_path / 'cache'; cache.mkdir()
    os.symlink(outside, cache / 'papers')
    (cache / 'ocr').mkdir(); os.symlink(outside / 'notes.json', cache / 'ocr' / 'e.json')
    rep = cache_verify(cache)                                          # plain verify reads nothing through the links
    assert sorted((b['stage'], b['problem']) for b in rep['bad']) == [('ocr', 'is a symbolic link (not followed)'),
                                                                       ('papers', 'is a symbolic link (not followed)')]
    with pytest.raises(OSError, match='is a symbolic link'): stage_dir('papers', cache)
    assert main(['--cache-dir', str(cache), 'cache', 'verify', '--fix']) == 0
    assert sorted(p.name for p in outside.iterdir()) == ['notes.json', 'vec.npy']      # nothing outside deleted
    assert not os.path.lexists(cache / 'papers') and not os.path.lexists(cache / 'ocr' / 'e.json')
    os.symlink(outside, cache / 'renders')
    assert cache_clear(cache, kinds=['renders']) == {'renders': 0} and not os.path.lexists(cache / 'renders')
    assert sorted(p.name for p in outside.iterdir()) == ['notes.json', 'vec.npy']


def test_atomic_writes_get_normal_file_modes(tmp_path):
    import os
    from docbench_nb.cache import atomic_write, atomic_write_json, atomic_save_npy
    old = os.umask(0o022)
    try:
        files = [atomic_write(tmp_path / 'a.txt', 'x'), atomic_write_json(tmp_path / 'b.json', {}), atomic_save_npy(tmp_path / 'c.npy', np.zeros(2))]
        assert [os.stat(f).st_mode & 0o777 for f in files] == [0o644] * 3
        os.umask(0o077)
        assert os.stat(atomic_write(tmp_path / 'd.txt', 'y')).st_mode & 0o777 == 0o600   # the umask still applies
    finally: os.umask(old)


@pytest.mark.timeout(60)                                               # a regression hangs on the FIFO: fail instead
def test_cache_verify_reports_a_fifo_and_never_opens_it(tmp_path, capsys):
    import os
    from docbench_nb.cli import main
    cache = tmp_path / 'cache'; (cache / 'ocr').mkdir(parents=True); (cache / 'embeddings' / 'fp').mkdir(parents=True)
    os.mkfifo(cache / 'ocr' / 'k.json'); os.mkfifo(cache / 'embeddings' / 'fp' / 'a.npy')
    rep = cache_verify(cache)
    assert sorted((b['stage'], Path(b['path']).name, b['problem']) for b in rep['bad']) == [
        ('embeddings', 'a.npy', 'is not a regular file'), ('ocr', 'k.json', 'is not a regular file')]
    assert main(['--cache-dir', str(cache), 'cache', 'verify']) == 1 and 'k.json: is not a regular file' in capsys.readouterr().out
    assert main(['--cache-dir', str(cache), 'cache', 'verify', '--fix']) == 0
    assert not os.path.lexists(cache / 'ocr' / 'k.json') and not os.path.lexists(cache / 'embeddings' / 'fp' / 'a.npy')


@pytest.mark.timeout(60)
def test_link_entries_deeper_in_a_stage_are_not_followed(tmp_path):
    "`ocr/k.json`, an embeddings shard and a checksum sidecar that are links to outside files: never read, removed as links."
    import os
    from docbench_nb.cache import read_json_entry, atomic_save_npy
    outside = tmp_path / 'outside'; outside.mkdir()
    (outside / 'secret.json').write_text('{"text": "outside"}'); atomic_save_npy(outside / 'v.npy', np.ones(3, np.float32))
    ocr = stage_dir('ocr', tmp_path / 'cache'); ocr.mkdir(parents=True)
    emb = stage_dir('embeddings', tmp_path / 'cache') / 'fp'; emb.mkdir(parents=True)
    os.symlink(outside / 'secret.json', ocr / 'k.json'); os.symlink(outside / 'v.npy', emb / 'a.npy')
    atomic_save_npy(emb / 'b.npy', np.ones(3, np.float32))              # a real shard whose sidecar is a link (to a matching sum)
    os.unlink(emb / 'b.npy.sha256'); os.symlink(outside / 'v.npy.sha256', emb / 'b.npy.sha256')
    os.mkfifo(emb / 'c.npy')                                            # a FIFO entry: not waited on
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        assert read_json_entry(ocr / 'k.json') is None
        assert [load_npy_checked(emb / f) for f in ('a.npy', 'b.npy', 'c.npy')] == [None] * 3
    msgs = [str(x.message) for x in w]
    assert msgs == [f"cache entry {ocr / 'k.json'} is a symbolic link (not followed): removed, will be recomputed",
                    f"cache entry {emb / 'a.npy'} is a symbolic link (not followed): dropped, will be recomputed",
                    f"cache entry {emb / 'b.npy'} has a checksum file that is a symbolic link (not followed): dropped, will be recomputed",
                    f"cache entry {emb / 'c.npy'} is not a regular file: dropped, will be recomputed"]
    assert not any('outside' in m.split(': ', 1)[1] for m in msgs)
    assert list(ocr.iterdir()) == [] and list(emb.iterdir()) == []     # the links went, as links
    assert sorted(p.name for p in outside.iterdir()) == ['secret.json', 'v.npy', 'v.npy.sha256']


def test_no_write_or_read_through_a_linked_folder_inside_a_stage(tmp_path):
    "`renders/imported` (any folder below a stage) a link to an outside folder: writes are refused, reads not made."
    import os
    from docbench_nb.cache import atomic_write, atomic_write_json, atomic_save_npy, read_json_entry
    outside = tmp_path / 'outside'; outside.mkdir(); (outside / 'k.json').write_text('{"text": "outside"}')
    atomic_save_npy(outside / 'v.npy', np.ones(2))
    renders = stage_dir('renders', tmp_path / 'cache'); renders.mkdir(parents=True)
    os.symlink(outside, renders / 'imported')
    for write in (lambda: atomic_write(renders / 'imported' / 'ab' / 'x.png', b'png'),
                  lambda: atomic_write_json(renders / 'imported' / 'k.json', {}),
                  lambda: atomic_save_npy(renders / 'imported' / 'w.npy', np.ones(2))):
        with pytest.raises(OSError, match=r"cache write .* refused: it is reached through a link that leads out of the cache stage folder"):
            write()
    assert sorted(p.name for p in outside.iterdir()) == ['k.json', 'v.npy', 'v.npy.sha256']   # no folder, no temporary file made there
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        assert read_json_entry(renders / 'imported' / 'k.json') is None and load_npy_checked(renders / 'imported' / 'v.npy') is None
    assert all('leads out of the cache stage folder' in str(x.message) and str(x.message).endswith('not read') for x in w) and len(w) == 2
    assert sorted(p.name for p in outside.iterdir()) == ['k.json', 'v.npy', 'v.npy.sha256']   # not removed either
    # a stage folder itself a link: refused with the way to put the cache elsewhere
    os.symlink(outside, tmp_path / 'cache' / 'ocr')
    with pytest.raises(OSError, match='use `--cache-dir DIR` or `DOCBENCH_CACHE=DIR`'): stage_dir('ocr', tmp_path / 'cache')
    # outside any cache root, links are the caller's business (a user's output folder may be a link)
    os.symlink(outside, tmp_path / 'out')
    atomic_write(tmp_path / 'out' / 'r.txt', 'ok'); assert (outside / 'r.txt').read_text() == 'ok'
