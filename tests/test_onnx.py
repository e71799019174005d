"ONNX Runtime backends of HFTextEncoder on the bundled MiniLM: torch's vectors (fp32), close ones (int8), own fingerprints, one export reused and checked."
import json
import numpy as np
import pytest

from docbench_nb.demo import demo_paper_ids, demo_source_files, read_demo_source, demo_queries
from docbench_nb.retrieval.encoders import HFTextEncoder, load_encoder, model_fingerprint, ONNX_BUILDS, onnx_problem
from docbench_nb.spec import SpecError
from docbench_nb.context import RunContext


def latex_texts(n=16):
    "Windows of 5..200 words (mixed lengths) cut from the demo papers' LaTeX, plus one past the 256-token window (truncated)."
    rng, out = np.random.default_rng(0), []
    for pid in demo_paper_ids():
        for rel in (r for r in demo_source_files(pid) if r.endswith('.tex')):
            words, i = read_demo_source(pid, rel).split(), 0
            while i + 200 < len(words) and len(out) < n - 1:
                k = int(rng.integers(5, 201)); out.append(' '.join(words[i:i + k])); i += 3 * k
        if len(out) >= n - 1: break
    return out + [' '.join(' '.join(out).split()[:600])]


@pytest.fixture(scope='module')
def encs(tmp_path_factory):
    cache = tmp_path_factory.mktemp('onnx_cache')
    before = dict(ONNX_BUILDS)
    out = {'torch': HFTextEncoder(ctx=RunContext(device='cpu')), 'onnx': HFTextEncoder(backend='onnx', ctx=RunContext(cache_dir=cache)),
           'int8': load_encoder('minilm?backend=onnx-int8', cache_dir=cache)}
    out['builds'] = {k: ONNX_BUILDS[k] - before[k] for k in before}
    out['cache'], out['texts'] = cache, latex_texts()
    return out


def test_onnx_fp32_gives_the_torch_vectors(encs):
    texts = encs['texts']
    assert len(texts) == 16 and len({len(t.split()) for t in texts}) > 12
    assert len(encs['torch'].tokenizer(texts[-1])['input_ids']) > encs['torch'].max_length       # truncation is exercised
    t, o = encs['torch'].encode_units(texts), encs['onnx'].encode_units(texts, batch_size=5)
    assert np.abs(t - o).max() < 1e-5
    qs = [q['query'] for q in demo_queries()[:8]]
    plain = encs['onnx'].encode_queries(qs)
    assert np.abs(encs['torch'].encode_queries(qs) - plain).max() < 1e-5
    # prefixes are the torch path's: the same prefix gives the same vectors, and the export is reused (no new build)
    n = dict(ONNX_BUILDS)
    po = HFTextEncoder(backend='onnx', query_prefix='query: ', ctx=RunContext(cache_dir=encs['cache']))
    encs['torch'].query_prefix = 'query: '
    try: assert np.abs(encs['torch'].encode_queries(qs) - po.encode_queries(qs)).max() < 1e-5
    finally: encs['torch'].query_prefix = ''
    assert np.abs(po.encode_queries(qs) - plain).max() > 1e-3 and ONNX_BUILDS == n               # the prefix did change them


def test_int8_is_close_and_keyed_apart(encs):
    texts = encs['texts']
    f, q = encs['onnx'].encode_units(texts), encs['int8'].encode_units(texts)
    cos = (f * q).sum(1)
    assert cos.min() > 0.95 and np.abs(f - q).max() > 1e-3          # close, but really other (quantized) weights
    np.testing.assert_allclose(np.linalg.norm(q, axis=1), 1, atol=1e-5)
    fps = {b: model_fingerprint(encs[b]) for b in ('torch', 'onnx', 'int8')}
    assert len(set(fps.values())) == 3 and 'onnx-int8' in fps['int8'] and 'onnx' in fps['onnx'] and 'onnx' not in fps['torch']


def test_unknown_backend_or_setting_refused():
    with pytest.raises(ValueError, match='unknown encoder backend'): HFTextEncoder(backend='tensorrt')
    with pytest.raises(SpecError, match="option backend='openvino' is not one of"): load_encoder('dense?backend=openvino')
    with pytest.raises(ValueError, match='runs on CPU'): HFTextEncoder(backend='onnx', ctx=RunContext(device='cuda'))
    with pytest.raises(ValueError, match='runs float32 weights'): HFTextEncoder(backend='onnx-int8', dtype='bfloat16')


def test_export_built_once_reused_and_checked(encs):
    assert encs['builds'] == {'export': 1, 'quantize': 1}           # int8 was quantized from the one fp32 export
    n = dict(ONNX_BUILDS)
    again = HFTextEncoder(backend='onnx-int8', ctx=RunContext(cache_dir=encs['cache']))
    assert ONNX_BUILDS == n
    texts = encs['texts'][:4]
    before = again.encode_units(texts)
    [d] = list((encs['cache'] / 'embeddings' / 'onnx').glob('*-int8-*'))
    assert onnx_problem(d) is None and json.loads((d / 'manifest.json').read_text())['settings']['weight_type'] == 'QInt8'
    blob = bytearray((d / 'model.onnx').read_bytes())
    blob[len(blob) // 2] ^= 0xFF                                    # one flipped byte, same size
    (d / 'model.onnx').write_bytes(bytes(blob))
    assert 'does not match the sha256' in onnx_problem(d)
    with pytest.warns(UserWarning, match='removed and rebuilt'):
        rebuilt = HFTextEncoder(backend='onnx-int8', ctx=RunContext(cache_dir=encs['cache']))
    assert (ONNX_BUILDS['export'], ONNX_BUILDS['quantize']) == (n['export'], n['quantize'] + 1)
    assert onnx_problem(d) is None
    np.testing.assert_allclose(rebuilt.encode_units(texts), before, atol=1e-6)


def test_retriever_spec_selects_the_backend(encs):
    "`dense?backend=onnx-int8` through the registry reuses the cached export and records the backend in its fingerprint."
    from docbench_nb.retrieval.registry import make_retriever
    n = dict(ONNX_BUILDS)
    r = make_retriever('dense?backend=onnx-int8', cache_dir=encs['cache'])
    assert ONNX_BUILDS == n and model_fingerprint(r.encoder) == model_fingerprint(encs['int8'])
    assert model_fingerprint(make_retriever('dense', cache_dir=encs['cache']).encoder) == model_fingerprint(encs['torch'])
    h = make_retriever('hybrid?backend=onnx', cache_dir=encs['cache'])
    assert model_fingerprint(h.retrievers[1].encoder) == model_fingerprint(encs['onnx'])
    with pytest.raises(SpecError, match='backend'): make_retriever('dense?backend=tensorrt')
