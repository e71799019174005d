"""Query-set checks and set control through the real OpenAI-compatible backend against a loopback server: round trip,
answerability, false negatives as graded qrels (scored by nDCG as grades), target / quotas / near-duplicates, token
metering with prices, dry run and a budget that stops and resumes."""
import json, math, shutil, zlib
import pytest

from docbench_nb.cli import main
from docbench_nb.demo import demo_corpus_dir
from docbench_nb.latex.corpus import load_papers
from docbench_nb.llm import make_llm
from docbench_nb.testing import ScriptedChatServer
from docbench_nb.records import Run
from docbench_nb.evaluation.formats import load_queries
from docbench_nb.evaluation.metrics import ndcg_at_k
from docbench_nb.queries.evidence import Draft
from docbench_nb.queries.bm25_filter import build_corpus_index, gold_ranks
from docbench_nb.queries.llm_stages import fenced_text
from docbench_nb.queries.build import build_queries, write_final_queries

PAPERS = ('bat-activity-streetlights', 'clinical-abbrev-rap', 'coiled-metamaterial-absorber', 'garnet-cold-sintering')
TAGS = ('glowing', 'silent', 'empty')                     # what the blind reader will do: agree, disagree, find nothing


def reply(req, fn_true=lambda passage: True):
    "Valid JSON per prompt, decided by content only; 100 tokens per reply (80 prompt + 20 completion)."
    sys_, user = req['messages'][0]['content'], req['messages'][-1]['content']
    q = fenced_text(user, 'QUESTION') or ''
    if 'benchmark of scientific' in sys_:
        ev = fenced_text(user, 'EVIDENCE') or ''
        if ev.startswith('Table caption'):            # every table gets the same question (near-duplicates); it names garnet sintering
            a = {'question': 'Which table caption lists the density of garnet electrolytes after cold sintering?', 'answer': 'that one'}
        else:
            words = [w for w in ev.split() if w.isalpha() and len(w) > 6][:3]
            a = {'question': f"Which study of {' and '.join(words)} reports {TAGS[zlib.crc32(ev.encode()) % 3]} ferns?", 'answer': 'that one'}
    elif 'stand on their own' in sys_ or 'search engine' in sys_: a = {'query': q}
    elif 'You check' in sys_: a = {'valid': True, 'labels': []}
    elif 'You rephrase' in sys_: a = {'rephrasing': f"Level {1 + ('new wording' in user) + ('Restructure' in user)} of: {q}"}
    elif 'You compare two questions' in sys_: a = {'same_meaning': True, 'same_answer': True}
    elif 'You answer questions' in sys_:
        a = {'answer': None if 'empty ferns' in q else 'another thing' if 'silent ferns' in q else 'that one'}
    elif 'You compare two answers' in sys_:
        a = {'match': fenced_text(user, 'REFERENCE ANSWER') == fenced_text(user, 'CANDIDATE ANSWER')}
    elif 'judge whether a passage' in sys_: a = {'answers': fn_true(fenced_text(user, 'PASSAGE') or '')}
    else: a = {'unexpected': True}
    return {'content': json.dumps(a), 'usage': {'prompt_tokens': 80, 'completion_tokens': 20, 'total_tokens': 100}}


def asked(srv, phrase, start=0):
    return sum(phrase in r['json']['messages'][0]['content'] for r in srv.requests[start:])


@pytest.fixture(scope='module')
def papers(tmp_path_factory):
    cache = tmp_path_factory.mktemp('qc-cache')
    ps, errors = load_papers([demo_corpus_dir() / p for p in PAPERS], cache_dir=cache, progress=False)
    assert len(ps) == 4, errors
    return ps, cache


def llm_at(srv, cache, c=4):
    return make_llm(f'openai:scripted@{srv.base_url}?concurrency={c}&max_retries=0&backoff=0.01', cache_dir=cache)


def test_round_trip_answer_check_and_graded_false_negatives(papers, tmp_path):
    ps, cache = papers
    with ScriptedChatServer(default=reply) as srv:
        out = tmp_path / 'o'
        res = build_queries(None, llm_at(srv, tmp_path / 'llm'), out, types=('text', 'table'), per_paper=1, bm25_k=0, papers=ps,
                            cache_dir=cache, round_trip='bm25@1', answer_check=True, fn='add-qrels', top_n=3)
        recs = [json.loads(l) for l in (out / 'stages.jsonl').read_text().splitlines()]
        by = lambda s: [r for r in recs if r['stage'] == s]
        # round trip: every query the stage saw has its rank, the same as BM25 gives directly; kept iff rank <= 1
        rt = by('round_trip')
        direct = gold_ranks(build_corpus_index(ps), [Draft(r['item_id'], r['input']['doc_id'], r['evidence_type'], query=r['input']['query']) for r in rt])
        assert rt and all(r['output']['round_trip_rank'] == direct[r['item_id']] for r in rt)
        assert all(r['dropped'] == (direct[r['item_id']] is None or direct[r['item_id']] > 1) for r in rt)
        dropped_tables = [r for r in rt if r['dropped']]
        assert dropped_tables and all(r['evidence_type'] == 'table' and r['input']['doc_id'] != 'garnet-cold-sintering' for r in dropped_tables)
        assert all(r['reason'].startswith('round trip failed: bm25 ') for r in dropped_tables)
        # answerability: one blind call per query, one comparison unless the blind reader found nothing
        ac = by('answer_check')
        assert [r['item_id'] for r in ac] == [r['item_id'] for r in rt if not r['dropped']]
        assert asked(srv, 'You answer questions') == len(ac)
        assert asked(srv, 'You compare two answers') == sum('empty ferns' not in r['input']['query'] for r in ac)
        for r in ac:
            want = 'unanswerable' if 'empty ferns' in r['input']['query'] else 'answer mismatch' if 'silent ferns' in r['input']['query'] else ''
            assert r['dropped'] == bool(want) and r['reason'].startswith(want) and r['tokens'] == 100 * (1 + ('empty' not in r['input']['query']))
        assert {r['dropped'] for r in ac} == {True, False}
        # every blind prompt fences the evidence and the question
        blind = next(r['json']['messages'][-1]['content'] for r in srv.requests if 'You answer questions' in r['json']['messages'][0]['content'])
        assert '<<<BEGIN EVIDENCE>>>' in blind and '<<<BEGIN QUESTION>>>' in blind
    # false negatives became graded qrels: gold 2, every paper the judge said also answers 1
    lines = [json.loads(l) for l in (out / 'queries.jsonl').read_text().splitlines()]
    fn_recs = {r['item_id']: r for r in by('false_negative')}
    assert lines and len(lines) == res['n_queries']
    for q in lines:
        also = [c for c in fn_recs[q['id']]['input']['candidates']]
        assert q.get('doc_ids', [q['doc_id']]) == [q['doc_id']] + also and (q.get('grades') == {q['doc_id']: 2} if also else 'grades' not in q)
    assert any('grades' in q for q in lines)
    loaded = load_queries(out / 'queries.jsonl', known_doc_ids=[p.id for p in ps], levels=(0,))
    assert {q.id: q.judgments() for q in loaded} == {q['id']: {d: (2 if d == q['doc_id'] else 1) for d in q.get('doc_ids', [q['doc_id']])} for q in lines}
    att = json.loads((out / 'attrition.json').read_text())
    assert att['consistent'] and att['set']['round_trip'] == {'retriever': 'bm25', 'k': 1} and att['set']['fn'] == 'add-qrels'
    assert att['ran'] == ['extract', 'generate', 'decontextualize', 'bm25', 'verify', 'naturalize', 'round_trip', 'answer_check',
                          'rephrase', 'false_negative']


def test_ndcg_scores_the_added_grades(tmp_path):
    "A graded query file from `add-qrels`: nDCG ranks the gold paper (2) above a paper that also answers (1); binary qrels would not."
    d = Draft('q1', 'gold', 'text', query='Which reef bleached first?', flags=['ambiguous', 'also_answered_by:other', 'fn_unverified:third'])
    write_final_queries([d], tmp_path / 'g.jsonl', 'add-qrels'); write_final_queries([d], tmp_path / 'b.jsonl', 'keep-flag')
    g = load_queries(tmp_path / 'g.jsonl', levels=(0,)); b = load_queries(tmp_path / 'b.jsonl', levels=(0,))
    assert g[0].judgments() == {'gold': 2, 'other': 1} and b[0].judgments() == {'gold': 1}
    qrels = {q.id: q.judgments() for q in g}
    first, second = Run({'q1': {'gold': 2.0, 'other': 1.0}}), Run({'q1': {'other': 2.0, 'gold': 1.0}})
    assert ndcg_at_k(first, qrels, 10)['q1'] == pytest.approx(1.0)
    ideal = 2 + 1 / math.log2(3)
    assert ndcg_at_k(second, qrels, 10)['q1'] == pytest.approx((1 + 2 / math.log2(3)) / ideal)
    assert ndcg_at_k(second, {q.id: q.judgments() for q in b}, 10)['q1'] == pytest.approx(1 / math.log2(3))


def test_target_quotas_and_near_duplicates(papers, tmp_path):
    ps, cache = papers
    with ScriptedChatServer(default=reply) as srv:
        res = build_queries(None, llm_at(srv, tmp_path / 'llm'), tmp_path / 'o', types=('text', 'table'), bm25_k=0, papers=ps,
                            cache_dir=cache, target=4, quota='text=2,table=1,figure=1', top_n=2)
        n_gen = asked(srv, 'benchmark of scientific')
    att = res['attrition']
    # oversampled: ceil(3 x 2 / 4) text and ceil(3 x 1 / 4) table items per paper
    assert att['set']['evidence_per_paper'] == {'text': 2, 'table': 1} and n_gen == res['n_evidence'] == 4 * 3
    recs = [json.loads(l) for l in (tmp_path / 'o' / 'stages.jsonl').read_text().splitlines()]
    dd = [r for r in recs if r['stage'] == 'dedup']
    # the four tables got one identical question: the first is kept, the other three dropped as near-duplicates of it
    tables = [r for r in dd if r['evidence_type'] == 'table']
    assert [r['dropped'] for r in tables] == [False, True, True, True]
    assert all(r['reason'].startswith(f"near-duplicate: of {tables[0]['item_id']} (another paper") and r['output']['cosine'] > 0.99 for r in tables[1:])
    assert not any(r['dropped'] for r in dd if r['evidence_type'] == 'text')
    assert asked(srv, 'You rephrase') == 3 * (len(dd) - 3)                 # the duplicates cost no rephrase call
    sel = att['set']['selection']
    assert sel['available'] == {'text': 8, 'table': 1, 'figure': 0} and sel['selected'] == {'text': 3, 'table': 1, 'figure': 0}
    assert sel['short'] == {'figure': 1} and sel['short_of_target'] == 0 and res['n_queries'] == 4
    assert att['set']['final'] == {'text': 3, 'table': 1} and att['consistent']
    kept_text = [json.loads(l)['doc_id'] for l in (tmp_path / 'o' / 'queries.jsonl').read_text().splitlines() if '"text"' in l]
    assert len(set(kept_text)) == 3                                        # round-robin over papers, not three from one
    with pytest.raises(ValueError, match='a quota needs a target'):
        build_queries(None, None, tmp_path / 'x', papers=ps, quota='text=2')


def test_dry_run_budget_stop_and_resume_through_the_cli(papers, tmp_path):
    ps, _ = papers
    corpus = tmp_path / 'corpus'
    for p in PAPERS[:3]: shutil.copytree(demo_corpus_dir() / p, corpus / p)
    (tmp_path / 'prices.json').write_text(json.dumps({'scripted': {'prompt': 2.0, 'completion': 10.0}}))
    with ScriptedChatServer(default=reply) as srv:
        def argv(cache, out, *extra):
            return ['-q', '--cache-dir', str(tmp_path / cache), 'queries', 'build', '--corpus', str(corpus), '--llm',
                    f'openai:scripted@{srv.base_url}?concurrency=1&max_retries=0', '--types', 'text', '--per-paper', '1', '--bm25-k', '0',
                    '--top-n', '2', '--prices', str(tmp_path / 'prices.json'), '--out', str(tmp_path / out), *extra]
        assert main(argv('c0', 'dry', '--dry-run')) == 0 and srv.n_calls == 0            # no model call
        est = json.loads((tmp_path / 'dry' / 'dry_run.json').read_text())
        assert est['generate']['calls'] == 3 and est['rephrase']['calls'] == 18 and est['verify']['cost'] is not None
        assert est['generate']['cost'] == pytest.approx((est['generate']['prompt_tokens'] * 2 + est['generate']['completion_tokens'] * 10) / 1e6)
        # a budget of 350 tokens at 100 a reply: three generations, one decontextualization, then a clean stop (exit 3)
        assert main(argv('c1', 'run', '--budget', '350')) == 3 and srv.n_calls == 4
        b = json.loads((tmp_path / 'run' / 'budget.json').read_text())
        assert (b['stopped_in'], b['spent']) == ('decontextualize', 400) and b['spent_by_stage']['generate']['openai:scripted']['calls'] == 3
        n1 = srv.n_calls
        # the rerun (a fresh LLM cache, so only the stage store can save calls) asks only for what was not stored
        assert main(argv('c2', 'run')) == 0
        n2 = srv.n_calls - n1
        assert main(argv('c3', 'full')) == 0
        n_full = srv.n_calls - n1 - n2
    assert n1 + n2 == n_full and n1 == 4
    att = json.loads((tmp_path / 'full' / 'attrition.json').read_text())
    gen = att['spent']['generate']['openai:scripted']
    assert gen == {'calls': 3, 'prompt_tokens': 240, 'completion_tokens': 60, 'cost': pytest.approx((240 * 2 + 60 * 10) / 1e6)}
    assert sum(m['calls'] for s in att['spent'].values() for m in s.values()) == n_full
    assert att['cost']['generate']['tokens'] == 300


def test_a_bm25_round_trip_at_or_above_the_bm25_filters_k_is_warned_before_any_call(papers, tmp_path):
    """The filter keeps only queries whose gold paper BM25 ranks below k; a BM25 round trip at k' <= k keeps only those
    it ranks in its top k'. Only the naturalized rewrite differs between the two (in the 20-paper build it kept 0 of 2),
    so the build says so before any model call; it does not refuse, as a rewrite may move a paper up."""
    ps, _ = papers
    with ScriptedChatServer(default=reply) as srv:
        llm = f'openai:scripted@{srv.base_url}?concurrency=1&max_retries=0'
        for i, rt in enumerate(('bm25@5', 'bm25@3', 'bm25?method=bm25l@2')):
            with pytest.warns(UserWarning, match=r'keeps few queries or none: the filter drops every query whose gold paper BM25 ranks in the top 5'):
                build_queries(None, llm, tmp_path / f'x{i}', papers=ps, bm25_k=5, round_trip=rt, dry_run=True)
        assert srv.n_calls == 0                                                   # said before any model call
    # a round trip deeper than the filter, another retriever, or no filter: nothing to say
    from docbench_nb.queries.build import round_trip_problem
    for rt, k in ((('bm25', 6), 5), (('dense', 5), 5), (('bm25', 5), 0), (None, 5)): assert round_trip_problem(rt, k) == ''
