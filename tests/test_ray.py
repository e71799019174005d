"""`--engine ray`: a run killed part-way resumes from what it wrote (equality with the local engine, stage by stage,
is in tests/test_ray_stages.py)."""
import json, os, signal, subprocess, sys, time
from pathlib import Path
import pytest

ray = pytest.importorskip('ray')
from docbench_nb.demo import demo_corpus_dir, demo_queries_path
from docbench_nb.evaluation.core import evaluate
from docbench_nb.evaluation import ray_engine


def _shards(cache):
    return sorted(p.name for p in Path(cache).rglob('*.vecs.npy'))


def _keys(cache, names):
    import numpy as np
    return sum(len(np.load(p)) for p in Path(cache).rglob('*.keys.npy') if p.name.replace('.keys.npy', '.vecs.npy') in names)


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
    while True:                     # an actor outlives its driver briefly and may finish the shard it was writing
        time.sleep(3)
        if _shards(cache) == kept: break
        kept = _shards(cache)
    assert kept and len(list((cache / 'papers').iterdir())) == 21   # parse finished; some embedding finished
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200)
    assert r.returncode == 0, r.stderr[-2000:]
    assert set(kept) <= set(_shards(cache))                      # what the killed run wrote was reused, not rewritten
    eng = json.loads(r.stdout.strip().splitlines()[-1])
    assert eng['parse'] == {'parsed': 0, 'cached': 21}
    pre, after = eng['prefill'], _shards(cache)
    assert 0 < pre['encoded'] < pre['units'] + pre['queries']     # only what the first run had not finished ...
    assert pre['encoded'] + _keys(cache, kept) == _keys(cache, after)   # ... and nothing it had finished, encoded again
    assert set(eng['driver_work']) <= {'indexes'}
