"""Coverage: HC@k, coverage by rank and the fusions against hand-computed cases; the PIR loader on the shared file;
`docbench coverage` end to end through its argparse parser."""
import argparse, json
from pathlib import Path
import numpy as np
import pytest
from docbench_nb.coverage.measures import (first_gold_ranks, coverage_at, coverage_by_rank, fuse, vector_rankings, evaluate_coverage,
                                  add_coverage_parsers, doc_scores, DocVectors, METHODS)
from docbench_nb.evaluation.metrics import round_robin_fuse
from docbench_nb.coverage.perspectives import (Perspective, PerspectiveQuery, load_pir, pir_tasks, load_perspective_queries,
                                      write_perspective_beir, read_perspective_beir, split_queries)
from docbench_nb.evaluation.formats import DataFileError

SHARED = Path(__file__).resolve().parents[2] / 'shared'
PIR = SHARED / 'pir' / 'pir_demo_dev.json'
needs_pir = pytest.mark.skipif(not PIR.is_file(), reason='../shared/pir not present')


def test_hard_coverage_hand_computed():
    ranked = ['d3', 'd1', 'd7', 'd2', 'd9']
    gold = [{'d1'}, {'d2', 'd8'}, {'d5'}, {'d9', 'd3'}]
    assert first_gold_ranks(ranked, gold) == [2, 4, None, 1]
    assert coverage_at(ranked, gold, ks=(1, 2, 4, 5)) == {'hc@1': 0.25, 'hc@2': 0.5, 'hc@4': 0.75, 'hc@5': 0.75}
    # a gold doc ranked twice counts at its first rank; an empty ranking covers nothing
    assert first_gold_ranks(['a', 'a', 'b'], [{'b'}]) == [3]
    assert coverage_at([], [{'a'}], ks=(10,)) == {'hc@10': 0.0}


def test_coverage_by_rank_sorts_within_query():
    curve = coverage_by_rank([[5, None, 1], [30, 2]], k=10)
    # query 1 sorted: 1, 5, inf; query 2 sorted: 2, 30
    assert curve == [{'position': 1, 'covered': 1.0, 'n_queries': 2}, {'position': 2, 'covered': 0.5, 'n_queries': 2},
                     {'position': 3, 'covered': 0.0, 'n_queries': 1}]


def test_round_robin_amer_semantics():
    # rank 0: a (list 0), x (list 1), a again (list 2, skipped); rank 1: b, a (skipped), y; rank 2: c ...
    lists = [['a', 'b', 'c'], ['x', 'a', 'z'], ['a', 'y', 'b']]
    assert round_robin_fuse(lists, 10) == ['a', 'x', 'b', 'y', 'c', 'z']
    assert round_robin_fuse(lists, 3) == ['a', 'x', 'b']
    docs = ['a', 'b', 'c', 'x', 'y', 'z']
    S = np.array([[.9, .8, .7, 0, 0, 0], [.5, 0, 0, .9, 0, .1], [.9, .1, 0, 0, .5, 0]])
    assert vector_rankings(S, docs, 3)[1] == ['x', 'a', 'z']
    assert fuse(S, docs, 4, 'rr') == ['a', 'x', 'b', 'y']


def test_rrf_and_sum_hand_computed():
    docs = ['a', 'b', 'c']
    S = np.array([[3., 2., 1.], [1., 3., 2.]])
    # sums: a 4, b 5, c 3; RRF (c=60): a 1/61+1/63, b 1/62+1/61, c 1/63+1/62
    assert fuse(S, docs, 3, 'sum') == ['b', 'a', 'c']
    assert fuse(S, docs, 3, 'rrf') == ['b', 'a', 'c']
    with pytest.raises(ValueError, match="scores for 3 docs but 2"):
        fuse(S, docs[:2], 2)


def test_doc_scores_max_over_units():
    dv = DocVectors(np.array([[1., 0], [0, 1], [.6, .8]], dtype=np.float32), np.array([0, 2]), ['p', 'q'], {})
    np.testing.assert_allclose(doc_scores(dv, np.array([[0., 1.]])), [[1.0, 0.8]])


def test_perspective_beir_round_trip(tmp_path):
    qs = [PerspectiveQuery('q1', 'x?', [Perspective('one', ['a', 'b'], 'l1', {'k': 1}), Perspective('two', ['b'])], 'src')]
    corpus = {'a': 'alpha', 'b': 'beta'}
    write_perspective_beir(tmp_path, corpus, qs)
    assert read_perspective_beir(tmp_path) == (corpus, qs)
    (tmp_path / 'qrels' / 'test-perspectives.tsv').write_text('query-id\tcorpus-id\tscore\tperspective\nq1\tzz\t1\t0\n')
    with pytest.raises(DataFileError, match="'zz' is not in corpus"):
        read_perspective_beir(tmp_path)


@needs_pir
def test_pir_loader_on_shared_file():
    raw = json.loads(PIR.read_text())
    assert set(pir_tasks(PIR)) >= {'perspectrum', 'ambigqa'}
    for task in ('perspectrum', 'ambigqa'):
        qs, corpus = load_pir(PIR, task)
        t = raw[task]
        assert len(corpus) == len(t['corpus']) and len(qs) == len(set(t['source_queries']))
        assert sum(len(q.perspectives) for q in qs) == len(t['queries'])
        for q in qs:
            for p in q.perspectives:
                i = p.meta['pir_index']
                assert t['source_queries'][i] == q.query and t['queries'][i] == p.text and t['perspectives'][i] == p.label
                assert [corpus[d] for d in p.doc_ids] == [t['corpus'][g] for g in t['key_ref'][str(i)]]
        assert max(len(q.perspectives) for q in qs) >= 3
    with pytest.raises(ValueError, match="no PIR task 'nope'"):
        load_pir(PIR, 'nope')


@needs_pir
def test_split_is_disjoint_and_seeded():
    qs, _ = load_pir(PIR, 'ambigqa')
    tr, te = split_queries(qs, 0.5, seed=1)
    assert not {q.id for q in tr} & {q.id for q in te} and len(tr) + len(te) == len(qs)
    assert split_queries(qs, 0.5, seed=1) == (tr, te) and split_queries(qs, 0.5, seed=2) != (tr, te)


def _parser():
    ap = argparse.ArgumentParser(prog='docbench')
    ap.add_argument('--cache-dir'); ap.add_argument('-q', '--quiet', action='store_true')
    add_coverage_parsers(ap.add_subparsers(dest='cmd', required=True))
    return ap


@needs_pir
@pytest.mark.slow
def test_cli_coverage_naive_on_pir_task(tmp_path):
    out = tmp_path / 'r.json'
    args = _parser().parse_args(['--cache-dir', str(tmp_path / 'cache'), '-q', 'coverage', '--pir', str(PIR), '--task', 'ambigqa',
                                 '--method', 'naive', '--out', str(out)])
    assert args.fn(args) == 0
    r = json.loads(out.read_text())
    qs, _ = load_pir(PIR, 'ambigqa')
    assert (r['n_queries'], r['n_perspectives']) == (len(qs), sum(len(q.perspectives) for q in qs))
    assert 0 < r['hc@10'] <= r['hc@20'] <= r['hc@100'] <= 1
    committed = json.loads((Path(__file__).resolve().parents[1] / 'results' / 'coverage' / 'ambigqa__naive.json').read_text())
    for k in ('hc@10', 'hc@20', 'hc@100'):                    # the committed table's values, same task, method and encoder
        assert r[k] == pytest.approx(committed[k], abs=0.01), (k, r[k], committed[k])
    assert len(r['per_query']) == len(qs)
    assert r['hc@10'] == pytest.approx(np.mean([p['hc@10'] for p in r['per_query']]))      # macro over queries
    # the per-query value agrees with the definition on the stored ranking
    q0, p0 = qs[0], r['per_query'][0]
    assert p0['id'] == q0.id and p0['n_vectors'] == 1
    for stored, seen in zip(p0['first_gold_rank'], first_gold_ranks(p0['top10'], q0.gold_sets), strict=True):
        assert stored == seen if seen is not None else (stored is None or stored > 10)   # beyond the top 10: not in top10


@needs_pir
@pytest.mark.slow
def test_cli_spin_ablation_trains_per_cell_and_evaluates_the_held_out_task(tmp_path):
    out = tmp_path / 'abl.json'
    args = _parser().parse_args(['--cache-dir', str(tmp_path / 'cache'), '-q', 'spin', 'ablation', '--pir', str(PIR), '--task', 'story',
                                 '--eval-task', 'ambigqa', '--layers', 'early,late', '--ms', '2', '--epochs', '1', '--k', '10,100',
                                 '--out', str(out)])
    assert args.fn(args) == 0
    r = json.loads(out.read_text())
    assert (r['train'], r['test']) == (['story'], 'ambigqa')
    assert [(x['layer'], x['m']) for x in r['rows']] == [('early', 2), ('late', 2)]
    assert r['rows'][0]['block'] < r['rows'][1]['block']                  # early injects before late
    for x in r['rows']:
        assert x['n_params'] == 2 * 384 and x['epochs'] == 1 and 0 < x['hc@10'] <= x['hc@100'] <= 1


def test_cli_rejects_bad_arguments(tmp_path):
    ap = _parser()
    a = ap.parse_args(['coverage', '--queries', 'q.jsonl'])
    with pytest.raises(ValueError, match='--corpus SRC --queries FILE'):
        a.fn(a)
    a = ap.parse_args(['coverage', '--pir', 'x.json', '--task', 't', '--k', '10,abc'])
    with pytest.raises(ValueError, match="--k '10,abc'"):
        a.fn(a)
    with pytest.raises(SystemExit):
        ap.parse_args(['coverage', '--method', 'magic'])
    assert set(METHODS) == {'naive', 'expansion', 'random', 'finetuned', 'spin', 'amer', 'oracle'}


def test_evaluate_coverage_goes_through_the_evaluation_core(monkeypatch, tmp_path):
    "Coverage indexes and searches through `evaluation.core.run_units` (once), and scores the round-robin run it returns."
    import docbench_nb.coverage.measures as M
    from docbench_nb.retrieval.encoders import HFTextEncoder, EmbeddingCache
    calls, real = [], M.run_units
    def spy(units, queries, retriever, k, **kw):
        out = real(units, queries, retriever, k, **kw); calls.append((len(units), k, out)); return out
    monkeypatch.setattr(M, 'run_units', spy)
    corpus = {'d-bird': 'Wind farms kill migrating birds and bats.', 'd-cost': 'Subsidies for renewables raise household energy bills.',
              'd-cat': 'A cat sleeps most of the day.', 'd-sun': 'Solar panels make cheap electricity on sunny roofs.'}
    q = [PerspectiveQuery('w', 'What are the downsides of wind farms?', [Perspective('harm to migrating birds', ['d-bird']),
                                                                       Perspective('higher electricity bills', ['d-cost'])])]
    r = evaluate_coverage(q, corpus, 'oracle', encoder=HFTextEncoder(), cache=EmbeddingCache(tmp_path), ks=(1, 2, 3))
    assert [(n, k) for n, k, _ in calls] == [(4, 3)]
    ret, run, timings, warnings = calls[0][2]
    assert r['per_query'][0]['top10'] == run.ranking('w') == ret.fused['w']['rr'] and warnings == []
    assert (r['n_units'], r['per_query'][0]['n_vectors']) == (4, 2) and r['hc@2'] == 1.0
