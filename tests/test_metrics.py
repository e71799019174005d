"Metrics agree with trec_eval (pytrec_eval) and ir_measures; coverage, fusion, robustness and significance behave."
import json, math, random
import numpy as np
import pytest
import pytrec_eval
import ir_measures
from ir_measures import nDCG, R, RR, P, Success

from docbench_nb.records import Query, Run
from docbench_nb.evaluation.metrics import *

TOL = 1e-6
OURS = {'ndcg_cut_10': lambda r, q: ndcg_at_k(r, q, 10), 'ndcg_cut_5': lambda r, q: ndcg_at_k(r, q, 5),
        'recall_1': lambda r, q: recall_at_k(r, q, 1), 'recall_5': lambda r, q: recall_at_k(r, q, 5),
        'recall_10': lambda r, q: recall_at_k(r, q, 10), 'P_5': lambda r, q: precision_at_k(r, q, 5),
        'success_1': lambda r, q: success_at_k(r, q, 1), 'success_10': lambda r, q: success_at_k(r, q, 10)}
IRM = {nDCG@10: lambda r, q: ndcg_at_k(r, q, 10), nDCG@5: lambda r, q: ndcg_at_k(r, q, 5),
       R@1: lambda r, q: recall_at_k(r, q, 1), R@5: lambda r, q: recall_at_k(r, q, 5), R@10: lambda r, q: recall_at_k(r, q, 10)}


def trec_top(run, k):
    "The run cut to its top k per query in trec_eval's order (so trec_eval's uncut recip_rank becomes RR@k)."
    return {q: {d: s[d] for d in trec_ranking(s)[:k]} for q, s in run.items()}


def random_case(seed, n_q=40, n_docs=60, tie_levels=4):
    "Random graded qrels (incl. 0 and -1 judgments, multi-relevant, no-relevant queries) and a run with many ties."
    rng = random.Random(seed)
    docs = [f'd{i}' for i in range(n_docs)] + ['D1', 'd1a', 'ü-doc', 'z']   # mixed case / lengths / non-ASCII for byte order
    qrels, run = {}, {}
    for i in range(n_q):
        qid = f'q{i}'
        if i % 10 != 9:   # every 10th query only in the run (ignored by all)
            judged = rng.sample(docs, rng.randint(1, 8))
            qrels[qid] = {d: rng.choice([-1, 0, 1, 1, 2, 3]) for d in judged}
        if i % 7 != 3:    # some judged queries absent from the run (score 0 for us, omitted by trec_eval)
            ret = rng.sample(docs, rng.randint(0, 30))
            run[qid] = {d: float(rng.randint(0, tie_levels)) / 2 if tie_levels else rng.random() for d in ret}
    return qrels, run


def check_against_pytrec(qrels, run):
    ev = pytrec_eval.RelevanceEvaluator(qrels, set(OURS) | {'recip_rank'})
    ref = ev.evaluate(run)
    ref_rr10 = pytrec_eval.RelevanceEvaluator(qrels, {'recip_rank'}).evaluate(trec_top(run, 10))
    assert ref, 'reference evaluated nothing'
    for name, f in OURS.items():
        ours = f(run, qrels)
        assert set(ours) == set(qrels)
        for qid in qrels:
            if qid in ref: assert abs(ours[qid] - ref[qid][name]) < TOL, (name, qid, ours[qid], ref[qid][name])
            else: assert ours[qid] == 0.0, (name, qid)   # missing from run -> zero
    mrr, mrr_all = mrr_at_k(run, qrels, 10), mrr_at_k(run, qrels, 10 ** 9)
    ranks = rank_of_gold(run, qrels)
    for qid in ref:
        assert abs(mrr[qid] - ref_rr10[qid]['recip_rank']) < TOL, (qid, mrr[qid], ref_rr10[qid])
        assert abs(mrr_all[qid] - ref[qid]['recip_rank']) < TOL
        assert (ranks[qid] is None) == (ref[qid]['recip_rank'] == 0)
        if ranks[qid]: assert abs(1 / ranks[qid] - ref[qid]['recip_rank']) < TOL
    return ref


def check_against_ir_measures(qrels, run, tie_free):
    got = {(m.query_id, m.measure): m.value for m in ir_measures.iter_calc(list(IRM) + [RR@10], qrels, run)}
    assert got
    for meas, f in IRM.items():
        ours = f(run, qrels)
        for (qid, mm), v in got.items():
            if mm == meas: assert abs(ours[qid] - v) < TOL, (meas, qid, ours[qid], v)
    mrr = mrr_at_k(run, qrels, 10)
    if tie_free:
        for (qid, mm), v in got.items():
            if mm == RR@10: assert abs(mrr[qid] - v) < TOL, (qid, mrr[qid], v)
    # ir_measures' RR@k (MS MARCO provider) sorts ties by doc id ascending; given an explicitly
    # tie-free version of our trec_eval ranking it must agree with us on every run.
    strict = {q: {d: -float(i) for i, d in enumerate(trec_ranking(s))} for q, s in run.items()}
    rr = {m.query_id: m.value for m in ir_measures.iter_calc([RR@10], qrels, strict)}
    for qid, v in rr.items(): assert abs(mrr[qid] - v) < TOL, (qid, mrr[qid], v)


@pytest.mark.parametrize('seed', range(25))
def test_random_runs_with_ties_match_pytrec_eval_and_ir_measures(seed):
    qrels, run = random_case(seed)
    assert any(len(set(s.values())) < len(s) for s in run.values()), 'case must contain ties'
    check_against_pytrec(qrels, run)
    check_against_ir_measures(qrels, run, tie_free=False)


@pytest.mark.parametrize('seed', range(10))
def test_random_tie_free_runs_match_including_ir_measures_rr(seed):
    qrels, run = random_case(100 + seed, tie_levels=0)
    check_against_pytrec(qrels, run)
    check_against_ir_measures(qrels, run, tie_free=True)


def test_run_object_and_dict_give_same_results():
    qrels, run = random_case(7)
    for f in (lambda r: ndcg_at_k(r, qrels), lambda r: mrr_at_k(r, qrels, 10), lambda r: rank_of_gold(r, qrels)):
        assert f(Run(scores=run)) == f(run)


def test_tie_rule_is_trec_evals_and_differs_from_ir_measures_msmarco_rr():
    qrels = {'q': {'a': 1}}
    run = {'q': {'a': 1.0, 'b': 1.0}}   # trec_eval: b before a (doc id descending) -> RR 0.5
    assert trec_ranking(run['q']) == ['b', 'a']
    ref = pytrec_eval.RelevanceEvaluator(qrels, {'recip_rank'}).evaluate(run)['q']['recip_rank']
    assert ref == 0.5 and mrr_at_k(run, qrels, 10)['q'] == 0.5
    irm = ir_measures.calc_aggregate([RR@10], qrels, run)[RR@10]
    assert irm == 1.0   # documented divergence of ir_measures' MS MARCO RR on ties


def realistic_run(seed=0, n_q=100, n_docs=1000):
    "Dense-like scores over 1000 docs, rounded to 3 decimals (scattered ties), one gold doc per query near the top."
    rng = np.random.default_rng(seed)
    docs = [f'paper-{i:04d}' for i in range(n_docs)]
    run, qrels = {}, {}
    for i in range(n_q):
        s = np.round(rng.normal(0.3, 0.1, n_docs), 3)
        g = int(rng.integers(n_docs)); s[g] = round(float(s[g]) + rng.exponential(0.4), 3)
        run[f'q{i}'] = {d: float(v) for d, v in zip(docs, s)}
        qrels[f'q{i}'] = {docs[g]: 1}
    return qrels, run


def test_realistic_dense_like_run_matches():
    qrels, run = realistic_run()
    ref = check_against_pytrec(qrels, run)
    check_against_ir_measures(qrels, run, tie_free=False)
    assert 0.2 < np.mean([v['ndcg_cut_10'] for v in ref.values()]) < 0.95   # a non-degenerate run


def test_real_bm25_run_on_shared_dev_queries(shared_dir):
    "BM25 over the shared papers' main LaTeX files, queried with dev.jsonl at all levels; metrics equal trec_eval's."
    bm25s = pytest.importorskip('bm25s')
    ids, texts = [], []
    for d in sorted((shared_dir / 'corpus' / 'papers').iterdir()):
        tex = ' '.join(f.read_text(errors='replace') for f in sorted(d.rglob('*.tex')))[:100000]
        if tex.strip(): ids.append(d.name); texts.append(tex)
    retriever = bm25s.BM25(); retriever.index(bm25s.tokenize(texts, stopwords='en', show_progress=False), show_progress=False)
    queries = []
    for l in open(shared_dir / 'queries' / 'dev.jsonl'):
        d = json.loads(l)
        for lvl, t in enumerate([d['query']] + d['rephrasings']):
            queries.append(Query(f"{d['id']}@L{lvl}", t, [d['doc_id']], d['evidence_type'], lvl, d['id']))
    res, sc = retriever.retrieve(bm25s.tokenize([q.text for q in queries], stopwords='en', show_progress=False),
                                 k=len(ids), show_progress=False)
    run = Run(scores={q.id: {ids[j]: float(s) for j, s in zip(res[i], sc[i])} for i, q in enumerate(queries)})
    qrels = qrels_from_queries(queries)
    ref = check_against_pytrec(qrels, run.scores)
    check_against_ir_measures(qrels, run.scores, tie_free=False)
    ev = score_run(run, queries)
    ref_mean = np.mean([ref[q.id]['ndcg_cut_10'] for q in queries if q.level == 0])
    assert abs(ev['overall']['ndcg@10'] - ref_mean) < TOL and ev['overall']['n'] == 60
    assert set(ev['by_level']) == {'0', '1', '2', '3'} and set(ev['by_evidence_type']) == {'text', 'table', 'figure'}


# ---------------------------------------------------------------- score_run

def test_score_run_groups_and_missing_queries():
    qs = [Query('a', 't', ['d1'], 'text', 0, 'a'), Query('a@L1', 't', ['d1'], 'text', 1, 'a'),
          Query('b', 't', ['d2'], 'figure', 0, 'b'), Query('b@L1', 't', ['d2'], 'figure', 1, 'b'),
          Query('c', 't', ['d3', 'd4'], 'table', 0, 'c')]
    run = Run(scores={'a': {'d1': 3, 'd2': 2}, 'a@L1': {'d2': 3, 'd1': 2}, 'b': {'d9': 1, 'd8': 0.5, 'd2': 0.1},
                      'c': {'d4': 1, 'x': 0.5, 'd3': 0.2}})
    ev = score_run(run, qs)
    pq = {r['query_id']: r for r in ev['per_query']}
    assert [pq[q]['rank'] for q in ('a', 'a@L1', 'b', 'b@L1', 'c')] == [1, 2, 3, None, 1]
    assert pq['b@L1']['ndcg@10'] == 0 and pq['c']['gold'] == ['d3', 'd4'] and pq['b']['type'] == 'figure'
    assert ev['overall']['n'] == 3 and ev['by_level']['1']['n'] == 2
    assert math.isclose(ev['overall']['ndcg@10'], np.mean([1, 0.5, pq['c']['ndcg@10']]))
    assert math.isclose(ev['overall']['recall@1'], np.mean([1, 0, 0.5]))
    assert math.isclose(ev['by_level']['1']['mrr@10'], 0.25)
    assert ev['by_evidence_type']['figure']['recall@5'] == 1.0 and ev['by_level_and_type']['1']['figure']['recall@5'] == 0.0
    assert math.isclose(ev['macro_over_types']['ndcg@10'], ev['overall']['ndcg@10'])   # one query per type here
    # a different main_k / ks changes the names
    ev5 = score_run(run, qs, ks=(1, 3), main_k=5, ndcg_ks=(5,))
    assert list(ev5['overall']) == ['ndcg@5', 'recall@1', 'recall@3', 'mrr@5', 'n']


def test_score_run_refuses_queries_without_gold():
    with pytest.raises(ValueError, match="'x' has no gold"):
        score_run(Run(), [Query('x', 'q')])


# ---------------------------------------------------------------- robustness, coverage, fusion

def test_robustness_takes_worst_variant_per_group():
    qs = [Query(f'g{g}@L{l}', 't', [f'd{g}'], 'text', l, f'g{g}') for g in range(2) for l in range(3)]
    # group 0: gold at ranks 1, 2, 1 -> worst 1/log2(3); group 1: ranks 1, 1, 1 -> 1
    scores = {q.id: {q.doc_ids[0]: 1.0} for q in qs}
    scores['g0@L1'] = {'zz': 2.0, 'd0': 1.0}
    run = Run(scores=scores)
    assert math.isclose(robustness_at_k(run, qs), (1 / math.log2(3) + 1) / 2)
    assert robustness_at_k(run, qs, k=1, metric='recall') == 0.5
    assert robustness_at_k(run, qs, metric='mrr') == 0.75
    # without group ids each query is its own group -> plain mean
    solo = [Query(q.id, q.text, q.doc_ids, q.evidence_type, q.level) for q in qs]
    assert math.isclose(robustness_at_k(run, solo), np.mean(list(ndcg_at_k(run, qrels_from_queries(solo)).values())))


def test_hard_coverage_known_answers():
    persp = [{'a'}, {'b', 'c'}, {'d'}, set()]
    assert hard_coverage_at_k(['c', 'a', 'x'], persp, 10) == 0.5
    assert hard_coverage_at_k(['c', 'a', 'x'], persp, 1) == 0.25
    assert hard_coverage_at_k(['b', 'c', 'x', 'd', 'a'], persp, 4) == 0.5
    assert hard_coverage_at_k(['a', 'b', 'd'], [['a'], ['b'], ['d']], 3) == 1.0   # lists accepted too
    with pytest.raises(ValueError): hard_coverage_at_k(['a'], [])


def test_round_robin_known_answers():
    assert round_robin_fuse([['a', 'b', 'c'], ['a', 'd', 'e'], ['f', 'b']], 10) == ['a', 'f', 'b', 'd', 'c', 'e']
    assert round_robin_fuse([['a', 'b', 'c'], ['a', 'd', 'e'], ['f', 'b']], 4) == ['a', 'f', 'b', 'd']
    assert round_robin_fuse([['a', 'b']], 5) == ['a', 'b']
    assert round_robin_fuse([[], ['x']], 1) == ['x']
    assert round_robin_fuse([['a']], 0) == []
    r = [[f'l{i}-{j}' for j in range(20)] for i in range(3)]
    fused = round_robin_fuse(r, 10)
    assert fused == [f'l{i}-{j}' for j in range(4) for i in range(3)][:10] and len(set(fused)) == 10


# ---------------------------------------------------------------- significance

def test_identical_runs_p_is_one_both_paths():
    a = {f'q{i}': i / 30 for i in range(30)}
    assert paired_randomization_test(a, a)['p_value'] == 1.0                       # Monte Carlo path
    small = {f'q{i}': i / 5 for i in range(5)}
    assert paired_randomization_test(small, small)['p_value'] == 1.0               # exact path


def test_exact_randomization_known_answer():
    # diffs (1, 1, 1, 1): |mean| = 1 only for all-plus / all-minus -> p = 2/16
    a, b = {f'q{i}': 1.0 for i in range(4)}, {f'q{i}': 0.0 for i in range(4)}
    assert paired_randomization_test(a, b)['p_value'] == 2 / 16
    # diffs (3, 1): patterns give |mean| 2, 1, 1, 2 -> p = 2/4
    assert paired_randomization_test({'x': 3, 'y': 1}, {'x': 0, 'y': 0})['p_value'] == 0.5


def test_monte_carlo_p_approximates_exact():
    rng = np.random.default_rng(3)
    d = rng.normal(0.2, 1, 12)
    a, b = {f'q{i}': float(v) for i, v in enumerate(d)}, {f'q{i}': 0.0 for i in range(12)}
    exact = paired_randomization_test(a, b, n_resamples=2 ** 12)['p_value']
    mc = paired_randomization_test(a, b, n_resamples=2 ** 12 - 1, seed=5)['p_value']   # forces sampling
    assert abs(exact - mc) < 0.03, (exact, mc)


def test_strongly_different_runs_small_p_and_sign():
    rng = np.random.default_rng(0)
    a = {f'q{i}': float(v) for i, v in enumerate(rng.uniform(0.6, 1.0, 100))}
    b = {q: float(v) for q, v in zip(a, rng.uniform(0.0, 0.4, 100))}
    r = paired_randomization_test(a, b, n_resamples=5000)
    assert r['p_value'] <= 1 / 5001 + 1e-12 and r['mean_diff'] > 0.4
    assert paired_randomization_test(b, a, n_resamples=5000)['mean_diff'] == pytest.approx(-r['mean_diff'])
    # a small difference drowned in noise is not significant
    c = {q: v + float(e) for (q, v), e in zip(a.items(), rng.normal(0.005, 0.3, 100))}
    assert paired_randomization_test(a, c)['p_value'] > 0.05


def test_bootstrap_ci_covers_mean_and_shrinks():
    rng = np.random.default_rng(2)
    x = rng.uniform(0, 1, 400)
    lo, hi = bootstrap_ci(x)
    assert lo < x.mean() < hi
    se = x.std(ddof=1) / math.sqrt(len(x))
    assert abs((hi - lo) - 2 * 1.96 * se) < 0.25 * (2 * 1.96 * se)   # close to the normal-theory width
    lo2, hi2 = bootstrap_ci(x[:40])
    assert hi2 - lo2 > hi - lo
    assert bootstrap_ci([0.5] * 10) == (0.5, 0.5)
    assert bootstrap_ci(x, seed=1) == bootstrap_ci(x, seed=1)
    with pytest.raises(ValueError): bootstrap_ci([])


def test_compare_runs_on_score_run_results():
    qs = [Query(f'q{i}', 't', [f'd{i}'], 'text') for i in range(40)]
    good = Run(scores={q.id: {q.doc_ids[0]: 1.0, 'x': 0.5} for q in qs})
    bad = Run(scores={q.id: ({'x': 1.0, q.doc_ids[0]: 0.5} if i % 2 else {}) for i, q in enumerate(qs)})
    c = compare_runs(score_run(good, qs), score_run(bad, qs), metric='ndcg@10')
    assert c['n'] == 40 and c['mean_a'] == 1.0
    assert math.isclose(c['mean_b'], 0.5 / math.log2(3)) and math.isclose(c['mean_diff'], 1 - 0.5 / math.log2(3))
    assert c['ci_lo'] <= c['mean_diff'] <= c['ci_hi'] and c['p_value'] < 0.001
    c2 = compare_runs(ndcg_at_k(good, qrels_from_queries(qs)), ndcg_at_k(bad, qrels_from_queries(qs)))
    assert c2 == c
    with pytest.raises(ValueError, match='different queries'):
        compare_runs({'a': 1.0}, {'a': 1.0, 'b': 0.0})


# ---------------------------------------------------------------- graded relevance end to end (Query.grades)

def graded_case(seed, n_q=30, n_docs=40):
    """Graded `Query` objects (grades 1-4, some docs ungraded = 1, several docs sharing a grade), the same judgments
    plus judged-non-relevant 0s as pytrec_eval qrels, and a run with many score ties."""
    rng = random.Random(seed)
    docs = [f'd{i}' for i in range(n_docs)] + ['D1', 'd1a', 'ü-doc', 'z']
    queries, qrels, run = [], {}, {}
    for i in range(n_q):
        qid = f'q{i}'
        judged = rng.sample(docs, rng.randint(2, 9))
        gold = judged[:max(1, len(judged) - 2)]
        grades = {d: rng.choice([1, 2, 2, 3, 4]) for d in gold if rng.random() < 0.8}   # the rest: grade 1 by default
        queries.append(Query(qid, 't', gold, 'text', 0, qid, grades=grades))
        qrels[qid] = {**{d: grades.get(d, 1) for d in gold}, **{d: 0 for d in judged if d not in gold}}
        if i % 9 != 4:                                   # some queries missing from the run
            ret = rng.sample(docs, rng.randint(0, 25)) + gold[:1]
            run[qid] = {d: rng.randint(0, 3) / 2 for d in ret}
    return queries, qrels, run


@pytest.mark.parametrize('seed', range(8))
def test_graded_queries_match_pytrec_eval_ndcg_cut_per_query(seed):
    queries, qrels, run = graded_case(seed)
    assert any(len(set(s.values())) < len(s) for s in run.values()), 'case must contain ties'
    assert any(len(set(q.grades.values())) > 1 for q in queries), 'case must mix grades'
    # the qrels docbench builds are the graded judgments without the 0s (which change none of these measures)
    assert qrels_from_queries(queries) == {q: {d: g for d, g in r.items() if g > 0} for q, r in qrels.items()}
    ref = pytrec_eval.RelevanceEvaluator(qrels, {'ndcg_cut_10', 'ndcg_cut_5', 'recall_1', 'recall_5', 'recall_10'}).evaluate(run)
    ref_rr = pytrec_eval.RelevanceEvaluator(qrels, {'recip_rank'}).evaluate(trec_top(run, 10))
    per = {r['query_id']: r for r in score_run(Run(scores=run), queries)['per_query']}
    nd = ndcg_at_k(run, qrels_from_queries(queries), 10)
    for q in queries:
        r = ref.get(q.id)
        if r is None:                                    # not in the run: trec_eval omits it, docbench scores 0
            assert per[q.id]['ndcg@10'] == nd[q.id] == 0.0; continue
        for ours, theirs in (('ndcg@10', 'ndcg_cut_10'), ('ndcg@5', 'ndcg_cut_5'), ('recall@1', 'recall_1'),
                             ('recall@5', 'recall_5'), ('recall@10', 'recall_10')):
            assert abs(per[q.id][ours] - r[theirs]) < 1e-9, (q.id, ours, per[q.id][ours], r[theirs])
        assert abs(nd[q.id] - r['ndcg_cut_10']) < 1e-9
        assert abs(per[q.id]['mrr@10'] - ref_rr[q.id]['recip_rank']) < 1e-9
    # grades matter: the same queries read as binary give other nDCG values on some queries
    binary = [Query(q.id, q.text, q.doc_ids, q.evidence_type, q.level, q.group_id) for q in queries]
    nb = ndcg_at_k(run, qrels_from_queries(binary), 10)
    assert any(abs(nb[q] - nd[q]) > 1e-6 for q in nd)
    rb = recall_at_k(run, qrels_from_queries(binary), 10)
    assert rb == recall_at_k(run, qrels_from_queries(queries), 10)   # recall counts grade >= 1 alike


def test_graded_ties_known_answer_and_robustness():
    # grades 3, 2, 2, 1; the run ties b and c at 0.5 (trec_eval order: doc id descending -> c, b)
    q = Query('g', 't', ['a', 'b', 'c', 'd'], grades={'a': 3, 'b': 2, 'c': 2})
    run = Run(scores={'g': {'d': 0.9, 'b': 0.5, 'c': 0.5, 'x': 0.4, 'a': 0.1}})
    dcg = 1 / math.log2(2) + 2 / math.log2(3) + 2 / math.log2(4) + 3 / math.log2(6)
    idcg = 3 / math.log2(2) + 2 / math.log2(3) + 2 / math.log2(4) + 1 / math.log2(5)
    ev = score_run(run, [q])['per_query'][0]
    assert abs(ev['ndcg@10'] - dcg / idcg) < 1e-12 and ev['mrr@10'] == 1.0 and ev['recall@1'] == 0.25
    ref = pytrec_eval.RelevanceEvaluator({'g': q.judgments()}, {'ndcg_cut_10'}).evaluate(run.scores)['g']['ndcg_cut_10']
    assert abs(ev['ndcg@10'] - ref) < 1e-9
    # robustness: the worst variant of a graded group, with the variants' own grades
    v = Query('g@L1', 't', ['a', 'b', 'c', 'd'], level=1, group_id='g', grades={'a': 3, 'b': 2, 'c': 2})
    g0 = Query('g', 't', ['a', 'b', 'c', 'd'], group_id='g', grades={'a': 3, 'b': 2, 'c': 2})
    run2 = Run(scores={'g': run.scores['g'], 'g@L1': {'a': 1.0}})
    assert abs(robustness_at_k(run2, [g0, v]) - min(dcg / idcg, 3 / idcg)) < 1e-12
    with pytest.raises(ValueError, match='different judgments'):
        qrels_from_queries([g0, Query('g', 't', ['a', 'b', 'c', 'd'])])
