"`docbench train`: pairs, a short real training run, the saved folder, and the leakage guard."
import json, random
from pathlib import Path
import numpy as np
import pytest
from docbench_nb.demo import demo_corpus_dir, demo_queries_path
from docbench_nb.evaluation.core import evaluate
from docbench_nb.latex.corpus import load_papers
from docbench_nb.evaluation.formats import load_queries
from docbench_nb.training.finetune import llm_free_pairs, query_pairs, train_dense, split_groups, evidence_passage, TrainPair
from docbench_nb.evaluation.provenance import TRAIN_RECORD, text_digest


@pytest.fixture(scope='module')
def demo(tmp_path_factory):
    cache = tmp_path_factory.mktemp('c')
    papers, _ = load_papers(demo_corpus_dir(), cache_dir=cache, progress=False)
    return papers, load_queries(demo_queries_path(), levels=(0, 1, 2, 3)), cache


def test_query_pairs_positive_holds_the_evidence(demo):
    "The positive of every demo query is a passage of its gold paper sharing most of the excerpt's words."
    papers, qs, _ = demo
    by_id = {p.id: p for p in papers}
    pairs = query_pairs(qs, papers)
    assert len(pairs) == len({q.group_id for q in qs}) > 10
    for p in pairs:
        words = set(p.evidence.lower().split())
        assert p.positive in by_id[p.doc_id].text or p.positive.split(' ')[0] in by_id[p.doc_id].text
        assert evidence_passage(by_id[p.doc_id], p.evidence) == p.positive


def test_training_changes_the_model_and_the_guard_refuses_overlap(demo, tmp_path):
    "Train on half of the demo queries: evaluating on them is refused; on the other half it runs and records the training."
    papers, qs, cache = demo
    train_q, test_q = split_groups(qs, 0.5, seed=0)
    assert not {q.group_id for q in train_q} & {q.group_id for q in test_q}
    pairs = query_pairs(train_q, papers, rephrase_frac=0.5) + llm_free_pairs(papers, per_paper=1)
    rec = train_dense(pairs, tmp_path / 'm', batch_size=16, max_length=32, progress=False)
    n_steps = sum(1 for s in range(0, len(pairs), 16) if min(16, len(pairs) - s) >= 2)       # a trailing batch of one is dropped
    assert len(rec['log']) == n_steps and all(np.isfinite(r['loss']) for r in rec['log'])
    saved = json.loads((tmp_path / 'm' / TRAIN_RECORD).read_text())
    assert saved['data']['sha256'] == rec['data']['sha256'] and saved['seed'] == 0
    assert set(saved['data']['query_texts']) == {text_digest(t) for p in pairs if p.source == 'query' for t in [p.query, *p.siblings]}
    assert all(text_digest(q.text) in saved['data']['query_texts'] for q in train_q)     # every level of a trained group
    held = tmp_path / 'held.jsonl'; groups = {q.group_id for q in test_q}
    held.write_text(''.join(l + '\n' for l in Path(demo_queries_path()).read_text().splitlines() if l.strip() and json.loads(l)['id'] in groups))
    spec = f"dense:{tmp_path / 'm'}"
    with pytest.raises(ValueError, match='were trained on'):
        evaluate(demo_corpus_dir(), demo_queries_path(), retriever=spec, papers=papers, cache_dir=cache, progress=False)
    over = evaluate(demo_corpus_dir(), demo_queries_path(), retriever=spec, papers=papers, cache_dir=cache, progress=False, allow_overlap=True)
    assert over['training']['allow_overlap'] and over['training']['n_overlap'] >= len({q.group_id for q in train_q})
    res = evaluate(demo_corpus_dir(), held, retriever=spec, papers=papers, cache_dir=cache, progress=False)
    assert res['training']['n_overlap'] == 0 and res['training']['models'][0]['adapted_on_papers'] == len(papers)
    base = evaluate(demo_corpus_dir(), held, retriever='dense', papers=papers, cache_dir=cache, progress=False)
    assert 'training' not in base
    assert [r['query_id'] for r in res.per_query] == [r['query_id'] for r in base.per_query]
    assert res.run.scores != base.run.scores                                # the weights changed the scores


def test_cli_train_then_evaluate_the_folder(tmp_path):
    "`docbench train` with only --corpus trains on LLM-free pairs; the folder evaluates through --retriever dense:DIR."
    from docbench_nb.cli import main
    c = ['--cache-dir', str(tmp_path / 'c'), '-q']
    assert main(['train', '--corpus', str(demo_corpus_dir()), '--per-paper', '1', '--max-length', '32', '--batch-size', '16',
                 '--out', str(tmp_path / 'm')] + c) == 0
    rec = json.loads((tmp_path / 'm' / TRAIN_RECORD).read_text())
    assert rec['kind'] == 'dense' and set(rec['data']['by_source']) <= {'ict', 'caption', 'section', 'table'} and rec['log']
    assert main(['train', '--corpus', str(demo_corpus_dir()), '--out', str(tmp_path / 'm')] + c) == 2      # not empty, no --force
    assert main(['evaluate', '--corpus', str(demo_corpus_dir()), '--queries', str(demo_queries_path()), '--retriever',
                 f"dense:{tmp_path / 'm'}", '--out', str(tmp_path / 'r.json')] + c) == 0
    res = json.loads((tmp_path / 'r.json').read_text())
    assert res['training']['n_overlap'] == 0 and res['training']['models'][0]['adapted_on_papers'] == 21


def _rephrase_server(fail_level=None):
    "A loopback chat server that rephrases by prefixing the level's word, and whose meaning check rejects `fail_level`."
    from docbench_nb.testing import ScriptedChatServer
    from docbench_nb.queries.llm_stages import rephrase_prompt
    words = {1: 'Reworded', 2: 'Paraphrased', 3: 'Recast'}
    tail = {l: rephrase_prompt(l).messages(query='\x00')[-1]['content'].split('\x00')[-1].strip()[:60] for l in words}
    assert len(set(tail.values())) == 3
    def answer(req):
        body, user = json.dumps(req), req['messages'][-1]['content']
        if 'same_meaning' in body:
            return json.dumps({'same_meaning': not (fail_level and words[fail_level] in user), 'same_answer': True})
        if 'rephrasing' in body:
            level = next(l for l, t in tail.items() if t in user)
            return json.dumps({'rephrasing': f"{words[level]} (level {level}): " + next(t for t in srv.queries if t in user)})
        return json.dumps({})
    srv = ScriptedChatServer(default=answer)
    return srv


def test_llm_rephrased_training_pairs_are_checked_recorded_and_resumed(demo, tmp_path):
    "With `llm`, half the training queries are rephrased by the chat model at a random level; failed checks keep the original and say so."
    from docbench_nb.llm import make_llm
    from docbench_nb.queries.evidence import StageStore
    papers, qs, _ = demo
    train_q, _ = split_groups(qs, 0.5, seed=0)
    plain = query_pairs(train_q, papers)
    with _rephrase_server() as srv:
        srv.queries = sorted({q.text for q in train_q if q.level == 0}, key=len, reverse=True)
        llm = make_llm(f'openai:tiny@{srv.base_url}?backoff=0.01', cache_dir=tmp_path / 'llm')
        pairs = query_pairs(train_q, papers, rephrase_frac=0.5, llm=llm, store=StageStore(tmp_path / 'st'))
        n_calls, fp = srv.n_calls, llm.fingerprint
        rew = [p for p in pairs if p.rephrased_by]
        assert {p.rephrased_by for p in rew} == {fp}
        rng = random.Random(0)          # the seeded draws, in group order: a level 1-3 for about half the groups
        chosen = [rng.randint(1, 3) if rng.random() < 0.5 else 0 for _ in plain]
        assert len(pairs) == len(plain) and [p.level for p in pairs] == chosen and 8 <= len(rew) <= 22
        assert all(p.level in (1, 2, 3) and p.query.split(': ', 1)[1] == p.siblings[0] and p.query in p.siblings for p in rew)
        assert all(p.query.startswith(('Reworded', 'Paraphrased', 'Recast')[p.level - 1]) for p in rew)
        assert {p.level for p in rew} == {1, 2, 3} and [p.positive for p in pairs] == [p.positive for p in plain]
        assert n_calls == 6 * len(rew)                         # three levels, each written and checked, only for the chosen half
        again = query_pairs(train_q, papers, rephrase_frac=0.5, llm=llm, store=StageStore(tmp_path / 'st'))
        assert srv.n_calls == n_calls and [p.query for p in again] == [p.query for p in pairs]     # resumed: no new call
    with _rephrase_server(fail_level=2) as srv:               # level 2 never passes its check
        srv.queries = sorted({q.text for q in train_q if q.level == 0}, key=len, reverse=True)
        llm = make_llm(f'openai:tiny@{srv.base_url}?backoff=0.01', cache_dir=tmp_path / 'llm2')
        bad = query_pairs(train_q, papers, rephrase_frac=0.5, llm=llm)
    chose = [b for b, p in zip(bad, pairs) if p.rephrased_by]
    assert all(b.rephrased_by is None and b.level == 0 and 'level' in b.note for b in chose if b.level == 0)
    assert any(b.note for b in chose) and all(not b.note for b in bad if b not in chose)
    assert all(b.rephrased_by and b.level == 1 for b in chose if not b.note)   # only level 1 can pass before level 2 fails
    rec = train_dense(pairs, tmp_path / 'm', batch_size=16, max_length=32, progress=False)
    assert rec['data']['rephrased_by'] == {fp: len(rew)} and rec['data']['notes'] == []
    assert {text_digest(p.query) for p in rew} <= set(rec['data']['query_texts'])      # the guard knows the written texts


def test_table_pairs_are_tables(demo):
    "The table kind pairs a caption with its cells, and each sentence citing the table with caption and cells."
    papers, _, _ = demo
    pairs = llm_free_pairs(papers, per_paper=50, kinds=('table',))
    by_id = {p.id: p for p in papers}
    assert {p.source for p in pairs} == {'table', 'table-cite'}
    for x in pairs:
        p = by_id[x.doc_id]
        cells = {' | '.join(' ; '.join(map(str, r)) for r in t.rows): t for t in p.tables if t.rows}
        t = next(t for c, t in cells.items() if x.positive.endswith(c))
        if x.source == 'table': assert x.query == ' '.join(t.caption.split())
        else: assert x.query in ' '.join(p.text.split()) and x.positive.startswith(' '.join(t.caption.split()))


def test_llm_mix_and_flag_refusals(tmp_path, capsys):
    "The LLM-rephrased mix without a chat model, an unknown mix, and --llm without query pairs are refused before any work."
    from docbench_nb.cli import main
    from docbench_nb.training.finetune import ablation
    with pytest.raises(ValueError, match="needs a chat model"):
        ablation(demo_corpus_dir(), demo_queries_path(), tmp_path / 'a', mixes=['base', 'queries-llm-rephrased'])
    with pytest.raises(ValueError, match=r"unknown mixes \['tabels'\]"):
        ablation(demo_corpus_dir(), demo_queries_path(), tmp_path / 'a', mixes=['tabels'])
    assert not (tmp_path / 'a').exists()
    assert main(['train', '--corpus', str(demo_corpus_dir()), '--llm', 'local', '--out', str(tmp_path / 'm'), '-q']) == 2
    assert 'add queries to --pairs' in capsys.readouterr().err and not (tmp_path / 'm').exists()
