"""Late interaction's saved index: the token matrix (one memory-mapped array + offsets) keyed by units, encoder
fingerprint, dimension, precision and image contents; a warm rerun loads it (no encoding, no token-cache read) with
identical results per query; a damaged file is named, removed and rebuilt."""
import json
import numpy as np
import pytest
from PIL import Image
from docbench_nb.cache import file_sha256
from docbench_nb.records import Unit, Query
from docbench_nb.evaluation.core import evaluate_units
from docbench_nb.retrieval.late import HFTokenEncoder, LateRetriever, TokenCache
from docbench_nb.retrieval.unit_index import IndexStore

TEXTS = {'gw': ['We report gravitational waves from a binary black hole merger.',
                'The laser interferometer has arms four kilometres long.'],
         'bio': ['CRISPR-Cas9 allows targeted editing of the genome in living cells.',
                 'Protein expression was measured by western blot.'],
         'ml': ['We pretrain a transformer language model with masked token prediction.'],
         'cmb': ['Temperature anisotropies of the cosmic microwave background are mapped.',
                 'The polarization power spectrum constrains the optical depth.']}
UNITS = [Unit(d, f'{d}#{j}', text=t) for d, ts in TEXTS.items() for j, t in enumerate(ts)][::-1]     # documents arrive scattered
QS = [Query('q1', 'how long are the interferometer arms', ['gw']), Query('q2', 'editing genomes of cells', ['bio']),
      Query('q3', 'masked language model pretraining', ['ml']), Query('q4', 'polarization spectrum optical depth', ['cmb'])]


@pytest.fixture(scope='module')
def enc():
    return HFTokenEncoder()                      # the bundled MiniLM, loaded once


def spy_encode(monkeypatch, enc):
    calls, orig = [], enc.encode_units
    monkeypatch.setattr(enc, 'encode_units', lambda texts, *a, **k: calls.append(len(texts)) or orig(texts, *a, **k))
    return calls


def test_warm_rerun_loads_memory_mapped_with_identical_results(enc, tmp_path, monkeypatch):
    calls = spy_encode(monkeypatch, enc)
    cold = LateRetriever(enc, cache=TokenCache(tmp_path / 'tok'), store=IndexStore(tmp_path / 'indexes'))
    cold.index(UNITS, progress=False)
    assert sum(calls) == len(UNITS) and (cold.store.built, cold.store.loaded) == (1, 0)
    saved = sorted(p.name for p in (tmp_path / 'indexes' / 'late').rglob('*') if p.is_file())
    assert saved == ['manifest.json', 'offsets.npy', 'tokens.npy']
    run = cold.search(QS, k=4)
    assert [run.ranking(q.id)[0] for q in QS] == ['gw', 'bio', 'ml', 'cmb'] and run.provenance['q1']['gw'] == 'gw#1'
    # warm: a fresh retriever and an empty token cache: the saved index is loaded, nothing encoded or looked up
    warm = LateRetriever(enc, cache=TokenCache(tmp_path / 'tok-empty'), store=IndexStore(tmp_path / 'indexes'))
    warm.index(UNITS, progress=False)
    assert sum(calls) == len(UNITS) and (warm.store.built, warm.store.loaded) == (0, 1)
    assert (warm.cache.hits, warm.cache.misses) == (0, 0)                                    # no unit matrix read from any cache
    assert isinstance(warm._index.tokens, np.memmap) and warm.index_bytes == cold.index_bytes
    again = warm.search(QS, k=4)
    assert again.scores == run.scores and again.provenance == run.provenance                 # identical, query by query
    S1, ids1 = cold.unit_scores(QS); S2, ids2 = warm.unit_scores(QS)
    assert ids1 == ids2 and np.array_equal(S1, S2)
    np.testing.assert_array_equal(warm._index.tokens, cold._index.tokens)
    # a changed unit text, or another stored precision, is another index
    changed = list(UNITS); changed[0] = Unit(UNITS[0].doc_id, UNITS[0].unit_id, text='A changed unit about dark matter halos.')
    r = LateRetriever(enc, cache=TokenCache(tmp_path / 'tok'), store=IndexStore(tmp_path / 'indexes')); r.index(changed, progress=False)
    assert (r.store.built, sum(calls)) == (1, len(UNITS) + 1)                                 # only the changed text was encoded
    r16 = LateRetriever(enc, cache=TokenCache(tmp_path / 'tok'), dtype='float16', store=IndexStore(tmp_path / 'indexes'))
    r16.index(UNITS, progress=False)
    assert r16.store.built == 1 and r16._index.tokens.dtype == np.float16 and r16.index_bytes == cold.index_bytes // 2
    assert len(list((tmp_path / 'indexes' / 'late').glob('*/*/manifest.json'))) == 3
    assert not [p for p in (tmp_path / 'indexes').rglob('.*')]                               # no temporary folder left


def _rewrite_manifest(folder):
    "Make the manifest agree with the files again (so only `open_saved`'s own checks can catch the change)."
    m = json.loads((folder / 'manifest.json').read_text())
    m['files'] = {n: [(folder / n).stat().st_size, file_sha256(folder / n)] for n in m['files']}
    (folder / 'manifest.json').write_text(json.dumps(m))


@pytest.mark.parametrize('damage,why', [('flip', 'tokens.npy, which does not match its checksum'), ('truncate', 'offsets.npy of'),
                                        ('offsets', r'cannot be opened \(ValueError: .*do not fit 4 units'), ('manifest', 'has no manifest.json')])
def test_damaged_saved_index_is_named_removed_and_rebuilt(enc, tmp_path, monkeypatch, damage, why):
    units = UNITS[:4]
    r = LateRetriever(enc, cache=TokenCache(tmp_path / 'tok'), store=IndexStore(tmp_path / 'indexes')); r.index(units, progress=False)
    ref = r.search(QS, k=4)
    folder = next((tmp_path / 'indexes' / 'late').glob('*/*'))
    tok, off = folder / 'tokens.npy', folder / 'offsets.npy'
    if damage == 'flip': b = bytearray(tok.read_bytes()); b[-16:] = bytes(x ^ 0xFF for x in b[-16:]); tok.write_bytes(bytes(b))
    elif damage == 'truncate': off.write_bytes(off.read_bytes()[:-8])
    elif damage == 'offsets':                                          # a well-formed file that does not fit the units
        o = np.load(off); np.save(off, np.concatenate([o[:2], o[3:]])); _rewrite_manifest(folder)
    else: (folder / 'manifest.json').unlink()
    calls = spy_encode(monkeypatch, enc)
    r2 = LateRetriever(enc, cache=False, store=IndexStore(tmp_path / 'indexes'))
    with pytest.warns(UserWarning, match=why):
        r2.index(units, progress=False)
    assert (r2.store.damaged, r2.store.built, r2.store.loaded) == (1, 1, 0) and sum(calls) == len(units)   # re-encoded
    got = r2.search(QS, k=4)
    assert got.scores == ref.scores and got.provenance == ref.provenance
    r3 = LateRetriever(enc, cache=False, store=IndexStore(tmp_path / 'indexes')); r3.index(units, progress=False)
    assert (r3.store.loaded, r3.store.built, sum(calls)) == (1, 0, len(units))              # the rebuilt one is intact


class _FakeImageEnc:
    "One 2-d token per unit from its image's mean brightness; queries are [1, 0]."
    name, dim, modality, fingerprint = 'fake-img', 2, 'image', 'fake-img-fp'
    def __init__(self): self.calls = 0
    def encode_image_units(self, units, batch_size=32, progress=False):
        self.calls += len(units)
        return [np.array([[float(np.asarray(Image.open(u.images[0])).mean()), 1.]], np.float32) for u in units]
    def encode_queries(self, texts, batch_size=32, progress=False): return [np.array([[1., 0.]], np.float32) for _ in texts]
    def encode_units(self, texts, batch_size=32, progress=False): raise AssertionError('an image encoder reads units')


def test_image_units_key_on_image_contents(tmp_path):
    imgs = []
    for i, v in enumerate((10, 200, 90)):
        imgs.append(tmp_path / f'p{i}.png'); Image.new('L', (8, 8), v).save(imgs[-1])
    units = [Unit(f'd{i}', f'd{i}#p1', kind='page', images=[str(f)]) for i, f in enumerate(imgs)]
    e, store = _FakeImageEnc(), IndexStore(tmp_path / 'indexes')
    mk = lambda: LateRetriever(e, cache=TokenCache(tmp_path / 'tok'), store=store)
    a = mk(); a.index(units, progress=False); first = a.search([Query('q', 'x')], k=3).ranking('q')
    b = mk(); b.index(units, progress=False)
    assert (store.built, store.loaded, e.calls, first) == (1, 1, 3, ['d1', 'd2', 'd0'])
    Image.new('L', (8, 8), 255).save(imgs[0])                  # same ids, same (empty) text, another image: another index
    c = mk(); c.index(units, progress=False)
    assert (store.built, e.calls) == (2, 4) and c.search([Query('q', 'x')], k=3).ranking('q') == ['d0', 'd1', 'd2']


def test_registry_late_warm_evaluation_equals_cold(tmp_path, monkeypatch):
    "`late` through the registry keeps its saved index in the cache root: the warm evaluation loads it, same numbers."
    from docbench_nb.retrieval import late
    opened, builds = [], []
    orig_open, orig_build = late.LateInteractionIndex.open_saved, late.LateRetriever._build
    monkeypatch.setattr(late.LateInteractionIndex, 'open_saved', classmethod(lambda cls, *a, **k: opened.append(1) or orig_open(*a, **k)))
    monkeypatch.setattr(late.LateRetriever, '_build', lambda self, *a, **k: builds.append(1) or orig_build(self, *a, **k))
    cold = evaluate_units(UNITS, QS, 'late', k=4, cache_dir=tmp_path, progress=False)
    manifests = list((tmp_path / 'indexes' / 'late').glob('*/*/manifest.json'))
    assert (len(builds), len(opened)) == (1, 0)
    warm = evaluate_units(UNITS, QS, 'late', k=4, cache_dir=tmp_path, progress=False)
    assert (len(builds), len(opened)) == (1, 1)
    assert len(manifests) == 1 and list((tmp_path / 'indexes' / 'late').glob('*/*/manifest.json')) == manifests
    assert warm.run.scores == cold.run.scores and warm.run.provenance == cold.run.provenance and warm.per_query == cold.per_query
    assert [cold.run.ranking(q.id)[0] for q in QS] == ['gw', 'bio', 'ml', 'cmb']
