"The query stages keep up to the backend's `concurrency` requests in flight, and give the records a one-at-a-time run gives."
import json
import pytest

from docbench_nb.llm import LocalLLM, make_llm
from docbench_nb.testing import ScriptedChatServer
from types import SimpleNamespace
from docbench_nb.queries.evidence import Draft, Evidence, StageStore
from docbench_nb.queries.llm_stages import (fenced_text, generate_stage, rephrase_stage, false_negative_stage, NATURALIZE,
                                            run_llm_stage)

DELAY = 0.02     # each answer waits (generation 0.05 s), so that concurrent requests overlap; only requests are counted, never time


def answer(req):
    "Valid JSON for each stage's schema, decided by the request's content (and seed), so every run gets the same replies."
    sys, user = req['messages'][0]['content'], req['messages'][-1]['content']
    q = fenced_text(user, 'QUESTION') or ''
    if 'broken' in q: return {'status': 400, 'body': json.dumps({'error': {'message': 'refused'}})}    # recorded, not raised
    if 'benchmark of scientific' in sys:
        words = [w for w in fenced_text(user, 'EVIDENCE').split() if w.isalpha() and len(w) > 5][:2]
        a = {'question': f"Which study of {' and '.join(words)} reported marsupial telescope readings?", 'answer': 'a value'}
    elif 'You rephrase' in sys:
        level = 1 + ('new wording' in user) + ('Restructure' in user)
        same = ('hopeless' in q) or ('retry' in q and req.get('seed', 0) == 0 and level == 2)
        a = {'rephrasing': q if same else f'Level {level} variant of: {q}'}
    elif 'You compare' in sys: a = {'same_meaning': 'wrong' not in (fenced_text(user, 'REPHRASED') or ''), 'same_answer': True}
    elif 'judge whether a passage' in sys: a = {'answers': 'light' in (fenced_text(user, 'PASSAGE') or '').lower()}
    elif 'search engine' in sys: a = {'query': q.replace('Which', 'What')}
    else: a = {'unexpected': True}
    return {'content': json.dumps(a), 'delay': 2.5 * DELAY if 'benchmark of scientific' in sys else DELAY}


def llm_at(srv, cache, c):
    return make_llm(f'openai:scripted@{srv.base_url}?concurrency={c}&max_retries=0&backoff=0.01', cache_dir=cache)

def same(recs):
    "Records without their timings (the only thing a concurrent run may change)."
    return [{k: v for k, v in r.to_dict().items() if k != 'seconds'} for r in recs]

def stored(folder, stage):
    return same(StageStore(folder).load(stage).values())

def drafts(n):
    kinds = ['plain', 'retry', 'hopeless', 'broken']
    return [Draft(f'q{i}', f'p{i % 5}', 'text', f'q{i}', query=f'Which {kinds[i % 4]} coral bleaching threshold applies in reef {i}?',
                  answer=f'{i} degrees') for i in range(n)]


def test_rephrase_runs_queries_concurrently_with_serial_records(tmp_path):
    ds = drafts(4)                                            # one of each kind
    with ScriptedChatServer(default=answer) as srv:
        one = llm_at(srv, tmp_path / 'c1', 1)
        kept1, recs1 = rephrase_stage(ds, one, StageStore(tmp_path / 's1'), batch_size=5)
        n1 = srv.n_calls
        assert srv.peak == 1 and n1 == 6 + 7 + 2 + 2                  # counted: retries made, one request at a time
        srv.peak = 0
        four = llm_at(srv, tmp_path / 'c4', 4)
        kept4, recs4 = rephrase_stage(ds, four, StageStore(tmp_path / 's4'), batch_size=5)
        assert 1 < srv.peak <= 4                              # counted: several queries in flight, never more than 4
        assert srv.n_calls - n1 == n1                         # the same requests, each made once
    assert same(recs4) == same(recs1) and [d.to_dict() for d in kept4] == [d.to_dict() for d in kept1]
    assert stored(tmp_path / 's4', 'rephrase') == stored(tmp_path / 's1', 'rephrase') == same(recs1)    # stored in input order
    reasons = [r.reason for r in recs1]
    assert [r.dropped for r in recs1] == [False, False, True, True] and all(len(d.rephrasings) == 3 for d in kept1)       # hopeless + broken dropped
    assert any('identical to the query' in x for x in reasons) and any('HTTP 400' in x for x in reasons)
    assert any(e['attempt'] == 1 and e['ok'] for r in recs1 if r.output for e in r.output['log'])    # a retry that succeeded


def test_rephrase_holds_each_backend_to_its_own_concurrency(tmp_path):
    ds = [d for d in drafts(8) if 'plain' in d.query or 'retry' in d.query]
    with ScriptedChatServer(default=answer) as gsrv, ScriptedChatServer(default=answer) as jsrv:
        _, serial = rephrase_stage(ds, llm_at(gsrv, tmp_path / 'g1', 1), judge=llm_at(jsrv, tmp_path / 'j1', 1))
        gsrv.peak = jsrv.peak = 0
        _, recs = rephrase_stage(ds, llm_at(gsrv, tmp_path / 'g4', 4), judge=llm_at(jsrv, tmp_path / 'j2', 2))
        assert 1 < gsrv.peak <= 4 and 1 < jsrv.peak <= 2       # counted at each server
    assert same(recs) == same(serial) and all(not r.dropped for r in recs)


def test_generation_pools_across_prompts(tmp_path):
    "Evidence of three types (three prompts) goes through one pool: the first requests of every type overlap."
    evs = [Evidence(f'e{i}', f'p{i}', t, f'Measurements of stellar metallicity gradients in galaxy number {i} ({t}).')
           for i, t in enumerate(['text', 'table', 'figure'] * 4)]
    with ScriptedChatServer(default=answer) as srv:
        _, serial = generate_stage(evs, llm_at(srv, tmp_path / 'c1', 1), StageStore(tmp_path / 's1'))
        assert srv.peak == 1 and srv.n_calls == 12
        srv.peak = 0
        _, recs = generate_stage(evs, llm_at(srv, tmp_path / 'c8', 8), StageStore(tmp_path / 's8'), batch_size=3)
        assert 3 < srv.peak <= 8 and srv.n_calls == 24         # more than one prompt's batch in flight
    assert same(recs) == same(serial) and not any(r.dropped for r in recs)
    assert stored(tmp_path / 's8', 'generate') == same(serial)


class Index:
    "A stand-in corpus index (the stage reads `search(...).ranking/.provenance` and `units[i].text`): every query retrieves all four papers."
    docs = ['moths', 'reefs', 'bats', 'waves']
    units = [SimpleNamespace(text=t) for t in ['Street light colour and moth capture rates', 'Coral reef bleaching thresholds',
                                               'Bat foraging under white light', 'Gravitational wave strain noise']]
    def search(self, ids, queries, k):
        return SimpleNamespace(ranking=lambda q: self.docs[:k], provenance={q: {d: i for i, d in enumerate(self.docs)} for q in ids})


def test_false_negative_pairs_share_one_pool(tmp_path):
    ds = [Draft(f'f{i}', Index.docs[i % 4], 'text', f'f{i}', query=q, answer='x')
          for i, q in enumerate(['insects attracted to LED light', 'bat activity near streetlights', 'a broken question',
                                 'gravitational wave strain noise', 'light pollution and moths'])]
    with ScriptedChatServer(default=answer) as srv:
        kept1, serial = false_negative_stage(ds, Index(), llm_at(srv, tmp_path / 'c1', 1), StageStore(tmp_path / 's1'), top_n=4)
        assert srv.peak == 1 and srv.n_calls == 5 * 3                  # three other papers per query, one request each
        srv.peak = 0
        kept, recs = false_negative_stage(ds, Index(), llm_at(srv, tmp_path / 'c5', 5), StageStore(tmp_path / 's5'), top_n=4)
        assert 1 < srv.peak <= 5 and srv.n_calls == 30
    assert same(recs) == same(serial) and [d.to_dict() for d in kept] == [d.to_dict() for d in kept1]
    assert stored(tmp_path / 's5', 'false_negative') == same(serial)
    assert [len([f for f in d.flags if f.startswith('also_answered_by:')]) for d in kept] == [1, 2, 0, 2, 1]
    assert kept[2].flags == [f'fn_unverified:{d}' for d in ['moths', 'reefs', 'waves']]     # HTTP 400: recorded per paper


def test_interrupted_stage_keeps_the_finished_prefix(tmp_path):
    "An error in the middle (here raised while applying draft 5) stops the stage; the records before it are stored, in order."
    ds = [Draft(f'n{i}', 'p', 'text', f'n{i}', query=f'Which reef number {i} bleached first?') for i in range(10)]
    def app(d, data):
        if d.id == 'n5': raise KeyboardInterrupt
        return Draft.from_dict({**d.to_dict(), 'query': data['query']}), ''
    with ScriptedChatServer(default=answer) as srv:
        llm = llm_at(srv, tmp_path / 'c', 4)
        with pytest.raises(KeyboardInterrupt):
            run_llm_stage('naturalize', ds, lambda d: NATURALIZE, lambda d: {'query': d.query}, app, llm, StageStore(tmp_path / 's'), batch_size=2)
        assert [r['item_id'] for r in stored(tmp_path / 's', 'naturalize')] == [f'n{i}' for i in range(5)]
        # the rerun reuses them: with a fresh LLM cache, only the other five are asked
        fresh = llm_at(srv, tmp_path / 'c2', 4)
        kept, recs = run_llm_stage('naturalize', ds, lambda d: NATURALIZE, lambda d: {'query': d.query},
                                   lambda d, data: (Draft.from_dict({**d.to_dict(), 'query': data['query']}), ''), fresh, StageStore(tmp_path / 's'))
    assert fresh.stats['calls'] == 5 and [d.query for d in kept] == [f'What reef number {i} bleached first?' for i in range(10)]


def test_local_model_runs_one_request_at_a_time():
    "The in-process model is not thread-safe: it asks for one worker (its generation also runs under a lock)."
    from docbench_nb.queries.llm_stages import _workers
    assert LocalLLM.concurrency == 1 and _workers(LocalLLM) == 1 and _workers(LocalLLM, None) == 1
