"""`--engine ray` on a local Ray instance started by the test: same results as the local engine, embedding done
by the actor pool (the local pass embeds nothing), and a run killed part-way resumes from what it wrote."""
import json, os, signal, subprocess, sys, time
from pathlib import Path
import pytest

ray = pytest.importorskip('ray')
from docbench_nb.demo import demo_corpus_dir, demo_queries_path
from docbench_nb.evaluation.core import evaluate
from docbench_nb.evaluation import ray_engine


def _shards(cache):
    return sorted(p.name for p in Path(cache).rglob('*.vecs.npy'))


@pytest.mark.slow
def test_ray_dense_equals_local_and_embeds_in_actors(tmp_path):
    res = ray_engine.evaluate_ray(demo_corpus_dir(), demo_queries_path(), retriever='dense', chunk_size=512,
                                  cache_dir=tmp_path / 'ray', num_cpus=2, actors=2, progress=False, log=lambda m: None)
    eng = res.config['engine']
    assert eng['parse']['parsed'] == 21 and eng['embed']['embedded'] == eng['embed']['units'] > 0
    assert eng['driver_parsed'] == 0 and eng['driver_embedded'] == 0   # counted: every vector came from the actors
    shards = _shards(tmp_path / 'ray')
    assert shards                                               # written by the driver from the actors' batches
    again = evaluate(demo_corpus_dir(), demo_queries_path(), retriever='dense', chunk_size=512, cache_dir=tmp_path / 'ray',
                     progress=False)
    assert _shards(tmp_path / 'ray') == shards                  # the local engine found every vector: nothing embedded
    local = evaluate(demo_corpus_dir(), demo_queries_path(), retriever='dense', chunk_size=512, cache_dir=tmp_path / 'local',
                     progress=False)
    assert [q['query_id'] for q in res.per_query] == [q['query_id'] for q in local.per_query]
    for a, b in zip(res.per_query, local.per_query):
        assert a['ndcg@10'] == pytest.approx(b['ndcg@10'], abs=1e-9), a['query_id']
    for qid in local.run.scores:                                 # same ranking; scores equal to float32 noise
        assert res.run.ranking(qid)[:10] == local.run.ranking(qid)[:10], qid
    assert again.overall == res.overall


RUN = """
import json, sys
from docbench_nb.evaluation import ray_engine
from docbench_nb.demo import demo_corpus_dir, demo_queries_path
res = ray_engine.evaluate_ray(demo_corpus_dir(), demo_queries_path(), retriever='dense', chunk_size=128, cache_dir=sys.argv[1],
                              num_cpus=2, actors=1, batch_size=16, progress=False, log=lambda m: None)
print(json.dumps(res.config['engine']))
"""


@pytest.mark.slow
def test_ray_run_killed_while_embedding_resumes(tmp_path):
    cache = tmp_path / 'cache'
    cmd = [sys.executable, '-c', RUN, str(cache)]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    t0 = time.time()
    while not _shards(cache) and p.poll() is None and time.time() - t0 < 600: time.sleep(0.2)
    assert p.poll() is None, 'the run finished before any shard was written: nothing to kill'
    os.killpg(p.pid, signal.SIGKILL); p.wait()
    kept = _shards(cache)
    assert kept and len(list((cache / 'papers').iterdir())) == 21   # parse finished; some embedding finished
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-2000:]
    assert set(kept) <= set(_shards(cache))                      # what the killed run wrote was reused, not rewritten
    eng = json.loads(r.stdout.strip().splitlines()[-1])
    assert eng['parse'] == {'parsed': 0, 'cached': 21}
    assert 0 < eng['embed']['embedded'] < eng['embed']['units']  # only what the first run had not finished
    assert eng['embed']['embedded'] <= eng['embed']['units'] - 16 * len(kept)
