"""AMER on the real MiniLM and PIR: train on `story`, evaluate coverage on the disjoint `ambigqa`; the trained head
changes rankings against its untrained initialisation; the `spin amer` → `coverage --method amer --model` round trip."""
import argparse, json
from pathlib import Path
import numpy as np
import pytest
torch = pytest.importorskip('torch')
from docbench_nb.retrieval.encoders import HFTextEncoder, EmbeddingCache
from docbench_nb.coverage.perspectives import load_pir
from docbench_nb.cache import stage_dir
from docbench_nb.coverage.amer import train_amer, init_amer, save_amer, load_amer
from docbench_nb.coverage.measures import evaluate_coverage, add_coverage_parsers, METHODS

SHARED = Path(__file__).resolve().parents[2] / 'shared'
PIR = SHARED / 'pir' / 'pir_demo_dev.json'


def test_amer_is_a_coverage_method():
    # tests/test_coverage.py pins the method set without 'amer'; this is the set with it
    assert set(METHODS) == {'naive', 'expansion', 'random', 'finetuned', 'spin', 'amer', 'oracle'}


@pytest.fixture(scope='module')
def enc():
    n = torch.get_num_threads(); torch.set_num_threads(1)      # a busy 2-core machine
    yield HFTextEncoder()
    torch.set_num_threads(n)


@pytest.fixture(scope='module')
def data():
    if not PIR.is_file(): pytest.skip('../shared/pir not present')
    train_q, train_c = load_pir(PIR, 'story')
    test_q, test_c = load_pir(PIR, 'ambigqa')
    assert not set(train_c) & set(test_c)                       # disjoint tasks, task-prefixed ids
    return train_q, train_c, test_q, test_c


@pytest.fixture(scope='module')
def cache_dir(tmp_path_factory):
    "One cache folder for the module: the PIR documents are embedded once, by whichever test comes first."
    return tmp_path_factory.mktemp('cache')


@pytest.mark.slow
def test_amer_trains_on_story_and_changes_ambigqa_retrieval(enc, data, cache_dir, tmp_path):
    train_q, train_c, test_q, test_c = data
    cache = EmbeddingCache(stage_dir('embeddings', cache_dir))
    am = train_amer(train_q, train_c, enc, m=4, epochs=4, lr=1e-3, seed=0, progress=False, cache=cache)
    c = am.config
    assert c['loss'][-1] < c['loss'][0], c['loss']
    assert (c['m'], c['seed'], c['epochs'], c['lr'], c['n_queries']) == (4, 0, 4, 1e-3, len(train_q))
    assert c['n_params'] == sum(p.numel() for p in am.head.parameters()) and c['train_s'] > 0 and c['peak_rss_mb'] > 0
    assert c['encoder_frozen'] and not any(p.requires_grad for p in enc.model.parameters())
    r = evaluate_coverage(test_q, test_c, 'amer', model=am, cache=cache)
    r0 = evaluate_coverage(test_q, test_c, 'amer', model=init_amer(enc, 4, seed=0), cache=cache)
    for res in (r, r0):
        assert 0 <= res['hc@10'] <= res['hc@20'] <= res['hc@100'] <= 1
        assert all(p['n_vectors'] == 4 for p in res['per_query'])
    assert [p['top10'] for p in r['per_query']] != [p['top10'] for p in r0['per_query']]    # training changed the rankings
    v = am.encode([q.query for q in test_q[:3]])
    assert v.shape == (3, 4, enc.dim) and np.abs(v - v[:, :1]).max() > 1e-2               # the 4 vectors differ
    save_amer(am, tmp_path / 'am')
    np.testing.assert_array_equal(load_amer(tmp_path / 'am', enc).encode([q.query for q in test_q]), am.encode([q.query for q in test_q]))


@pytest.mark.slow
def test_cli_spin_amer_then_coverage(data, cache_dir, tmp_path):
    if not PIR.is_file(): pytest.skip('../shared/pir not present')
    ap = argparse.ArgumentParser(); ap.add_argument('--cache-dir'); ap.add_argument('-q', '--quiet', action='store_true')
    add_coverage_parsers(ap.add_subparsers(dest='cmd', required=True))
    n = torch.get_num_threads(); torch.set_num_threads(1)
    try:
        a = ap.parse_args(['--cache-dir', str(cache_dir), '-q', 'spin', 'amer', '--pir', str(PIR), '--task', 'story',
                           '--out', str(tmp_path / 'm'), '--m', '2', '--epochs', '2', '--seed', '1'])
        assert a.fn(a) == 0
        saved = json.loads((tmp_path / 'm' / 'amer.json').read_text())
        assert (saved['m'], saved['config']['seed'], saved['config']['n_queries'], saved['base_model']) == (2, 1, len(data[0]), None)
        a = ap.parse_args(['--cache-dir', str(cache_dir), '-q', 'coverage', '--pir', str(PIR), '--task', 'ambigqa', '--method', 'amer',
                           '--model', str(tmp_path / 'm'), '--out', str(tmp_path / 'r.json')])
        assert a.fn(a) == 0
    finally: torch.set_num_threads(n)
    r = json.loads((tmp_path / 'r.json').read_text())
    assert r['method'] == 'amer' and r['n_queries'] == len(data[2]) and r['config']['model'] == str(tmp_path / 'm')
    assert {p['n_vectors'] for p in r['per_query']} == {2} and 0 <= r['hc@10'] <= r['hc@100'] <= 1
