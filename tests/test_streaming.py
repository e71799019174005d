"Streamed evaluation (`RunContext(stream=True)`, `docbench evaluate --stream`): the same numbers as in memory, with a batch of papers held at a time."
import json, warnings
from pathlib import Path
import pytest
from docbench_nb.context import RunContext
from docbench_nb.evaluation.core import evaluate
from docbench_nb.evaluation.formats import load_queries
from docbench_nb.retrieval import unit_shards
from docbench_nb.retrieval.unit_index import IndexStore
from docbench_nb.demo import demo_corpus_dir, demo_queries_path

N_PAPERS, BATCH = 24, 5

@pytest.fixture(scope='module')
def subset(shared_dir, shared_papers):
    srcs = [str(p) for p in shared_papers[:N_PAPERS]]
    ids = {Path(s).name for s in srcs}
    qs = [q for q in load_queries(shared_dir / 'queries' / 'dev.jsonl') if set(q.doc_ids) <= ids]
    assert len(qs) >= 20
    return srcs, qs

def _same(a, b):
    assert a['per_query'] == b['per_query'] and a.run.scores == b.run.scores and a.run.provenance == b.run.provenance
    for k in ('overall', 'by_level', 'by_evidence_type', 'n_units', 'n_docs', 'index_bytes', 'warnings'): assert a[k] == b[k], k
    assert a.extra['provenance']['corpus'] == b.extra['provenance']['corpus']

def test_streamed_bm25_equals_in_memory_and_holds_one_batch(subset, tmp_path, monkeypatch):
    srcs, qs = subset
    monkeypatch.setattr(unit_shards, 'SHARD_BATCH', BATCH)
    held, real = [], unit_shards.represent
    monkeypatch.setattr(unit_shards, 'represent', lambda papers, *a, **kw: (held.append(len(papers)), real(papers, *a, **kw))[1])
    # the streamed run builds its BM25 index from the shards (a cache of its own: nothing to load from the other run)
    s = evaluate(srcs, qs, 'text', 'bm25', ctx=RunContext(cache_dir=str(tmp_path / 'a'), progress=False, stream=True))
    m = evaluate(srcs, qs, 'text', 'bm25', ctx=RunContext(cache_dir=str(tmp_path / 'b'), progress=False))
    _same(s, m)
    assert max(held) <= BATCH and sum(held) == N_PAPERS and len(held) == -(-N_PAPERS // BATCH)
    assert s.extra['provenance']['context']['stream'] == {'shards': len(held), 'cached': False}
    assert 'parse_s' not in s.timings and 'shards_s' in s.timings

def test_warm_streamed_run_reads_no_paper_and_a_damaged_shard_is_rebuilt(subset, tmp_path, monkeypatch):
    srcs, qs = subset
    monkeypatch.setattr(unit_shards, 'SHARD_BATCH', BATCH)
    ctx = RunContext(cache_dir=str(tmp_path), progress=False, stream=True)
    cold = evaluate(srcs, qs, 'text', 'bm25', ctx=ctx)
    parsed, real = [], unit_shards.load_papers
    monkeypatch.setattr(unit_shards, 'load_papers', lambda s, **kw: (parsed.append(len(s)), real(s, **kw))[1])
    warm = evaluate(srcs, qs, 'text', 'bm25', ctx=ctx)
    _same(warm, cold)
    assert parsed == [] and warm.extra['provenance']['context']['stream']['cached'] is True
    shard = sorted((IndexStore.for_cache(str(tmp_path)).root / 'shards').rglob('units-00001.parquet'))
    assert len(shard) == 1
    shard[0].write_bytes(b'\0' * shard[0].stat().st_size)        # same size, other bytes
    with pytest.warns(UserWarning, match='does not match its checksum'):
        again = evaluate(srcs, qs, 'text', 'bm25', ctx=ctx)
    _same(again, cold)
    assert sum(parsed) == N_PAPERS                                  # rebuilt: every paper read again (from the parse cache)



def test_stream_refusals(tmp_path, capsys):
    ctx = RunContext(cache_dir=str(tmp_path), progress=False, stream=True)
    from docbench_nb.latex.corpus import load_papers
    ps, _ = load_papers(demo_corpus_dir(), cache_dir=str(tmp_path), progress=False)
    r = evaluate(demo_corpus_dir(), demo_queries_path(), papers=ps, ctx=ctx)          # nothing to stream: said, not refused
    assert any(w.startswith('stream (--stream or $DOCBENCH_STREAM) not used') for w in r['warnings'])
    from docbench_nb.context import context_from_env
    assert context_from_env({'DOCBENCH_STREAM': '1'}).stream and not context_from_env({'DOCBENCH_STREAM': 'false'}).stream
    with pytest.raises(ValueError, match='1, true, 0 or false'): context_from_env({'DOCBENCH_STREAM': 'yes'})
    from docbench_nb.cli import main
    rc = main(['--cache-dir', str(tmp_path / 'cli'), 'evaluate', '--corpus', str(demo_corpus_dir()), '--queries', str(demo_queries_path()),
               '--stream', '--engine', 'ray'])
    assert rc != 0 and '--stream runs on the local engine' in capsys.readouterr().err
    assert not (tmp_path / 'cli' / 'papers').exists()               # refused before any parsing
