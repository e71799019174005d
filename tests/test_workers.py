"Bounded work per paper: parsing in worker processes with time and memory limits, on the shared corpus and hostile inputs."
import json, os, shutil, time
from pathlib import Path
import pytest
from docbench_nb.records import Paper, PaperError
from docbench_nb.workers import map_bounded, imap_bounded, WorkFailure
from docbench_nb.evaluation.core import evaluate
from docbench_nb.latex.corpus import load_papers, corpus_sources, source_key
from docbench_nb.cache import stage_dir
from docbench_nb.latex import sources as latex

def _strip(p):
    d = p.to_dict(); d['meta'] = {k: v for k, v in d['meta'].items() if k != 'timings'}
    return d

def _unclosed_tabulars(n):
    return '\\documentclass{article}\\begin{document}\n' + '\\begin{tabular}{cc} a & b \\\\\n' * n + '\\end{document}\n'

@pytest.mark.slow
def test_parallel_parse_equals_serial_on_shared_corpus(shared_dir, tmp_path):
    corpus = shared_dir / 'corpus' / 'papers'
    serial, e1 = load_papers(corpus, cache_dir=tmp_path / 'a', progress=False, workers=1, time_limit=None)
    t = time.time()
    par, e2 = load_papers(corpus, cache_dir=tmp_path / 'b', progress=False, workers=2)
    assert len(serial) == len(par) >= 75 and [p.id for p in serial] == [p.id for p in par]
    assert [_strip(p) for p in serial] == [_strip(p) for p in par]         # same Paper JSON
    assert [e.to_dict() for e in e1] == [e.to_dict() for e in e2]
    cached, _ = load_papers(corpus, cache_dir=tmp_path / 'b', progress=False, workers=2)
    assert [p.to_dict() for p in cached] == [p.to_dict() for p in par]

def test_one_paper_over_its_time_limit_does_not_stop_the_others(shared_papers, tmp_path):
    corpus = tmp_path / 'corpus'; corpus.mkdir()
    for p in shared_papers[:3]: shutil.copytree(p, corpus / p.name)
    (corpus / 'zz-hostile').mkdir(); (corpus / 'zz-hostile' / 'main.tex').write_text('\\input{main}' * 3 + _unclosed_tabulars(400_000))
    papers, errors = load_papers(corpus, cache_dir=tmp_path / 'c', progress=False, workers=2, time_limit=3)
    assert [p.id for p in papers] == [p.name for p in shared_papers[:3]]
    assert [(e.id, e.error) for e in errors] == [('zz-hostile', 'parse exceeded 3 s wall time')]
    entry = json.loads((stage_dir('papers', tmp_path / 'c') / f"{source_key(corpus / 'zz-hostile')}.json").read_text())
    assert entry['limit'] == 'time' and entry['limits']['time_s'] == 3       # the failure is cached with its reason
    from docbench_nb.latex import corpus as C
    seen, real = [], C.imap_bounded
    def counting(fn, items, **kw): items = list(items); seen.extend(items); return real(fn, items, **kw)
    C.imap_bounded = counting
    try: _, errors2 = load_papers(corpus, cache_dir=tmp_path / 'c', progress=False, workers=2, time_limit=3)
    finally: C.imap_bounded = real
    assert errors2 == errors and seen == []                                   # not parsed again (counted, not timed)

def test_memory_limit_names_the_limit():
    out = map_bounded(bytearray, [4 * 2**30, 16], workers=2, memory_mb=512, progress=False)
    assert out == [WorkFailure('memory', 'exceeded the 512 MB memory limit'), bytearray(16)]

def test_outcomes_are_yielded_as_they_finish():
    order = [i for i, _ in imap_bounded(time.sleep, [1.0, 0.0, 0.0], workers=2, progress=False)]
    assert sorted(order) == [0, 1, 2] and order[0] != 0

def test_non_utf8_folder_name_does_not_abort(shared_papers, tmp_path):
    corpus = tmp_path / 'corpus'; corpus.mkdir()
    shutil.copytree(shared_papers[0], corpus / shared_papers[0].name)
    bad = os.path.join(os.fsencode(corpus), b'caf\xe9-paper')
    shutil.copytree(shared_papers[1], os.fsdecode(bad))
    papers, errors = load_papers(corpus, cache_dir=tmp_path / 'c', progress=False, workers=2)
    assert errors == [] and sorted(p.id for p in papers) == sorted([shared_papers[0].name, 'caf\\xe9-paper'])
    again, _ = load_papers(corpus, cache_dir=tmp_path / 'c', progress=False, workers=1)
    assert [p.to_dict() for p in again] == [p.to_dict() for p in papers]       # the cache entry round-trips

def test_empty_corpus_and_one_paper_corpus(shared_papers, tmp_path):
    empty = tmp_path / 'empty'; empty.mkdir()
    with pytest.raises(ValueError, match='holds no paper sources'): load_papers(empty, cache_dir=tmp_path / 'c')
    with pytest.raises(ValueError, match='does not exist'): corpus_sources(tmp_path / 'nope')
    one = tmp_path / 'one'; one.mkdir()
    shutil.copytree(shared_papers[0], one / shared_papers[0].name)
    assert latex.iter_sources(str(one)) == [str(one)]                        # iter_sources alone takes it as the paper
    assert corpus_sources(one, {shared_papers[0].name}) == [str(one / shared_papers[0].name)]
