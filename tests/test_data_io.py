"Query loading (shared format, BEIR), line-precise errors, and exact round trips of BEIR folders, TREC runs and qrels."
import json, random
from collections import Counter
import pytest
import pytrec_eval

from docbench_nb.records import Query, Run
from docbench_nb.evaluation.metrics import ndcg_at_k, recall_at_k, mrr_at_k, qrels_from_queries, trec_ranking
from docbench_nb.evaluation.formats import *

KNOWN = ['alpha-paper', 'beta-paper', 'gamma-paper']


def rec(i, doc='alpha-paper', **kw):
    r = {'id': f'Q{i}', 'doc_id': doc, 'evidence_type': 'text', 'query': f'question number {i}?',
         'rephrasings': [f'q {i} reworded', f'q {i} reordered', f'q {i} restructured'], 'answer': f'a{i}'}
    r.update(kw)
    return r


def write_lines(path, lines):
    path.write_text('\n'.join(l if isinstance(l, str) else json.dumps(l) for l in lines) + '\n')
    return path


# ---------------------------------------------------------------- shared dev files

def test_shared_dev_queries_load_240_with_types(shared_dir):
    manifest = [json.loads(l)['id'] for l in open(shared_dir / 'corpus' / 'manifest.jsonl')]
    qs = load_queries(shared_dir / 'queries' / 'dev.jsonl', known_doc_ids=manifest)
    raw = [json.loads(l) for l in open(shared_dir / 'queries' / 'dev.jsonl')]
    assert len(qs) == 240 and len(raw) == 60
    assert Counter(q.level for q in qs) == {0: 60, 1: 60, 2: 60, 3: 60}
    assert {q.evidence_type for q in qs} == {'text', 'table', 'figure'}
    by_id = {q.id: q for q in qs}
    for r in raw:
        base = by_id[r['id']]
        assert base.level == 0 and base.text == r['query'] and base.doc_ids == [r['doc_id']] and base.group_id == r['id']
        assert base.meta['answer'] == r['answer'] and base.meta['evidence_locator'] == r['evidence_locator']
        for i, t in enumerate(r['rephrasings']):
            v = by_id[f"{r['id']}@L{i + 1}"]
            assert (v.text, v.level, v.group_id, v.evidence_type, v.doc_ids) == (t, i + 1, r['id'], r['evidence_type'], [r['doc_id']])
    assert len(load_queries(shared_dir / 'queries' / 'dev.jsonl', levels=(0, 3))) == 120


def test_shared_perspective_queries(shared_dir):
    manifest = [json.loads(l)['id'] for l in open(shared_dir / 'corpus' / 'manifest.jsonl')]
    ps = load_perspective_queries(shared_dir / 'queries' / 'dev_perspectives.jsonl', known_doc_ids=manifest)
    raw = [json.loads(l) for l in open(shared_dir / 'queries' / 'dev_perspectives.jsonl')]
    assert len(ps) == len(raw) == 12
    for p, r in zip(ps, raw):
        assert p['id'] == r['id'] and p['query'] == r['query'] and 2 <= len(p['perspectives']) <= 4
        assert [x['doc_ids'] for x in p['perspectives']] == [x['doc_ids'] for x in r['perspectives']]
        assert all(x['text'] for x in p['perspectives'])


# ---------------------------------------------------------------- errors name the line

def test_errors_name_file_and_lines(tmp_path):
    f = write_lines(tmp_path / 'queries.jsonl', [rec(1), rec(2, doc='gamma-papr'), '{"id": "Q3", "doc_id": "alpha-paper", "query": "trunc',
                                                  rec(4)])
    with pytest.raises(QueryFileError) as ei:
        load_queries(f, known_doc_ids=KNOWN)
    e = ei.value
    msg = str(e)
    assert str(f) in msg
    assert [ln for ln, _ in e.problems] == [2, 3]
    assert "line 2: query 'Q2': unknown doc id 'gamma-papr' (did you mean 'gamma-paper'?)" in msg
    assert "line 3: bad JSON" in msg
    assert isinstance(e, ValueError)
    # without known ids, only the broken JSON remains
    with pytest.raises(QueryFileError) as ei:
        load_queries(f)
    assert [ln for ln, _ in ei.value.problems] == [3]


@pytest.mark.parametrize('bad,expect', [
    ({'id': 'Q9', 'doc_id': 'alpha-paper', 'query': '   '}, "missing or empty 'query'"),
    ({'id': 'Q9', 'query': 'x?'}, "missing 'doc_id'"),
    ({'id': 'Q9', 'doc_ids': [], 'query': 'x?'}, "empty 'doc_ids'"),
    ({'id': 'Q9', 'doc_ids': 'alpha-paper', 'query': 'x?'}, "'doc_ids' must be a list"),
    ({'doc_id': 'alpha-paper', 'query': 'x?'}, "missing or empty 'id'"),
    ({'id': 'Q9', 'doc_id': 'alpha-paper', 'query': 'x?', 'rephrasings': ['ok', '']}, "rephrasings[1] (level 2) is empty"),
    ({'id': 'Q9', 'doc_id': 'alpha-paper', 'query': 'x?', 'rephrasings': 'one'}, "'rephrasings' must be a list"),
    ({'id': 'Q9', 'doc_id': 'alpha-paper', 'query': 'x?', 'evidence_type': ''}, "'evidence_type' must be"),
    ('[1, 2]', 'expected a JSON object, got list'),
    (rec(1), "duplicate query id 'Q1' (first on line 1)"),
])
def test_each_kind_of_bad_record_is_reported_with_its_line(tmp_path, bad, expect):
    f = write_lines(tmp_path / 'q.jsonl', [rec(1), '', bad])   # blank line 2 is skipped; the bad record is line 3
    with pytest.raises(QueryFileError) as ei:
        load_queries(f)
    assert ei.value.problems[0][0] == 3 and expect in ei.value.problems[0][1], str(ei.value)


def test_non_utf8_and_empty_files(tmp_path):
    f = tmp_path / 'q.jsonl'
    f.write_bytes(json.dumps(rec(1)).encode() + b'\n{"id": "\xff"}\n')
    with pytest.raises(QueryFileError, match=r'line 2: not UTF-8'):
        load_queries(f)
    (tmp_path / 'e.jsonl').write_text('\n\n')
    with pytest.raises(QueryFileError, match='no queries'):
        load_queries(tmp_path / 'e.jsonl')


def test_doc_ids_list_and_int_ids(tmp_path):
    f = write_lines(tmp_path / 'q.jsonl', [{'id': 7, 'doc_ids': ['beta-paper', 'gamma-paper', 'beta-paper'], 'query': ' multi? '}])
    (q,) = load_queries(f, known_doc_ids=KNOWN)
    assert (q.id, q.doc_ids, q.text, q.level, q.group_id, q.evidence_type) == ('7', ['beta-paper', 'gamma-paper'], 'multi?', 0, '7', None)


def test_perspective_errors(tmp_path):
    ok = {'id': 'P1', 'query': 'open question?', 'perspectives': [{'text': 'view one', 'doc_ids': ['alpha-paper']}]}
    f = write_lines(tmp_path / 'p.jsonl', [ok, {'id': 'P2', 'query': 'q?', 'perspectives': []},
                                           {'id': 'P3', 'query': 'q?', 'perspectives': [{'text': '', 'doc_ids': ['zeta']}]}])
    with pytest.raises(QueryFileError) as ei:
        load_perspective_queries(f, known_doc_ids=KNOWN)
    msg = str(ei.value)
    assert "line 2: query 'P2': 'perspectives' must be a non-empty list" in msg
    assert "line 3: query 'P3': perspectives[0] has no 'text'" in msg and "line 3: query 'P3': perspectives[0]: unknown doc id 'zeta'" in msg


# ---------------------------------------------------------------- BEIR

def make_queries():
    qs = []
    for i, (d, t) in enumerate([('alpha-paper', 'text'), ('beta-paper', 'table'), ('gamma-paper', 'figure')]):
        qs.append(Query(f'Q{i}', f'base {i} — ü', [d], t, 0, f'Q{i}', {'answer': f'a{i}', 'n': i}))
        qs.append(Query(f'Q{i}@L1', f'reworded {i}', [d], t, 1, f'Q{i}', {'answer': f'a{i}', 'n': i}))
    qs.append(Query('M', 'two gold', ['alpha-paper', 'gamma-paper'], 'text', 0, 'M'))
    return qs


CORPUS = {'alpha-paper': {'title': 'Alpha', 'text': 'alpha body'}, 'beta-paper': {'title': 'Beta', 'text': 'beta body', 'year': 2020},
          'gamma-paper': {'title': '', 'text': 'gamma body ∑'}}


def test_beir_round_trip(tmp_path):
    qs = make_queries()
    write_beir(tmp_path, CORPUS, qs)
    assert (tmp_path / 'qrels' / 'test.tsv').read_text().splitlines()[0] == 'query-id\tcorpus-id\tscore'
    corpus, queries, qrels = read_beir(tmp_path)
    assert corpus == CORPUS and queries == qs and qrels == qrels_from_queries(qs)
    assert load_queries(tmp_path, known_doc_ids=CORPUS) == qs
    assert load_queries(tmp_path / 'queries.jsonl', levels=(1,)) == [q for q in qs if q.level == 1]
    # graded qrels, another split, a query without judgments in that split (dropped, as BEIR evaluation does)
    graded = {'Q0': {'alpha-paper': 2, 'beta-paper': 0}, 'Q1': {'beta-paper': 1}}
    write_beir(tmp_path / 'g', CORPUS, qs, qrels=graded, split='dev')
    corpus, queries, qrels = read_beir(tmp_path / 'g', split='dev')
    assert qrels == graded and [q.id for q in queries] == ['Q0', 'Q1'] and queries[0].doc_ids == ['alpha-paper']
    assert not list(tmp_path.rglob('*.tmp'))


def test_beir_plain_files_and_qrels_errors(tmp_path):
    # a BEIR dataset written by someone else: no metadata, integer ids, TREC-style qrels passed explicitly
    write_lines(tmp_path / 'queries.jsonl', [{'_id': 1, 'text': 'first'}, {'_id': '2', 'text': 'second'}, {'_id': '3', 'text': 'unjudged'}])
    write_trec_qrels({'1': {'alpha-paper': 1}, '2': {'beta-paper': 1, 'gamma-paper': 0}}, tmp_path / 'qrels.trec')
    qs = load_queries(tmp_path / 'queries.jsonl', qrels=tmp_path / 'qrels.trec', known_doc_ids=KNOWN)
    assert [(q.id, q.doc_ids, q.level) for q in qs] == [('1', ['alpha-paper'], 0), ('2', ['beta-paper'], 0)]
    # no qrels anywhere: all queries, no gold
    assert [q.doc_ids for q in load_queries(tmp_path / 'queries.jsonl')] == [[], [], []]
    (tmp_path / 'bad.tsv').write_text('query-id\tcorpus-id\tscore\n1\talpha-paper\t1\n2\tbeta-papr\t1\n3\tx\n')
    with pytest.raises(QueryFileError) as ei:
        load_queries(tmp_path / 'queries.jsonl', qrels=tmp_path / 'bad.tsv', known_doc_ids=KNOWN)
    msg = str(ei.value)
    assert 'bad.tsv' in msg and "line 3: query '2': unknown doc id 'beta-papr' (did you mean 'beta-paper'?)" in msg and 'line 4: expected' in msg


# ---------------------------------------------------------------- TREC

def random_run(seed, n_q=20, n_d=50):
    rng = random.Random(seed)
    return Run(scores={f'q{i}': {f'd{j}': rng.choice([rng.random(), 0.5, 1e-17, -3.25, 1 / 3]) for j in rng.sample(range(n_d), rng.randint(1, 40))}
                       for i in range(n_q)},
               provenance={'q0': {'d1': 'd1#chunk3'}}, name='bm25-test')


def test_trec_run_round_trip_is_exact_and_provenance_less(tmp_path):
    run = random_run(0)
    write_trec_run(run, tmp_path / 'r.run')
    back = read_trec_run(tmp_path / 'r.run')
    assert back.scores == run.scores and back.provenance == {} and back.name == 'bm25-test'
    # the file's rank column follows trec_eval order, ties by doc id descending
    lines = [l.split() for l in (tmp_path / 'r.run').read_text().splitlines() if l.startswith('q3 ')]
    assert [l[2] for l in lines] == trec_ranking(run.scores['q3']) and [int(l[3]) for l in lines] == list(range(1, len(lines) + 1))
    write_trec_run(run, tmp_path / 'r5.run', tag='cut', depth=5)
    cut = read_trec_run(tmp_path / 'r5.run')
    assert cut.name == 'cut' and all(list(cut.scores[q]) == trec_ranking(run.scores[q])[:5] for q in run.scores)


def test_trec_run_file_evaluated_by_pytrec_eval_equals_our_metrics(tmp_path):
    run = random_run(1)
    rng = random.Random(1)
    qrels = {q: {f'd{j}': rng.choice([0, 1, 1, 2]) for j in rng.sample(range(50), 6)} for q in run.scores}
    write_trec_run(run, tmp_path / 'r.run')
    write_trec_qrels(qrels, tmp_path / 'q.qrels')
    with open(tmp_path / 'r.run') as f: p_run = pytrec_eval.parse_run(f)
    with open(tmp_path / 'q.qrels') as f: p_qrels = pytrec_eval.parse_qrel(f)
    assert p_qrels == qrels == read_trec_qrels(tmp_path / 'q.qrels')
    ref = pytrec_eval.RelevanceEvaluator(p_qrels, {'ndcg_cut_10', 'recall_5', 'recip_rank'}).evaluate(p_run)
    back = read_trec_run(tmp_path / 'r.run')
    nd, rc, rr = ndcg_at_k(back, qrels, 10), recall_at_k(back, qrels, 5), mrr_at_k(back, qrels, 10 ** 6)
    for q in qrels:
        assert abs(nd[q] - ref[q]['ndcg_cut_10']) < 1e-6 and abs(rc[q] - ref[q]['recall_5']) < 1e-6 and abs(rr[q] - ref[q]['recip_rank']) < 1e-6


def test_trec_errors_name_lines(tmp_path):
    (tmp_path / 'bad.run').write_text('q1 Q0 a 1 0.5 t\nq1 Q0 b 2 0.4\nq1 Q0 a 3 0.3 t\nq2 Q0 c 1 nan t\nq2 Q0 d 2 x t\n')
    with pytest.raises(DataFileError) as ei:
        read_trec_run(tmp_path / 'bad.run')
    assert [ln for ln, _ in ei.value.problems] == [2, 3, 4, 5] and 'bad.run, line 3: duplicate doc' in str(ei.value)
    (tmp_path / 'bad.qrels').write_text('q1 0 a 1\nq1 0 b high\n')
    with pytest.raises(DataFileError, match=r"bad.qrels, line 2: relevance 'high'"):
        read_trec_qrels(tmp_path / 'bad.qrels')
    with pytest.raises(ValueError, match='whitespace'):
        write_trec_run(Run(scores={'q 1': {'a': 1.0}}), tmp_path / 'x.run')
    assert not (tmp_path / 'x.run').exists() and not list(tmp_path.glob('.*.tmp'))


# ---------------------------------------------------------------- review fixes

def test_queries_judged_only_zero_warn_unless_a_report_is_asked(tmp_path):
    import warnings
    write_lines(tmp_path / 'queries.jsonl', [{'_id': 'q1', 'text': 'first'}, {'_id': 'q2', 'text': 'second'}, {'_id': 'q3', 'text': 'third'}])
    write_trec_qrels({'q1': {'alpha-paper': 1}, 'q2': {'beta-paper': 0}, 'q3': {'gamma-paper': 0, 'beta-paper': 0}}, tmp_path / 'qrels.trec')
    with pytest.warns(UserWarning, match=r"2 queries in .*queries.jsonl judged only non-relevant \(score 0\) were skipped, e.g. 'q2', 'q3'"):
        qs = load_queries(tmp_path / 'queries.jsonl', qrels=tmp_path / 'qrels.trec')
    assert [q.id for q in qs] == ['q1']
    rep = {}
    with warnings.catch_warnings():
        warnings.simplefilter('error')                                 # asked for the counts: no warning
        load_queries(tmp_path / 'queries.jsonl', qrels=tmp_path / 'qrels.trec', report=rep)
    assert rep['n_no_positive'] == 2 and rep['no_positive'] == ['q2', 'q3']


def test_did_you_mean_only_for_the_printed_problems_and_bounded(tmp_path, monkeypatch):
    import difflib
    from docbench_nb.evaluation import formats as data_io
    long_id = 'paper-' + 'x' * 300
    known = [f'paper-{i:03d}' for i in range(100)] + [long_id]
    write_lines(tmp_path / 'queries.jsonl', [{'_id': f'q{i}', 'text': f'query {i}'} for i in range(40)])
    (tmp_path / 'qrels.tsv').write_text('query-id\tcorpus-id\tscore\n' + ''.join(f'q{i}\tpaper-{i:03d}z\t1\n' for i in range(39))
                                        + 'q39\t' + long_id + 'z\t1\n')
    calls = []
    real = difflib.get_close_matches
    monkeypatch.setattr(data_io.difflib, 'get_close_matches', lambda *a, **kw: calls.append(a[0]) or real(*a, **kw))
    with pytest.raises(QueryFileError) as ei:
        load_queries(tmp_path / 'queries.jsonl', qrels=tmp_path / 'qrels.tsv', known_doc_ids=known)
    msg = str(ei.value)
    assert len(calls) == 25                                            # suggestions for the 25 problems printed, not for all 40
    assert msg.count('did you mean') == 25 and "line 2: query 'q0': unknown doc id 'paper-000z' (did you mean 'paper-000'?)" in msg
    assert '... and 15 more' in msg
    # a suggestion is quoted like the id itself: at most 60 characters
    assert data_io._unknown(long_id + 'z', known) == f"unknown doc id {data_io.short_repr(long_id + 'z')} (did you mean {data_io.short_repr(long_id)}?)"
    assert len(data_io.short_repr(long_id)) == 60 and 'x' * 100 not in data_io._unknown(long_id + 'z', known)


# ---------------------------------------------------------------- graded relevance end to end

GRADED_QRELS = ('query-id\tcorpus-id\tscore\n'
                'g1\talpha-paper\t3\ng1\tbeta-paper\t1\ng1\tgamma-paper\t0\n'     # grades 3, 1 and a judged non-relevant 0
                'g2\tbeta-paper\t2\ng2\tgamma-paper\t2\n'                         # tied grades
                'g3\talpha-paper\t1\n')                                         # binary


def graded_beir(d):
    (d / 'qrels').mkdir(parents=True)
    write_lines(d / 'corpus.jsonl', [{'_id': k, 'title': '', 'text': f'text of {k}'} for k in KNOWN])
    write_lines(d / 'queries.jsonl', [{'_id': f'g{i}', 'text': f'graded question {i}'} for i in range(1, 4)])
    (d / 'qrels' / 'test.tsv').write_text(GRADED_QRELS)
    return d


def test_graded_beir_and_trec_qrels_keep_grades_and_round_trip_identically(tmp_path):
    src = graded_beir(tmp_path / 'src')
    corpus, qs, qrels = read_beir(src)
    assert [(q.id, q.doc_ids, q.grades) for q in qs] == [('g1', ['alpha-paper', 'beta-paper'], {'alpha-paper': 3, 'beta-paper': 1}),
                                                          ('g2', ['beta-paper', 'gamma-paper'], {'beta-paper': 2, 'gamma-paper': 2}),
                                                          ('g3', ['alpha-paper'], {})]
    assert qrels['g1'] == {'alpha-paper': 3, 'beta-paper': 1, 'gamma-paper': 0}          # the 0 stays judged
    assert qrels_from_queries(qs) == {'g1': {'alpha-paper': 3, 'beta-paper': 1}, 'g2': {'beta-paper': 2, 'gamma-paper': 2},
                                      'g3': {'alpha-paper': 1}}
    # read -> write -> identical files; and read again -> identical records
    write_beir(tmp_path / 'out', corpus, qs, qrels)
    assert (tmp_path / 'out' / 'qrels' / 'test.tsv').read_text() == GRADED_QRELS
    assert read_beir(tmp_path / 'out') == (corpus, qs, qrels)
    # without a qrels dict the queries' own grades are written (no 0 rows, nothing else lost)
    write_beir(tmp_path / 'out2', corpus, qs)
    c2, q2, r2 = read_beir(tmp_path / 'out2')
    assert q2 == qs and r2 == qrels_from_queries(qs)
    # TREC qrels: written and read back with every grade; load_queries with them gives the same graded queries
    write_trec_qrels(qrels, tmp_path / 'g.qrels')
    assert read_trec_qrels(tmp_path / 'g.qrels') == qrels
    with open(tmp_path / 'g.qrels') as f: assert pytrec_eval.parse_qrel(f) == qrels
    assert load_queries(src / 'queries.jsonl', qrels=tmp_path / 'g.qrels') == qs
    # a qrels dict with grades works the same; one with a non-integer grade is refused, naming query and doc
    assert load_queries(src / 'queries.jsonl', qrels=qrels) == qs
    with pytest.raises(QueryFileError, match=r"qrels for query 'g1', doc 'beta-paper': relevance 1.5 is not an integer grade"):
        load_queries(src / 'queries.jsonl', qrels={'g1': {'alpha-paper': 2, 'beta-paper': 1.5}})
    for w in (lambda: write_trec_qrels({'g1': {'alpha-paper': float('nan')}}, tmp_path / 'bad.qrels'),
              lambda: write_beir(tmp_path / 'bad', corpus, qs, {'g1': {'alpha-paper': 'high'}})):
        with pytest.raises(ValueError, match="is not an integer grade"): w()


def test_graded_beir_evaluates_like_pytrec_eval_on_the_qrels_file(tmp_path):
    src = graded_beir(tmp_path / 'src')
    corpus, qs, qrels = read_beir(src)
    run = Run(scores={'g1': {'beta-paper': 0.9, 'gamma-paper': 0.5, 'alpha-paper': 0.5},
                      'g2': {'alpha-paper': 0.7, 'gamma-paper': 0.7, 'beta-paper': 0.7}, 'g3': {'beta-paper': 1.0}})
    p_qrels = {}                                                        # the TSV parsed independently of docbench
    for line in (src / 'qrels' / 'test.tsv').read_text().splitlines()[1:]:
        q, d, g = line.split('\t'); p_qrels.setdefault(q, {})[d] = int(g)
    ref = pytrec_eval.RelevanceEvaluator(p_qrels, {'ndcg_cut_10', 'recall_10'}).evaluate(run.scores)
    from docbench_nb.evaluation.metrics import score_run
    for r in score_run(run, qs)['per_query']:
        assert abs(r['ndcg@10'] - ref[r['query_id']]['ndcg_cut_10']) < 1e-9
        assert abs(r['recall@10'] - ref[r['query_id']]['recall_10']) < 1e-9
    assert 0 < ref['g1']['ndcg_cut_10'] < 1


def test_docbench_query_file_grades(tmp_path):
    f = write_lines(tmp_path / 'q.jsonl', [rec(1, doc_ids=['beta-paper'], grades={'alpha-paper': 2}), rec(2)])
    qs = load_queries(f, known_doc_ids=KNOWN)
    assert [(q.id, q.judgments()) for q in qs if q.level in (0, 1)] == [
        ('Q1', {'alpha-paper': 2, 'beta-paper': 1}), ('Q1@L1', {'alpha-paper': 2, 'beta-paper': 1}), ('Q2', {'alpha-paper': 1}), ('Q2@L1', {'alpha-paper': 1})]
    assert 'grades' not in qs[0].meta
    bad = write_lines(tmp_path / 'bad.jsonl', [rec(1, grades={'beta-paper': 2}), rec(2, grades={'alpha-paper': 0}), rec(3, grades=['alpha-paper']),
                                               rec(4, grades={'alpha-paper': 'inf'})])
    with pytest.raises(QueryFileError) as ei: load_queries(bad)
    msg = str(ei.value)
    assert "line 1: query 'Q1': grades names 'beta-paper', which is not one of its gold doc ids" in msg
    assert "line 2: query 'Q2': grade 0 of 'alpha-paper' is not an integer grade >= 1" in msg
    assert "line 3: query 'Q3': 'grades' must be an object {doc id: grade}, got list" in msg
    assert "line 4: query 'Q4': grade 'inf' of 'alpha-paper'" in msg


def test_old_query_json_without_grades_still_loads_and_ungraded_json_is_unchanged():
    old = '{"id": "q", "text": "t", "doc_ids": ["a"], "evidence_type": null, "level": 0, "group_id": null, "meta": {}}'
    q = Query.from_json(old)
    assert q.grades == {} and q.judgments() == {'a': 1} and q.to_json() == old
    g = Query('q', 't', ['a', 'b'], grades={'b': 2})
    assert Query.from_json(g.to_json()) == g and json.loads(g.to_json())['grades'] == {'b': 2}
