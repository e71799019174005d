"Encoders: the real MiniLM against sentence-transformers, hub-id/local-folder loading of random models, the embedding cache."
import json, warnings
from pathlib import Path
import numpy as np
import pytest
import torch

from docbench_nb.retrieval.encoders import (HFTextEncoder, EmbeddingCache, as_encoder, default_text_model_path, embed_cached,
                                  load_encoder, model_fingerprint, pool_hidden, read_st_config, text_key)

PASSAGES = [
    "Dropout randomly zeroes activations during training, which regularises deep networks.",
    "We measure the cosmic microwave background temperature anisotropies with a balloon-borne bolometer array.",
    "Table 3 lists the BLEU scores of all systems on the WMT14 English-German test set.",
    "short",
    "The proof proceeds by induction on the number of vertices in the graph; the base case is trivial. " * 30,  # > 256 tokens: truncated
    "Graphene's electron mobility exceeds 200,000 cm^2/Vs at low temperature.",
]


@pytest.fixture(scope='module')
def minilm():
    return HFTextEncoder()


@pytest.fixture(scope='module')
def st_minilm():
    from sentence_transformers import SentenceTransformer
    return SentenceTransformer(default_text_model_path(), device='cpu')


# ---------------------------------------------------------------- the real default model
@pytest.mark.slow
def test_paraphrases_closer_than_unrelated(minilm):
    q = minilm.encode_queries(["How does dropout prevent overfitting?", "What is the mobility of electrons in graphene?"])
    u = minilm.encode_units(PASSAGES)
    sims = q @ u.T
    assert sims[0].argmax() == 0 and sims[1].argmax() == 5
    assert sims[0, 0] > sims[0, 1] + 0.3
    np.testing.assert_allclose(np.linalg.norm(u, axis=1), 1, atol=1e-5)
    assert u.dtype == np.float32 and u.shape == (len(PASSAGES), 384)


@pytest.mark.slow
def test_matches_sentence_transformers(minilm, st_minilm):
    ours = minilm.encode_units(PASSAGES, batch_size=4)
    ref = st_minilm.encode(PASSAGES, batch_size=4, normalize_embeddings=True, convert_to_numpy=True)
    np.testing.assert_allclose(ours, ref, atol=1e-5)
    assert minilm.max_length == st_minilm.max_seq_length == 256


@pytest.mark.slow
def test_as_encoder_wraps_sentence_transformer(minilm, st_minilm):
    wrapped = as_encoder(st_minilm, name='st-minilm')
    assert wrapped.name == 'st-minilm' and wrapped.dim == 384 and wrapped.max_length == 256
    np.testing.assert_allclose(wrapped.encode_units(PASSAGES), minilm.encode_units(PASSAGES), atol=1e-5)
    np.testing.assert_allclose(wrapped.encode_queries(PASSAGES[:2]), minilm.encode_queries(PASSAGES[:2]), atol=1e-5)
    fp = model_fingerprint(wrapped)
    assert fp == model_fingerprint(wrapped) and fp.startswith('st-minilm-')


@pytest.mark.slow
def test_load_encoder_specs(minilm):
    e = load_encoder('dense:' + default_text_model_path())
    assert e.dim == 384 and e.pooling == 'mean'
    assert model_fingerprint(e) .split('-')[-1] == model_fingerprint(minilm).split('-')[-1]  # same folder + settings
    with pytest.raises(ValueError, match='unknown encoder spec'):
        load_encoder('colbert')


# ---------------------------------------------------------------- local folders / arbitrary architectures
def _save_tokenizer(folder, padding_side='right'):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(default_text_model_path())
    tok.padding_side = padding_side
    tok.save_pretrained(folder)
    return tok


@pytest.fixture(scope='module')
def random_bert(tmp_path_factory):
    from transformers import BertConfig, BertModel
    d = tmp_path_factory.mktemp('rand_bert')
    tok = _save_tokenizer(d)
    torch.manual_seed(0)
    BertModel(BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                         intermediate_size=64, max_position_embeddings=128)).save_pretrained(d)
    return d


@pytest.mark.slow
def test_random_bert_folder_loads_like_sentence_transformers(random_bert):
    from sentence_transformers import SentenceTransformer
    enc = HFTextEncoder(str(random_bert))
    assert (enc.dim, enc.pooling, enc.max_length, enc.query_prefix) == (32, 'mean', 128, '')
    st = SentenceTransformer(str(random_bert), device='cpu')           # plain folder -> ST adds mean pooling
    ref = st.encode(PASSAGES, normalize_embeddings=True, convert_to_numpy=True)
    np.testing.assert_allclose(enc.encode_units(PASSAGES), ref, atol=1e-5)
    cls = HFTextEncoder(str(random_bert), pooling='cls')
    assert not np.allclose(cls.encode_units(PASSAGES[:2]), ref[:2], atol=1e-3)
    assert model_fingerprint(cls) != model_fingerprint(enc)


@pytest.mark.slow
def test_fingerprint_sees_weight_changes(random_bert, tmp_path):
    from transformers import BertModel
    import shutil
    other = tmp_path / 'other'
    shutil.copytree(random_bert, other)
    assert HFTextEncoder(str(other)).fingerprint.split('-')[-1] == HFTextEncoder(str(random_bert)).fingerprint.split('-')[-1]
    m = BertModel.from_pretrained(other)
    with torch.no_grad(): m.encoder.layer[0].output.dense.weight.add_(0.01)
    m.save_pretrained(other)
    assert HFTextEncoder(str(other)).fingerprint != HFTextEncoder(str(random_bert)).fingerprint


@pytest.mark.slow
def test_dense_head_matches_sentence_transformers(random_bert, tmp_path):
    from sentence_transformers import SentenceTransformer, models
    tr = models.Transformer(str(random_bert))
    st = SentenceTransformer(modules=[tr, models.Pooling(32, pooling_mode='cls'),
                                      models.Dense(32, 16, activation_function=torch.nn.Tanh()), models.Normalize()], device='cpu')
    st.save(str(tmp_path / 'st'))
    cfg = read_st_config(tmp_path / 'st')
    assert cfg['pooling'] == 'cls' and cfg['normalize'] and len(cfg['dense']) == 1
    enc = HFTextEncoder(str(tmp_path / 'st'))
    assert enc.dim == 16
    np.testing.assert_allclose(enc.encode_units(PASSAGES), st.encode(PASSAGES, convert_to_numpy=True), atol=1e-5)


@pytest.fixture(scope='module')
def tiny_decoder(tmp_path_factory):
    "A random 2-layer Qwen2 (the Qwen3-Embedding family's architecture) with last-token pooling and an instruction prompt."
    from transformers import Qwen2Config, Qwen2Model
    d = tmp_path_factory.mktemp('tiny_qwen2')
    tok = _save_tokenizer(d, padding_side='left')
    torch.manual_seed(0)
    Qwen2Model(Qwen2Config(vocab_size=tok.vocab_size, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                           num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)).save_pretrained(d)
    (d / '1_Pooling').mkdir()
    (d / '1_Pooling' / 'config.json').write_text(json.dumps({'embedding_dimension': 32, 'pooling_mode': 'lasttoken'}))
    (d / 'modules.json').write_text(json.dumps([
        {'idx': 0, 'name': '0', 'path': '', 'type': 'sentence_transformers.base.modules.transformer.Transformer'},
        {'idx': 1, 'name': '1', 'path': '1_Pooling', 'type': 'sentence_transformers.sentence_transformer.modules.pooling.Pooling'},
        {'idx': 2, 'name': '2', 'path': '2_Normalize', 'type': 'sentence_transformers.base.modules.normalize.Normalize'}]))
    (d / 'config_sentence_transformers.json').write_text(json.dumps(
        {'prompts': {'query': 'Instruct: Given a question, retrieve the paper that answers it\nQuery:', 'document': ''}}))
    return d


@pytest.mark.slow
@pytest.mark.parametrize('side', ['left', 'right'])
def test_last_token_pooling_independent_of_padding(tiny_decoder, side):
    enc = HFTextEncoder(str(tiny_decoder))
    assert enc.pooling == 'last' and enc.query_prefix.startswith('Instruct:') and enc.passage_prefix == ''
    enc.tokenizer.padding_side = side
    texts = PASSAGES[:4]
    batched = enc.encode_units(texts, batch_size=4)                   # padded batch
    alone = np.vstack([enc.encode_units([t]) for t in texts])       # no padding at all
    np.testing.assert_allclose(batched, alone, atol=1e-5)
    # the query instruction really is prepended
    np.testing.assert_allclose(enc.encode_queries(['x']), enc.encode_units([enc.query_prefix + 'x']), atol=1e-6)


@pytest.mark.slow
def test_decoder_path_equals_sentence_transformers(tiny_decoder):
    """The decoder-embedding path (last-token pooling, an instruction prompt for queries, normalisation) gives the
    vectors sentence-transformers gives for the same folder: queries with the prompt, documents without."""
    st = pytest.importorskip('sentence_transformers')
    ref = st.SentenceTransformer(str(tiny_decoder), device='cpu')
    enc = HFTextEncoder(str(tiny_decoder))
    texts = PASSAGES[:6]
    np.testing.assert_allclose(enc.encode_units(texts, batch_size=4), ref.encode(texts, batch_size=4, prompt_name='document'), atol=1e-5)
    np.testing.assert_allclose(enc.encode_queries(texts[:3]), ref.encode(texts[:3], prompt_name='query'), atol=1e-5)
    assert not np.allclose(enc.encode_queries(texts[:1]), enc.encode_units(texts[:1]), atol=1e-3)   # the prompt matters


def test_pool_hidden_last_and_mean():
    h = torch.randn(3, 5, 4)
    mask = torch.tensor([[1, 1, 1, 0, 0], [0, 0, 1, 1, 1], [1, 1, 1, 1, 1]])
    last = pool_hidden(h, mask, 'last')
    torch.testing.assert_close(last, torch.stack([h[0, 2], h[1, 4], h[2, 4]]))
    torch.testing.assert_close(pool_hidden(h, mask, 'mean')[1], h[1, 2:].mean(0))
    with pytest.raises(ValueError):
        pool_hidden(h, mask, 'median')


# ---------------------------------------------------------------- cache
class CountingEncoder:
    "Deterministic toy encoder recording every text it embeds; optionally crashes after `fail_after` calls."
    name, dim, tokenizer, max_length = 'counting', 8, None, 512
    fingerprint = 'counting-v1'

    def __init__(self, fail_after=None):
        self.seen, self.calls, self.fail_after = [], 0, fail_after

    def _enc(self, texts):
        self.calls += 1
        if self.fail_after is not None and self.calls > self.fail_after:
            raise KeyboardInterrupt('simulated interruption')
        self.seen += list(texts)
        v = np.stack([np.random.default_rng(int(text_key('x', t)[:8], 16)).standard_normal(8) for t in texts]).astype(np.float32)
        return v / np.linalg.norm(v, axis=1, keepdims=True)

    def encode_units(self, texts, batch_size=32, progress=False): return self._enc(texts)
    def encode_queries(self, texts, batch_size=32, progress=False): return -self._enc(texts)


TEXTS = [f"unit {i}: " + "word " * (i % 13) for i in range(50)]


def test_cache_second_run_embeds_nothing(tmp_path):
    cache = EmbeddingCache(tmp_path)
    enc = CountingEncoder()
    a = embed_cached(enc, TEXTS, cache=cache, shard_size=16, progress=False)
    assert (cache.hits, cache.misses, len(enc.seen)) == (0, 50, 50)
    enc2, cache2 = CountingEncoder(), EmbeddingCache(tmp_path)      # a new process
    b = embed_cached(enc2, TEXTS, cache=cache2, progress=False)
    assert (cache2.hits, cache2.misses, enc2.seen) == (50, 0, [])
    np.testing.assert_array_equal(a, b)
    q = embed_cached(enc2, TEXTS[:3], kind='query', cache=cache2, progress=False)
    np.testing.assert_allclose(q, -a[:3])                             # queries keyed separately
    assert len(list((tmp_path / 'counting-v1').glob('*.tmp'))) == 0
    assert json.loads((tmp_path / 'counting-v1' / 'meta.json').read_text())['dim'] == 8


def test_cache_resumes_after_interruption(tmp_path):
    ref = embed_cached(CountingEncoder(), TEXTS, cache=False, progress=False)
    crashing = CountingEncoder(fail_after=3)
    with pytest.raises(KeyboardInterrupt):
        embed_cached(crashing, TEXTS, cache=EmbeddingCache(tmp_path), shard_size=8, progress=False)
    assert len(crashing.seen) == 24
    enc, cache = CountingEncoder(), EmbeddingCache(tmp_path)
    out = embed_cached(enc, TEXTS, cache=cache, shard_size=8, progress=False)
    assert (cache.hits, cache.misses) == (24, 26)                    # 3 shards of 8 survived the crash
    assert sorted(enc.seen) == sorted(set(TEXTS) - set(crashing.seen))  # only the rest is embedded
    np.testing.assert_array_equal(out, ref)


def test_cache_dedupes_and_checks_shapes(tmp_path):
    enc = CountingEncoder()
    cache = EmbeddingCache(tmp_path)
    out = embed_cached(enc, ['a', 'b', 'a', 'a'], cache=cache, progress=False)
    assert enc.seen.count('a') == 1 and cache.misses == 2
    np.testing.assert_array_equal(out[0], out[2])
    assert embed_cached(enc, [], cache=cache, progress=False).shape == (0, 8)

    class Bad(CountingEncoder):
        fingerprint = 'bad'
        def encode_units(self, texts, batch_size=32, progress=False): return np.zeros((len(texts), 3), np.float32)
    with pytest.raises(ValueError, match='expected'):
        embed_cached(Bad(), ['x'], cache=cache, progress=False)
    with pytest.raises(ValueError, match="kind must be"):
        embed_cached(enc, ['x'], kind='doc', cache=cache)


def test_default_cache_root_follows_env(tmp_path, monkeypatch):
    monkeypatch.setenv('DOCBENCH_CACHE', str(tmp_path))
    assert EmbeddingCache().root == tmp_path / 'embeddings'


def test_fingerprint_without_weights_warns():
    class NoWeights:
        name = 'api-model'
        def encode(self, texts): return np.ones((len(texts), 4))
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        fp = model_fingerprint(as_encoder(NoWeights()))
    assert fp.startswith('api-model-') and any('stale' in str(x.message) for x in w)


# ---------------------------------------------------------------- token-length bucketing
SHARED_PAPERS = Path(__file__).resolve().parents[2] / 'shared' / 'corpus' / 'papers'


def mixed_latex_windows(tokenizer, n, lo=32, hi=512, seed=0):
    "Windows of `lo`..`hi` MiniLM tokens cut from the shared papers' LaTeX sources (read only)."
    if not SHARED_PAPERS.is_dir(): pytest.skip(f"{SHARED_PAPERS} absent")
    from docbench_nb.testing import latex_windows
    return latex_windows(tokenizer, n, SHARED_PAPERS, lo, hi, seed=seed, stride=5)


@pytest.mark.slow
def test_token_bucketing_matches_one_at_a_time(minilm):
    texts = mixed_latex_windows(minilm.tokenizer, 48)
    assert len(texts) == 48
    lens = [len(minilm.tokenizer(t)['input_ids']) for t in texts]
    assert min(lens) < 80 and max(lens) > 256                      # really mixed: short windows and truncated ones
    bucketed = minilm.encode_units(texts, batch_size=16)
    single = np.concatenate([minilm.encode_units([t]) for t in texts])
    assert np.allclose(bucketed, single, atol=1e-5)
    # order restored: shuffling the input permutes the output the same way
    perm = np.random.default_rng(1).permutation(len(texts))
    assert np.allclose(minilm.encode_units([texts[i] for i in perm], batch_size=16), bucketed[perm], atol=1e-5)
    # a chunk boundary inside the input changes nothing
    assert np.allclose(minilm._encode(texts, '', 16, False, 'units', chunk=10), bucketed, atol=1e-5)
