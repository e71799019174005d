"`docbench train`: pairs, a short real training run, the saved folder, and the leakage guard."
import json
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
