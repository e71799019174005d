"""Query construction (issue 9): evidence extraction, BM25 difficulty filter, attrition, review import, resume, and the
pipeline end to end through the real LLM backend (loopback scripted server; bundled SmolLM2 on two shared papers)."""
import json
from pathlib import Path
import numpy as np
import pytest

from docbench_nb.demo import demo_corpus_dir, demo_queries_path
from docbench_nb.latex.corpus import load_papers
from docbench_nb.evaluation.formats import load_queries
from docbench_nb.retrieval.represent import represent
from docbench_nb.queries.evidence import (Draft, Evidence, StageRecord, StageStore, extract_evidence, read_query_records,
                                 write_query_records)
from docbench_nb.queries.bm25_filter import build_corpus_index, filter_queries, gold_ranks
from docbench_nb.queries.llm_stages import FAILURE_LABELS
from docbench_nb.queries.review import attrition, import_review, STAGES
from docbench_nb.queries.build import build_queries, rephrase_queries, check_false_negatives, add_queries_parser


@pytest.fixture(scope='module')
def cache(tmp_path_factory): return tmp_path_factory.mktemp('qcache')

@pytest.fixture(scope='module')
def papers(cache):
    ps, errors = load_papers(demo_corpus_dir(), cache_dir=cache, progress=False)
    assert not errors
    return ps


# ---------------------------------------------------------------- stage 1: evidence
def test_evidence_extraction_on_demo_corpus(papers, cache):
    evs, recs = extract_evidence(papers, per_paper=2, cache_dir=cache)
    by_paper = {}
    for e in evs: by_paper.setdefault((e.doc_id, e.evidence_type), []).append(e)
    assert all(len(v) <= 2 for v in by_paper.values())
    # every paragraph, table and figure of every paper has exactly one extract record
    assert len(recs) == sum(len(p.paragraphs) + len(p.tables) + len(p.figures) for p in papers)
    assert len({r.item_id for r in recs}) == len(recs)
    assert [r.item_id for r in recs if not r.dropped] == [e.id for e in evs]
    pmap = {p.id: p for p in papers}
    for e in evs:
        p = pmap[e.doc_id]
        if e.evidence_type == 'text':
            assert len(p.text[e.span[0]:e.span[1]].split()) >= 40
            assert not any(f.span[0] <= e.span[0] < f.span[1] for f in p.figures + p.tables)
        elif e.evidence_type == 'table':
            t = next(t for t in p.tables if (t.label or '') == e.locator or e.locator.startswith('table:'))
            assert e.rows == [list(map(str, r)) for r in t.rows] and e.caption == t.caption
            assert all(' | '.join(r) in e.text for r in e.rows)
        else:
            f = next(f for f in p.figures if f.label == e.locator)
            assert e.caption == f.caption and len(e.citing) == len(f.ref_spans)
            assert len(e.images) == len(f.images)                       # demo figures are PNGs: all convert
            assert all(Path(i).read_bytes()[:4] == b'\x89PNG' for i in e.images)
    # the tex.gz paper has a table but no figure
    assert not any(e.doc_id == 'transmon-tls-fluctuations' and e.evidence_type == 'figure' for e in evs)
    assert sum(e.evidence_type == 'figure' for e in evs) == sum(len(p.figures) > 0 for p in papers)
    short = [r for r in recs if r.reason.startswith('too short')]
    assert short and all(r.input['words'] < 40 for r in short)


def test_bad_evidence_type_names_it(papers):
    with pytest.raises(ValueError, match="'images'"): extract_evidence(papers[:1], types=('text', 'images'))
    with pytest.raises(ValueError, match="evidence 'x'"): Evidence('x', 'p', 'video', '')


# ---------------------------------------------------------------- stage 4: BM25 filter
def _direct_bm25_ranks(papers, queries):
    "Gold ranks straight from bm25s over the same 512-token chunks (max over a paper's chunks; trec_eval tie order)."
    import bm25s
    units = represent(papers, 'text', chunk_size=512).units
    tok = lambda ts: bm25s.tokenize(list(ts), stopwords='en', return_ids=False, show_progress=False)
    bm = bm25s.BM25(k1=1.5, b=0.75, method='lucene'); bm.index(tok(u.text for u in units), show_progress=False)
    out = {}
    for q in queries:
        ids = bm.get_tokens_ids(tok([q.text])[0])
        s = np.asarray(bm.get_scores_from_ids(ids)) if ids else np.zeros(len(units))
        doc = {}
        for u, v in zip(units, s): doc[u.doc_id] = max(doc.get(u.doc_id, 0.0), float(v))
        ranked = sorted((d for d in doc if doc[d] > 0), key=lambda d: (doc[d], d), reverse=True)
        out[q.id] = ranked.index(q.doc_ids[0]) + 1 if q.doc_ids[0] in ranked else None
    return out


def test_bm25_filter_matches_direct_bm25s_ranking(papers, tmp_path):
    qs = load_queries(demo_queries_path(), levels=(0,))
    direct = _direct_bm25_ranks(papers, qs)
    s = filter_queries(None, demo_queries_path(), k=5, out_file=tmp_path / 'hard.jsonl', papers=papers)
    assert s['ranks'] == direct
    assert s['n_dropped'] == sum(r is not None and r <= 5 for r in direct.values()) > 0
    # the demo queries were written to be findable: most are easy for BM25; k=1 keeps those not ranked first
    s1 = filter_queries(None, demo_queries_path(), k=1, out_file=tmp_path / 'hard1.jsonl', papers=papers)
    assert s1['ranks'] == s['ranks']
    kept = read_query_records(tmp_path / 'hard1.jsonl')
    assert {d.id for d in kept} == {q for q, r in direct.items() if r is None or r > 1} and kept
    assert s1['n_kept'] >= s['n_kept']
    assert all(d.bm25_gold_rank == direct[d.id] for d in kept)
    # the output is still a valid query file, rephrasings and all
    assert len(load_queries(tmp_path / 'hard1.jsonl', known_doc_ids=[p.id for p in papers])) == 4 * len(kept)


def test_bm25_filter_errors_name_file_and_query(papers, tmp_path):
    f = tmp_path / 'q.jsonl'
    f.write_text(json.dumps({'id': 'z1', 'doc_id': 'no-such-paper', 'query': 'bats'}) + '\n')
    with pytest.raises(ValueError, match=r"q\.jsonl: gold paper\(s\) not in the corpus: \['no-such-paper'\] \(query 'z1'\)"):
        filter_queries(None, f, papers=papers)
    f.write_text('{"id": "a", "doc_id": "x", "query": "q"}\nnot json\n')
    with pytest.raises(ValueError, match=r"q\.jsonl, line 2: bad JSON"): filter_queries(None, f, papers=papers)


# ---------------------------------------------------------------- a fake model for stage logic
class Fake:
    "The LLM contract answering by prompt; `bad` lists prompt phrases to answer with garbage."
    name, fingerprint = 'fake', 'fake-1'
    def __init__(self, bad=()): self.bad, self.stats = set(bad), {'calls': 0}
    def answer(self, sys, user, seed):
        if any(b in sys + user for b in self.bad): return 'Sure, here you go!'
        q = lambda: user.split('QUESTION: ')[1].split('\n')[0]
        if 'benchmark of scientific' in sys:
            w = [x for x in user.split('EVIDENCE:')[1].split() if x.isalpha() and len(x) > 7][:2]
            return {'question': f"Which investigation of {' and '.join(w)} involved purple zebra meadows?", 'answer': 'it'}
        if 'stand on their own' in sys or 'search engine' in sys: return {'query': q()}
        if 'You check' in sys: return {'valid': True, 'labels': []}
        if 'You rephrase' in sys: return {'rephrasing': f'Put differently ({len(user)}): ' + q()}
        if 'You compare' in sys: return {'same_meaning': True, 'same_answer': True}
        return {'answers': False}
    def chat(self, messages, **kw):
        from docbench_nb.llm import LLMReply
        self.stats['calls'] += 1
        a = self.answer(messages[0]['content'], messages[-1]['content'], kw.get('seed', 0))
        return LLMReply(a if isinstance(a, str) else json.dumps(a), prompt_tokens=7, completion_tokens=3)
    def chat_many(self, many, **kw): return [self.chat(m, **kw) for m in many]


def test_attrition_counts_add_up(papers, cache, tmp_path):
    res = build_queries(None, Fake(bad=('a figure from',)), tmp_path / 'run', per_paper=1, bm25_k=1, papers=papers[:6], cache_dir=cache)
    att = res['attrition']
    assert att['consistent'] and att['ran'] == list(STAGES[:-1])
    recs = [StageRecord.from_dict(json.loads(l)) for l in (tmp_path / 'run' / 'stages.jsonl').read_text().splitlines()]
    for s in att['ran']:
        for t in att['types']:
            c = att['counts'][s][t]
            assert c['in'] == c['out'] + c['dropped'] == sum(r.stage == s and r.evidence_type == t for r in recs)
            assert sum(c['reasons'].values()) == c['dropped']
    assert att['counts']['generate']['figure']['out'] == 0                          # garbage replies: all dropped, with reasons
    assert att['counts']['generate']['figure']['reasons'] == {'reply is not valid JSON': 6}
    final = {t: att['counts']['false_negative'][t]['out'] for t in att['types']}
    qs = read_query_records(tmp_path / 'run' / 'queries.jsonl')
    assert sum(final.values()) == len(qs) == res['n_queries'] > 0
    assert all(len(d.rephrasings) == 3 and d.bm25_gold_rank is None or d.bm25_gold_rank > 1 for d in qs)
    assert json.loads((tmp_path / 'run' / 'attrition.json').read_text())['counts'] == json.loads(json.dumps(att['counts']))
    assert (tmp_path / 'run' / 'attrition.png').read_bytes()[:4] == b'\x89PNG'


def test_verify_drops_with_failure_labels(papers, cache, tmp_path):
    class Strict(Fake):
        def answer(self, sys, user, seed):
            if 'You check' in sys: return {'valid': False, 'labels': ['context_bound', 'generic'], 'reason': 'mentions the table'}
            return super().answer(sys, user, seed)
    res = build_queries(None, Strict(), tmp_path / 'r', types=('text',), per_paper=1, bm25_k=0, papers=papers[:2], cache_dir=cache)
    assert res['n_queries'] == 0
    assert res['attrition']['counts']['verify']['text']['reasons'] == {'verification failed': 2}
    recs = [json.loads(l) for l in (tmp_path / 'r' / 'stages' / 'verify.jsonl').read_text().splitlines()]
    assert all(r['reason'].startswith('verification failed: context_bound, generic') for r in recs)
    assert set(FAILURE_LABELS) == {'underspecified_parameter', 'context_bound', 'vague_domain', 'pronoun_placeholder', 'generic'}


# ---------------------------------------------------------------- stage 9: review import
def test_import_review_keep_edit_drop(tmp_path, papers):
    ds = [Draft(f'q{i}', papers[i].id, 'text', query=f'question {i}?', answer='a', rephrasings=['x', 'y', 'z']) for i in range(4)]
    write_query_records(ds, tmp_path / 'q.jsonl')
    (tmp_path / 'd.jsonl').write_text('\n'.join(json.dumps(x) for x in [
        {'id': 'q0', 'decision': 'keep'}, {'id': 'q1', 'decision': 'edit', 'edited_query': 'A better question?'},
        {'id': 'q2', 'decision': 'drop'}]) + '\n')
    s = import_review(tmp_path / 'q.jsonl', tmp_path / 'd.jsonl', tmp_path / 'out.jsonl')
    assert (s['n_in'], s['n_out'], s['keep'], s['edit'], s['drop']) == (4, 3, 2, 1, 1)
    out = {q.id: q for q in load_queries(tmp_path / 'out.jsonl', known_doc_ids=[p.id for p in papers], levels=(0,))}
    assert set(out) == {'q0', 'q1', 'q3'}
    assert out['q1'].text == 'A better question?' and out['q1'].meta['flags'] == ['edited', 'needs_rephrase'] and out['q0'].text == 'question 0?'
    (tmp_path / 'bad.csv').write_text('id,decision,edited_query\nq0,keep,\nq1,edit,\n')
    with pytest.raises(ValueError, match=r"bad\.csv, line 3: query 'q1': 'edit' needs the edited text"):
        import_review(tmp_path / 'q.jsonl', tmp_path / 'bad.csv', tmp_path / 'x.jsonl')


# ---------------------------------------------------------------- end to end through the real backend
def _scripted_reply(bad_types=('table',)):
    "A reply function for `ScriptedChatServer`: sensible JSON for every stage, garbage for generation of `bad_types`."
    f = Fake(bad=tuple(f'a {t} from' for t in bad_types))
    def reply(req):
        msgs = req['messages']
        a = f.answer(msgs[0]['content'], msgs[-1]['content'] if isinstance(msgs[-1]['content'], str) else '', req.get('seed', 0))
        return a if isinstance(a, str) else json.dumps(a)
    return reply


def test_end_to_end_real_backend_resumes_with_zero_calls(papers, tmp_path):
    from docbench_nb.llm import make_llm
    from docbench_nb.testing import ScriptedChatServer
    ps = papers[:4]
    with ScriptedChatServer(default=_scripted_reply()) as srv:
        spec = f'openai:scripted@{srv.base_url}'
        llm = make_llm(spec, cache_dir=tmp_path / 'c')
        res = build_queries(None, llm, tmp_path / 'out', per_paper=1, bm25_k=0, papers=ps, cache_dir=tmp_path / 'c')
        n, first = srv.n_calls, (tmp_path / 'out' / 'queries.jsonl').read_text()
        assert n > 0 and res['n_queries'] > 0
        qs = load_queries(tmp_path / 'out' / 'queries.jsonl', known_doc_ids=[p.id for p in ps])
        assert len(qs) == 4 * res['n_queries'] and {q.evidence_type for q in qs} == {'text', 'figure'}
        assert res['attrition']['counts']['generate']['table']['out'] == 0
        reasons = res['attrition']['counts']['generate']['table']['reasons']
        assert list(reasons) == ['no usable reply'], reasons                 # the backend's repairs failed: recorded, not raised
        html = (tmp_path / 'out' / 'review.html').read_text()
        assert html.count('<section class="card') == res['n_queries'] and 'data:image/png;base64,' in html
        # rerun in the same folder: every stage from the store, no model call at all
        llm2 = make_llm(spec, cache_dir=tmp_path / 'c')
        res2 = build_queries(None, llm2, tmp_path / 'out', per_paper=1, bm25_k=0, papers=ps, cache_dir=tmp_path / 'c')
        assert srv.n_calls == n and llm2.stats['calls'] == 0
        assert res2['attrition']['counts'] == res['attrition']['counts']
        assert (tmp_path / 'out' / 'queries.jsonl').read_text() == first
        # a run killed mid-stage: half of one stage file lost (and a torn last line) -> only the LLM cache answers
        st = tmp_path / 'out' / 'stages' / 'rephrase.jsonl'
        lines = st.read_text().splitlines(True)
        st.write_text(''.join(lines[:len(lines) // 2]) + lines[-1][:30])
        for f in ('false_negative.jsonl', 'false_negative_calls.jsonl'):     # the stage's records and its kept calls lost
            (tmp_path / 'out' / 'stages' / f).unlink(missing_ok=True)
        llm3 = make_llm(spec, cache_dir=tmp_path / 'c')
        res3 = build_queries(None, llm3, tmp_path / 'out', per_paper=1, bm25_k=0, papers=ps, cache_dir=tmp_path / 'c')
        assert srv.n_calls == n                                               # nothing recomputed by the model
        assert llm3.stats['calls'] > 0 and llm3.stats['cache_hits'] == llm3.stats['calls']
        assert res3['attrition']['counts'] == res['attrition']['counts']
        assert (tmp_path / 'out' / 'queries.jsonl').read_text() == first
        # the single stages on a query file, through the CLI functions
        s = rephrase_queries(tmp_path / 'out' / 'queries.jsonl', llm3, tmp_path / 'reph.jsonl')
        assert s['n_out'] == s['n_in'] and srv.n_calls == n                   # same prompts: cached
        s = check_false_negatives(None, tmp_path / 'out' / 'queries.jsonl', llm3, tmp_path / 'fn.jsonl', top_n=3, papers=ps)
        assert s['n_out'] == s['n_in'] and Path(s['records_file']).is_file()


def test_garbage_everywhere_drops_with_reasons(papers, tmp_path):
    from docbench_nb.llm import make_llm
    from docbench_nb.testing import ScriptedChatServer
    with ScriptedChatServer(default='I am a small model and I like trains.') as srv:
        llm = make_llm(f'openai:g@{srv.base_url}', cache_dir=tmp_path / 'c')
        res = build_queries(None, llm, tmp_path / 'o', per_paper=1, papers=papers[:2], cache_dir=tmp_path / 'c')
    assert res['n_queries'] == 0 and res['attrition']['consistent']
    assert all(c['out'] == 0 and c['dropped'] == c['in'] > 0 for c in res['attrition']['counts']['generate'].values())
    assert (tmp_path / 'o' / 'queries.jsonl').read_text() == ''             # nothing survived: an empty file


def test_cli_parser(tmp_path, papers):
    import argparse
    ap = argparse.ArgumentParser(); ap.add_argument('--cache-dir'); ap.add_argument('-q', '--quiet', action='store_true')
    add_queries_parser(ap.add_subparsers(dest='cmd'))
    a = ap.parse_args(['queries', 'build', '--corpus', 'C', '--llm', 'local', '--types', 'text,figure', '--per-paper', '3'])
    assert (a.per_paper, a.bm25_k, a.types, a.out) == (3, 5, 'text,figure', 'queries_out') and callable(a.fn)
    for cmd in (['filter', '--corpus', 'C', '--queries', 'Q', '--out', 'O'], ['rephrase', '--queries', 'Q', '--llm', 'L', '--out', 'O'],
                ['check-fn', '--corpus', 'C', '--queries', 'Q', '--llm', 'L', '--out', 'O'],
                ['import-review', '--queries', 'Q', '--decisions', 'D', '--out', 'O']):
        assert callable(ap.parse_args(['queries'] + cmd).fn)
    a = ap.parse_args(['--cache-dir', str(tmp_path / 'c'), '-q', 'queries', 'filter', '--corpus', str(demo_corpus_dir()),
                       '--queries', str(demo_queries_path()), '--k', '1', '--out', str(tmp_path / 'f.jsonl')])
    assert a.fn(a) == 0 and 0 < len(read_query_records(tmp_path / 'f.jsonl')) < 60


# ---------------------------------------------------------------- the bundled local model on real papers
@pytest.mark.slow
def test_local_model_on_two_shared_papers(shared_papers, tmp_path):
    from docbench_nb.llm import make_llm
    srcs = [p for p in shared_papers if p.name in ('3I-ATLAS-discovery', 'alphabp')] or shared_papers[:2]
    ps, errors = load_papers(srcs, cache_dir=tmp_path / 'c', progress=False)
    assert len(ps) == 2, errors
    llm = make_llm('local?repairs=0', cache_dir=tmp_path / 'c')
    # one text passage per paper keeps the CPU time bounded (guided SmolLM2 on 2 cores: a few seconds per call)
    res = build_queries(None, llm, tmp_path / 'out', types=('text',), per_paper=1, papers=ps, cache_dir=tmp_path / 'c')
    att = res['attrition']
    assert att['consistent'] and llm.stats['calls'] > 0
    assert sum(att['counts']['extract'][t]['out'] for t in att['types']) == res['n_evidence'] > 0
    if res['n_queries']: load_queries(tmp_path / 'out' / 'queries.jsonl', known_doc_ids=[p.id for p in ps])   # valid, however few survive
    recs = [json.loads(l) for l in (tmp_path / 'out' / 'stages.jsonl').read_text().splitlines()]
    assert all(r['reason'] for r in recs if r['dropped'])
    # guided decoding: the weak model's answers always parse; what is dropped is dropped for what it says
    assert not any('JSON' in r['reason'] or 'schema' in r['reason'] for r in recs if r['dropped'])
