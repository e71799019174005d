"Vision encoders on tiny random checkpoints: loading by path, shapes, batching, pixel budget, pooling, normalisation, retrieval mechanics."
import numpy as np
import pytest
from PIL import Image
from docbench_nb.records import Unit, Query
from docbench_nb.retrieval.image_encoders import (load_image, unit_key, CLIPEncoder, VLMEmbedder, ColPaliEncoder, ImageRetriever,
                                embed_units_cached, IMAGE_RETRIEVER_KINDS)
from docbench_nb.retrieval.registry import make_retriever
from docbench_nb.context import RunContext
from docbench_nb.spec import SpecError
from docbench_nb.testing import make_tiny_vision_models


def test_load_image_budget_and_errors(tmp_path):
    Image.new('RGBA', (3000, 1000), (0, 0, 255, 0)).save(tmp_path/'t.png')
    im = load_image(tmp_path/'t.png', max_pixels=300_000)
    assert im.mode == 'RGB' and im.size[0] * im.size[1] <= 300_000 and abs(im.size[0] / im.size[1] - 3) < 0.02
    assert im.getpixel((0, 0)) == (255, 255, 255)                       # transparent → white, as printed
    Image.new('RGB', (100, 50)).save(tmp_path/'s.png')
    assert load_image(tmp_path/'s.png', max_pixels=10**6).size == (100, 50)   # never enlarged
    with pytest.raises(FileNotFoundError, match='does not exist'): load_image(tmp_path/'no.png')
    (tmp_path/'bad.png').write_bytes(b'nope')
    with pytest.raises(ValueError, match='cannot be read'): load_image(tmp_path/'bad.png')
    a = Unit('a', 'a#0', kind='figure', images=[str(tmp_path/'s.png')])
    assert unit_key(a) != unit_key(Unit('a', 'a#0', kind='figure', text='caption', images=[str(tmp_path/'s.png')]))


@pytest.fixture(scope='module')
def tiny(tmp_path_factory):
    d = tmp_path_factory.mktemp('vision')
    models = make_tiny_vision_models(d/'models')
    imgs = {}
    for i, (name, rgb) in enumerate({'red': (230, 30, 30), 'green': (30, 200, 60), 'blue': (30, 60, 230)}.items()):
        imgs[name] = str(d/f'{name}.png')
        Image.new('RGB', (280 + 150 * i, 200 + 70 * i), rgb).save(imgs[name])
    return models, imgs, d


@pytest.mark.slow
def test_clip_and_siglip(tiny):
    models, imgs, _ = tiny
    for key, dim in (('clip', 16), ('siglip', 32)):
        enc = CLIPEncoder(models[key], ctx=RunContext(max_pixels=40_000))
        q = enc.encode_queries(['a red square', 'blue', 'a long query about a green figure with many words'])
        i = enc.encode_images(list(imgs.values()))
        assert q.shape == (3, dim) and i.shape == (3, dim) and q.dtype == np.float32
        np.testing.assert_allclose(np.linalg.norm(np.vstack([q, i]), axis=1), 1, atol=1e-5)
        np.testing.assert_allclose(np.vstack([enc.encode_queries([t]) for t in ['a red square', 'blue']]), q[:2], atol=1e-5)
        np.testing.assert_allclose(enc.encode_images(list(imgs.values()), batch_size=1), i, atol=1e-5)
        u = enc.encode_image_units([Unit('d', 'd#i', kind='interleaved', text='blue', images=[imgs['red'], imgs['green']])])
        m = i[0] + i[1] + q[1]
        np.testing.assert_allclose(u[0], m / np.linalg.norm(m), atol=1e-5)
        assert enc.fingerprint != CLIPEncoder(models[key], ctx=RunContext(max_pixels=80_000)).fingerprint
    with pytest.raises(TypeError, match='not a dual encoder'): CLIPEncoder(models['qwen2_vl'])


@pytest.mark.slow
def test_vlm_embedder_inputs_pooling_budget(tiny):
    models, imgs, d = tiny
    enc = VLMEmbedder(models['qwen2_vl'], ctx=RunContext(max_pixels=28 * 28 * 20))
    b = enc.build_inputs([('caption text', [imgs['red'], imgs['blue']]), ('text only', [])], 'Represent this.')
    grid = b['image_grid_thw']
    assert grid.shape == (2, 3) and b['pixel_values'].shape[0] == int(grid.prod(-1).sum())
    assert int((b['input_ids'][0] == enc.image_token_id).sum()) == int(grid.prod(-1).sum()) // 4
    assert int((b['input_ids'][1] == enc.image_token_id).sum()) == 0
    for t, h, w in grid.tolist(): assert h * w * 14 * 14 <= 28 * 28 * 20   # pixels after smart_resize within budget
    if 'mm_token_type_ids' in b: assert int(b['mm_token_type_ids'].sum()) == int(grid.prod(-1).sum()) // 4
    units = [Unit('a', 'a#0', kind='interleaved', text='black holes', images=[imgs['red']]),
             Unit('b', 'b#0', kind='page', images=[imgs['green']]),
             Unit('c', 'c#0', kind='figure', text='x', images=[imgs['blue'], imgs['red']])]
    v = enc.encode_image_units(units, batch_size=3)
    assert v.shape == (3, 32)
    np.testing.assert_allclose(np.linalg.norm(v, axis=1), 1, atol=1e-5)
    np.testing.assert_allclose(np.vstack([enc.encode_image_units([u]) for u in units]), v, atol=1e-4)
    enc.tokenizer.padding_side = 'left'
    np.testing.assert_allclose(enc.encode_image_units(units, batch_size=3), v, atol=1e-4)
    enc.tokenizer.padding_side = 'right'
    assert enc.encode_queries(['q one', 'a longer query two']).shape == (2, 32)
    assert enc.encode_images([imgs['red']]).shape == (1, 32)
    # a larger budget than the checkpoint's own cap (256 tokens) is honoured
    Image.new('RGB', (900, 700), 'white').save(d/'page.png')
    big = VLMEmbedder(models['qwen2_vl'], ctx=RunContext(max_pixels=500_000))
    n = int((big.build_inputs([('', [str(d/'page.png')])], None)['input_ids'] == big.image_token_id).sum())
    assert 256 < n <= 500_000 // 784
    with pytest.raises(ValueError, match='exceeds max_length'):
        VLMEmbedder(models['qwen2_vl'], max_length=64, ctx=RunContext(max_pixels=500_000)).build_inputs([('', [str(d/'page.png')])], None)


@pytest.mark.slow
def test_colpali_encoder_token_matrices(tiny, tmp_path):
    models, imgs, _ = tiny
    enc = ColPaliEncoder(models['colqwen2'], ctx=RunContext(max_pixels=28 * 28 * 16))
    assert (enc.backend, enc.dim, enc.modality) == ('transformers', 16, 'image')
    q = enc.encode_queries(['gas', 'the quick brown fox jumps over the lazy dog'])
    assert q[1].shape[0] > q[0].shape[0]                                # no padding rows
    ims = enc.encode_images(list(imgs.values()), batch_size=3)
    for m, p in zip(ims, imgs.values()):
        np.testing.assert_allclose(enc.encode_images([p])[0], m, atol=1e-4)
        np.testing.assert_allclose(np.linalg.norm(m, axis=1), 1, atol=1e-4)
    u = enc.encode_image_units([Unit('a', 'a#0', kind='page', images=[imgs['red'], imgs['blue']])])[0]
    assert u.shape == (len(ims[0]) + len(ims[2]), 16)
    assert len(ColPaliEncoder(models['colqwen2'], ctx=RunContext(max_pixels=28 * 28 * 64)).encode_images([imgs['blue']])[0]) > len(ims[2])
    with pytest.raises(ValueError, match='has no images'): enc.encode_image_units([Unit('a', 'a#1', text='t')])
    with pytest.raises(TypeError, match='embed images'): enc.encode_units(['text'])
    try:
        import colpali_engine  # noqa: F401
    except ImportError:
        (tmp_path/'adapter').mkdir(); (tmp_path/'adapter'/'adapter_config.json').write_text('{"base_model_name_or_path": "vidore/colqwen2-base"}')
        with pytest.raises(ImportError, match='colpali-engine'): ColPaliEncoder(str(tmp_path/'adapter'))


@pytest.mark.slow
def test_image_and_late_retrievers_exact(tiny):
    models, imgs, d = tiny
    pages = [Unit('p1', 'p1#1', kind='page', images=[imgs['red']]), Unit('p1', 'p1#2', kind='page', images=[imgs['green']]),
             Unit('p2', 'p2#1', kind='page', images=[imgs['blue']]), Unit('p3', 'p3#t', kind='text', text='gravitational waves')]
    qs = [Query('q1', 'a green page'), Query('q2', 'waves')]
    ret = make_retriever(f"vlm:{models['qwen2_vl']}", cache_dir=d/'cache', max_pixels=28 * 28 * 16)
    assert isinstance(ret, ImageRetriever) and ret.name == f"vlm:{models['qwen2_vl']}" and ret.encoder.max_pixels == 28 * 28 * 16
    ret.index(pages, progress=False)
    run = ret.search(qs, k=3)
    uv = embed_units_cached(ret.encoder, pages, cache=False)
    qv = ret.encoder.encode_queries([q.text for q in qs])
    for j, q in enumerate(qs):
        s = qv[j] @ uv.T
        assert run.scores[q.id]['p1'] == pytest.approx(float(s[:2].max()), abs=1e-4)
        assert run.provenance[q.id]['p1'] == pages[int(np.argmax(s[:2]))].unit_id
        assert run.scores[q.id]['p3'] == pytest.approx(float(s[3]), abs=1e-4)
    assert ret.index_bytes == 4 * 32 * 4
    ret.cache.reset_counters(); ret.index(pages, progress=False)
    assert (ret.cache.hits, ret.cache.misses) == (4, 0)
    late = make_retriever(f"colpali:{models['colqwen2']}", cache_dir=d/'cache', max_pixels=28 * 28 * 16)
    late.index(pages[:3], progress=False)
    mats = late.encoder.encode_image_units(pages[:3])
    assert late.index_bytes == sum(len(m) for m in mats) * 16 * 4
    r = late.search(qs, k=2)
    assert set(r.scores['q1']) == {'p1', 'p2'}
    late.cache.reset_counters(); late.index(pages[:3], progress=False)
    assert (late.store.built, late.store.loaded, late.cache.hits, late.cache.misses) == (1, 1, 0, 0)   # the saved index, loaded
    with pytest.raises(SpecError, match='needs a model'): make_retriever('clip')


def _pixels_seen(enc, path):
    "Pixels of `path` as the encoder's own image processor receives and resizes it (Qwen-style: grid patches x 14 x 14)."
    im = load_image(path, enc.max_pixels)
    if hasattr(enc, 'image_processor') and hasattr(enc.image_processor, 'merge_size'):
        from docbench_nb.retrieval.image_encoders import _pixel_cap
        g = enc.image_processor(images=[im], return_tensors='pt', **_pixel_cap(enc.image_processor, enc.max_pixels))['image_grid_thw']
        return int(g.prod()) * 14 * 14
    return im.size[0] * im.size[1]


@pytest.mark.parametrize('kind', IMAGE_RETRIEVER_KINDS)
def test_max_pixels_reaches_the_image_encoder(tiny, kind):
    "`make_retriever(..., max_pixels=2M)` encodes at a 2,000,000-pixel budget, not the 1,000,000 default."
    models, imgs, d = tiny
    folder = {'clip': models['clip'], 'vlm': models['qwen2_vl'], 'colpali': models['colqwen2']}[kind]
    big = str(d / 'big-2400x1200.png')
    Image.new('RGB', (2400, 1200), (200, 30, 30)).save(big)                  # 2.88M pixels: both budgets shrink it
    r2, r1 = (make_retriever(f'{kind}:{folder}', max_pixels=mp) for mp in (2_000_000, None))
    assert (r2.encoder.max_pixels, r1.encoder.max_pixels) == (2_000_000, 1_000_000)
    s2, s1 = load_image(big, r2.encoder.max_pixels).size, load_image(big, r1.encoder.max_pixels).size
    assert 1_900_000 < s2[0] * s2[1] <= 2_000_000 and 950_000 < s1[0] * s1[1] <= 1_000_000
    assert r2.encoder.fingerprint != r1.encoder.fingerprint                 # the caches never mix the two budgets
    if kind == 'colpali':
        # the visual tokens the model actually embeds grow with the budget
        n2, n1 = (len(r.encoder.encode_images([big])[0]) for r in (r2, r1))
        assert n2 > 1.8 * n1, (n2, n1)
    if kind == 'vlm':
        p2, p1 = _pixels_seen(r2.encoder, big), _pixels_seen(r1.encoder, big)
        assert p2 > 1.8 * p1, (p2, p1)
