"End to end: `docbench evaluate` / `docbench demo` on the embedded demo and on ../shared."
import json, subprocess, sys, pytest
from pathlib import Path
from docbench_nb.cli import main
from docbench_nb.demo import demo_corpus_dir, demo_queries_path
from docbench_nb.evaluation.core import evaluate
from docbench_nb.latex.corpus import load_papers
ROOT = Path(__file__).resolve().parents[1]

KEYS = {'config', 'n_docs', 'n_units', 'index_bytes', 'overall', 'by_evidence_type', 'by_level', 'per_query', 'timings'}
METRICS = {'ndcg@10', 'recall@1', 'recall@5', 'recall@10', 'mrr@10'}

def test_evaluate_cli_writes_contract_json(tmp_path, capsys):
    out = tmp_path / 'r.json'
    rc = main(['-q', '--cache-dir', str(tmp_path / 'c'), 'evaluate', '--corpus', str(demo_corpus_dir()),
               '--queries', str(demo_queries_path()), '--retriever', 'bm25', '--chunk-size', '256', '--out', str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert KEYS <= set(res)
    assert METRICS <= set(res['overall'])
    assert sorted(res['by_level']) == ['0', '1', '2', '3']
    assert set(res['by_evidence_type']) == {'text', 'table', 'figure'}
    assert res['n_docs'] == 21 and res['index_bytes'] > 0
    assert {'query_id', 'level', 'type', 'gold', 'rank'} <= set(res['per_query'][0])
    assert 'ndcg@10' in capsys.readouterr().out
    assert Path(str(out) + '.run').read_text().count('\n') > 60

def test_unknown_doc_id_is_a_clear_error(tmp_path, capsys):
    q = tmp_path / 'q.jsonl'
    good = demo_queries_path().read_text().splitlines()[0]
    bad = json.loads(good); bad['id'] = 'x-2'; bad['doc_id'] = 'no-such-paper'
    q.write_text(good + '\n' + json.dumps(bad) + '\n')
    rc = main(['-q', '--cache-dir', str(tmp_path / 'c'), 'evaluate', '--corpus', str(demo_corpus_dir()), '--queries', str(q),
               '--retriever', 'bm25'])
    err = capsys.readouterr().err
    assert rc == 2 and 'line 2' in err and 'no-such-paper' in err

@pytest.mark.slow
def test_demo_command_runs(tmp_path):
    "The README's main job, as a user runs it (console script, fresh cache)."
    exe = Path(sys.executable).parent / 'docbench'
    r = subprocess.run([str(exe), '-q', '--cache-dir', str(tmp_path), 'demo', '--out', str(tmp_path / 'out')],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr[-2000:]
    assert 'nDCG@10(L0)' in r.stdout
    res = {p.stem: json.loads(p.read_text()) for p in (tmp_path / 'out').glob('*.json')}
    assert set(res) == {'demo-bm25', 'demo-dense', 'demo-hybrid'}
    committed = {f'demo-{r}': json.loads((ROOT / 'results' / 'grid_demo' / f'text__{r}__256.json').read_text())['overall']['ndcg@10']
                 for r in ('bm25', 'dense', 'hybrid')}                      # the committed grid, same configuration
    for k, v in res.items(): assert v['overall']['ndcg@10'] == pytest.approx(committed[k], abs=0.005), (k, v['overall'])
    # hybrid stores both indexes
    assert res['demo-hybrid']['index_bytes'] == res['demo-bm25']['index_bytes'] + res['demo-dense']['index_bytes']

@pytest.mark.slow
def test_second_dense_run_reembeds_nothing(tmp_path):
    from docbench_nb.retrieval.registry import make_retriever
    papers, _ = load_papers(demo_corpus_dir(), cache_dir=tmp_path, progress=False)
    r1 = make_retriever('dense', cache_dir=tmp_path)
    a = evaluate(demo_corpus_dir(), demo_queries_path(), retriever=r1, chunk_size=128, papers=papers, progress=False)
    r2 = make_retriever('dense', cache_dir=tmp_path)
    b = evaluate(demo_corpus_dir(), demo_queries_path(), retriever=r2, chunk_size=128, papers=papers, progress=False)
    assert r2.cache.misses == 0 and (r2.store.built, r2.store.loaded) == (0, 1)      # the saved index loads: nothing embedded
    assert a['overall'] == b['overall']

@pytest.mark.slow
def test_bm25_on_shared_meets_anchor(shared_dir, tmp_path):
    "BM25 on the shared corpus at chunk 512 is at least the naive anchor (0.973/0.969/0.972/0.967) minus noise."
    res = evaluate(shared_dir / 'corpus' / 'papers', shared_dir / 'queries' / 'dev.jsonl', retriever='bm25',
                   chunk_size=512, cache_dir=tmp_path, progress=False)
    assert res['n_docs'] == 80 and not res['parse_errors']
    for lvl in '0123': assert res['by_level'][lvl]['ndcg@10'] >= 0.94, res['by_level']


@pytest.mark.slow
def test_default_chunk_size_is_the_retriever_window(tmp_path):
    "Without chunk_size, dense chunks to MiniLM's 256-token window and BM25 to 512; config records which and why."
    papers, _ = load_papers(demo_corpus_dir(), cache_dir=tmp_path, progress=False)
    d = evaluate(demo_corpus_dir(), demo_queries_path(), retriever='dense', papers=papers, cache_dir=tmp_path, progress=False)
    b = evaluate(demo_corpus_dir(), demo_queries_path(), retriever='bm25', papers=papers, cache_dir=tmp_path, progress=False)
    assert (d['config']['chunk_size'], d['config']['chunk_size_from']) == (256, 'retriever window')
    assert (b['config']['chunk_size'], b['config']['chunk_size_from']) == (512, 'bm25 default')
    assert d['n_units'] > b['n_units'] and not any('exceeds' in w for w in d['warnings'])
    assert all('represent_warnings' not in p.meta for p in papers)
