"""`docbench grid` on the shared corpus reproduces the first wave's representation table (the committed result files in
results/representations), and a rerun recomputes nothing."""
import json
from pathlib import Path
import pytest
from docbench_nb.evaluation.grid import grid
from docbench_nb.cli import main

ROOT = Path(__file__).resolve().parents[1]
FIRST_WAVE = ROOT / 'results' / 'representations'


def per_query(path):
    d = json.loads(Path(path).read_text())
    return {r['query_id']: r['ndcg@10'] for r in d['per_query']}, d


@pytest.mark.slow
def test_grid_reproduces_first_wave_text_rows(shared_dir, tmp_path_factory):
    cache, out = tmp_path_factory.mktemp('cache'), tmp_path_factory.mktemp('grid')
    corpus, queries = shared_dir / 'corpus' / 'papers', shared_dir / 'queries' / 'dev.jsonl'
    rows = ['text|bm25|512', 'text|dense|1024']
    t = grid(corpus, queries, out, rows=rows, cache_dir=cache, progress=False, log=lambda *a: None)
    assert (t['computed'], t['failed']) == (2, 0)
    for row, old in zip(t['rows'], ['text__bm25__512.json', 'text__dense__1024.json']):
        new_pq, new = per_query(out / row['result'])
        old_pq, old_d = per_query(FIRST_WAVE / old)
        assert new_pq == pytest.approx(old_pq, abs=1e-6), row['label']         # every query's nDCG@10, not just the mean
        assert (new['n_units'], new['index_bytes']) == (old_d['n_units'], old_d['index_bytes'])
    assert 'p_value' not in t['rows'][0] and 0 < t['rows'][1]['p_value'] <= t['rows'][1]['p_holm'] <= 1   # vs the baseline row
    # a rerun through the command line reuses both rows
    rc = main(['-q', '--cache-dir', str(cache), 'grid', '--corpus', str(corpus), '--queries', str(queries), '--out', str(out),
               '--rows', rows[0], '--rows', rows[1]])
    assert rc == 0
    again = json.loads((out / 'table.json').read_text())
    assert (again['computed'], again['reused']) == (0, 2)
    assert [r['ndcg@10'] for r in again['rows']] == [r['ndcg@10'] for r in t['rows']]
