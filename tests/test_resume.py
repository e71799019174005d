"""Kill-and-resume at each heavy stage of a local run: `docbench evaluate` (pages rendered from the authors' LaTeX,
OCR'd with tesseract, BM25) is SIGKILLed part-way through parsing, resumed and killed part-way through rendering,
resumed and killed part-way through OCR, then resumed to the end. Every entry a killed run completed must be reused
(same bytes, same mtime: not recomputed) and the end result must be exactly that of an uninterrupted run on a clean
cache. Embedding is covered by `tests/test_ray.py` (killed while the
actor pool embeds) and `tests/test_cache.py` (damaged shards)."""
import json, os, shutil, signal, subprocess, sys, time
from pathlib import Path
import pytest

SHARED = Path(__file__).resolve().parents[2] / 'shared'
PAPERS = ('arm61-linearization', 'arm61-msd-errors', 'duthie-nuptial-gift', 'duthie-random-matrix')
STAGES = {'parse': 'papers/*.json', 'render': 'render/*/*/result.json', 'ocr': 'ocr/**/*.json'}

pytestmark = [pytest.mark.slow,
              pytest.mark.skipif(not (SHARED / 'corpus' / 'papers').is_dir(), reason='needs the shared corpus'),
              pytest.mark.skipif(shutil.which('pdflatex') is None or shutil.which('tesseract') is None,
                                 reason='needs pdflatex and tesseract')]


@pytest.fixture(scope='module')
def inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp('resume')
    for p in PAPERS: shutil.copytree(SHARED / 'corpus' / 'papers' / p, d / 'corpus' / p)
    qs = [l for l in (SHARED / 'queries' / 'dev.jsonl').read_text().splitlines() if json.loads(l)['doc_id'] in PAPERS]
    (d / 'queries.jsonl').write_text('\n'.join(qs) + '\n')
    return d


def _cmd(inputs, cache, out):
    return [str(Path(sys.executable).parent / 'docbench'), '--cache-dir', str(cache), 'evaluate', '--corpus', str(inputs / 'corpus'),
            '--queries', str(inputs / 'queries.jsonl'), '--representation', 'pages', '--retriever', 'ocr:tesseract+bm25',
            '--max-pages', '2', '--workers', '1', '--out', str(out)]


def _entries(cache, pattern):
    "{path: (bytes, mtime_ns)} of the completed entries of one stage."
    return {str(f): (f.read_bytes(), f.stat().st_mtime_ns) for f in Path(cache).glob(pattern) if f.is_file()}


def _result(path):
    d = json.loads(Path(path).read_text())
    return d['overall'], [(q['query_id'], q['rank'], q['ndcg@10']) for q in d['per_query']], d['n_units']


@pytest.fixture(scope='module')
def reference(inputs):
    r = subprocess.run(_cmd(inputs, inputs / 'ref-cache', inputs / 'ref.json'), capture_output=True, text=True, timeout=1200,
                       env={**os.environ, 'OMP_NUM_THREADS': '1'})
    assert r.returncode == 0, r.stderr[-3000:]
    return _result(inputs / 'ref.json'), {s: len(_entries(inputs / 'ref-cache', g)) for s, g in STAGES.items()}


def _run_until(cmd, cache, pattern):
    "Start `cmd`, SIGKILL its process group once an entry matching `pattern` exists; the completed entries then."
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, start_new_session=True,
                         env={**os.environ, 'OMP_NUM_THREADS': '1'})
    t0 = time.time()
    while p.poll() is None and not _entries(cache, pattern) and time.time() - t0 < 900: time.sleep(0.01)
    assert p.poll() is None, f'the run ended before any {pattern} entry was written (rc {p.returncode}): nothing to kill'
    os.killpg(p.pid, signal.SIGKILL); p.wait()
    return _entries(cache, pattern)


def test_killed_at_each_stage_resumes_to_the_same_result(inputs, reference, tmp_path):
    """One run killed during parse, resumed and killed during render, resumed and killed during OCR, resumed to the end:
    at each step the entries already finished are reused (same bytes and mtime), and the end result is the reference."""
    ref, ref_counts = reference
    cache, out = tmp_path / 'cache', tmp_path / 'out.json'
    cmd, done = _cmd(inputs, cache, out), {}
    for stage, pattern in STAGES.items():
        assert ref_counts[stage] >= 2, f'the reference run made {ref_counts[stage]} {stage} entries: too few to kill between'
        kept = _run_until(cmd, cache, pattern)
        assert 1 <= len(kept) < ref_counts[stage], f'{len(kept)} of {ref_counts[stage]} {stage} entries: not killed mid-stage'
        for earlier, entries in done.items():              # the stages before this one finished in the resumed run...
            now = _entries(cache, STAGES[earlier])
            assert len(now) == ref_counts[earlier], earlier
            assert all(now[f] == v for f, v in entries.items()), f'a finished {earlier} entry was written again'
        done[stage] = kept
        assert not out.exists()
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=1200, env={**os.environ, 'OMP_NUM_THREADS': '1'})
    assert r.returncode == 0, r.stderr[-3000:]
    for stage, entries in done.items():                    # ...and nothing any killed run had finished was redone
        now = _entries(cache, STAGES[stage])
        assert len(now) == ref_counts[stage] and all(now[f] == v for f, v in entries.items()), stage
    assert _result(out) == ref                             # exactly the uninterrupted run's metrics, query by query
