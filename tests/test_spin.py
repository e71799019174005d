"""SPIN on the real MiniLM: the loss by hand, its decrease in training, a change of retrieval on a held-out PIR split,
save/load identity, the random control and the fine-tuned baseline; `docbench spin train` through its parser."""
import argparse, json, math
from pathlib import Path
import numpy as np
import pytest
torch = pytest.importorskip('torch')
from docbench_nb.retrieval.encoders import HFTextEncoder, EmbeddingCache
from docbench_nb.coverage.perspectives import load_pir, split_queries, Perspective, PerspectiveQuery
from docbench_nb.coverage.spin import (noisy_or_loss, steered_embeddings, prefix_states, suffix_embeddings, train_spin, save_spin, load_spin,
                              random_spin, finetune_encoder, resolve_layer)
from docbench_nb.coverage.measures import evaluate_coverage, add_coverage_parsers

SHARED = Path(__file__).resolve().parents[2] / 'shared'
PIR = SHARED / 'pir' / 'pir_demo_dev.json'
needs_pir = pytest.mark.skipif(not PIR.is_file(), reason='../shared/pir not present')


@pytest.fixture(scope='module')
def enc():
    n = torch.get_num_threads(); torch.set_num_threads(1)      # a busy 2-core machine: OpenMP spinning costs 10-50x
    yield HFTextEncoder()
    torch.set_num_threads(n)


def test_noisy_or_loss_by_hand():
    s = lambda x: 1 / (1 + math.exp(-x))
    cos = torch.tensor([[[0.2, 0.9, 0.1], [0.6, 0.0, 0.3]]])          # 1 query, 2 vectors, 3 targets
    pos = torch.tensor([[True, False, True]])
    loss, parts = noisy_or_loss(cos, pos, scale=10, threshold=0.5)
    p = lambda c: s(10 * (c - 0.5))
    want_pos = (-math.log(1 - (1 - p(0.2)) * (1 - p(0.6))) - math.log(1 - (1 - p(0.1)) * (1 - p(0.3)))) / 2
    want_neg = -math.log((1 - p(0.9)) * (1 - p(0.0)))
    assert parts['pos'] == pytest.approx(want_pos, rel=1e-5) and parts['neg'] == pytest.approx(want_neg, rel=1e-5)
    assert float(loss) == pytest.approx(want_pos + want_neg, rel=1e-5)
    # m = 8 vectors far below the threshold: finite, no underflow to log(0)
    far = noisy_or_loss(torch.full((1, 8, 1), -1.0), torch.tensor([[True]]), scale=20, threshold=0.5)[0]
    assert float(far) == pytest.approx(30 - math.log(8), rel=1e-3)        # -log(8 e^-30)


def test_zero_noise_is_the_plain_encoder_and_fast_path_matches(enc):
    texts = ['Should schools start later in the morning?', 'What causes inflation?']
    with torch.no_grad():
        z = steered_embeddings(enc, texts, torch.zeros(2, enc.dim), resolve_layer('middle', 6))
        np.testing.assert_allclose(z[:, 0].numpy(), enc.encode_queries(texts), atol=1e-5)
        noise = torch.randn(3, enc.dim, generator=torch.Generator().manual_seed(1)) * 0.4
        for layer in (0, 3, 5):
            full = steered_embeddings(enc, texts, noise, layer)
            fast = torch.stack([suffix_embeddings(enc, st, noise, layer) for st in prefix_states(enc, texts, layer)])
            np.testing.assert_allclose(fast.numpy(), full.numpy(), atol=1e-5)


@pytest.fixture(scope='module')
def split():
    if not PIR.is_file(): pytest.skip('../shared/pir not present')
    qs, corpus = load_pir(PIR, 'ambigqa')
    train, test = split_queries(qs, 0.5, seed=0)
    return train, test, corpus


@needs_pir
@pytest.mark.slow
def test_spin_trains_changes_heldout_retrieval_and_reloads(enc, split, tmp_path):
    train, test, corpus = split
    sm = train_spin(train, enc, m=4, layer='middle', epochs=4, lr=0.02, seed=0, progress=False)
    c = sm.config
    assert c['loss'][-1] < c['loss'][0], c['loss']
    assert (c['m'], c['layer'], c['n_params'], c['seed'], c['epochs'], c['lr']) == (4, 3, 4 * 384, 0, 4, 0.02)
    assert c['train_s'] > 0 and c['peak_rss_mb'] > 0 and c['n_queries'] == len(train)
    init = random_spin(enc, 4, 'middle', seed=0)
    assert not torch.allclose(sm.noise, init.noise)
    cache = EmbeddingCache(tmp_path / 'emb')
    r_spin = evaluate_coverage(test, corpus, 'spin', model=sm, cache=cache)
    r_naive = evaluate_coverage(test, corpus, 'naive', encoder=enc, cache=cache)
    assert all(p['n_vectors'] == 4 for p in r_spin['per_query'])
    assert [p['top10'] for p in r_spin['per_query']] != [p['top10'] for p in r_naive['per_query']]   # the vectors change retrieval
    # the four steered vectors of a held-out query differ from each other and from the plain query
    v = sm.encode([test[0].query])[0]
    assert np.abs(v - v[:1]).max() > 1e-3 and float((v @ enc.encode_queries([test[0].query]).T).min()) < 0.999
    save_spin(sm, tmp_path / 'spin')
    sm2 = load_spin(tmp_path / 'spin')
    np.testing.assert_array_equal(sm2.encode([q.query for q in test]), sm.encode([q.query for q in test]))
    r2 = evaluate_coverage(test, corpus, 'spin', model=str(tmp_path / 'spin'), cache=cache)
    assert [p['top10'] for p in r2['per_query']] == [p['top10'] for p in r_spin['per_query']]
    assert (r2['hc@10'], r2['hc@100']) == (r_spin['hc@10'], r_spin['hc@100'])


def test_load_spin_refuses_another_encoder(enc, tmp_path):
    sm = random_spin(enc, 2, 'early')
    save_spin(sm, tmp_path / 's')
    cfg = json.loads((tmp_path / 's' / 'spin.json').read_text())
    assert cfg['base_model'] is None and cfg['layer'] == 1
    cfg['base_fingerprint'] = 'other-model-123'
    (tmp_path / 's' / 'spin.json').write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match='trained on encoder other-model-123'):
        load_spin(tmp_path / 's', enc)


def test_random_control_is_seeded_and_scaled(enc):
    a, b = random_spin(enc, 4, seed=3), random_spin(enc, 4, seed=3)
    np.testing.assert_array_equal(a.noise.numpy(), b.noise.numpy())
    rms = a.config['hidden_rms']
    assert 0.1 < rms < 5
    assert float(a.noise.std()) == pytest.approx(0.25 * rms, rel=0.1)


@needs_pir
@pytest.mark.slow
def test_finetuned_baseline_and_cli_spin_train(enc, split, tmp_path):
    train, test, corpus = split
    ft = finetune_encoder(train, tmp_path / 'ft', epochs=2, batch_size=8, train_layers=1, progress=False, corpus=corpus)
    assert ft.train_log['n_params'] > 0 and len(ft.train_log['loss']) == 2 and ft.train_log['positives'] == 'documents'
    assert ft.train_log['loss'][1] < ft.train_log['loss'][0]       # the documents are a real target: loss falls, not ~0 at once
    assert ft.fingerprint != enc.fingerprint
    r = evaluate_coverage(test[:4], corpus, 'finetuned', model=str(tmp_path / 'ft'), cache=EmbeddingCache(tmp_path / 'e'))
    assert r['config']['model'] == str(tmp_path / 'ft') and 0 <= r['hc@10'] <= 1
    ap = argparse.ArgumentParser(); ap.add_argument('--cache-dir'); ap.add_argument('-q', '--quiet', action='store_true')
    add_coverage_parsers(ap.add_subparsers(dest='cmd', required=True))
    a = ap.parse_args(['-q', 'spin', 'train', '--pir', str(PIR), '--task', 'agnews,story', '--out', str(tmp_path / 'sp'),
                       '--m', '2', '--layer', 'early', '--epochs', '1', '--seed', '5'])
    assert a.fn(a) == 0
    sm = load_spin(tmp_path / 'sp', enc)
    assert (sm.m, sm.layer, sm.config['seed'], sm.config['n_queries']) == (2, 1, 5, 100)
