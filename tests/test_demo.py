"Embedded demo corpus: layout, query files, verbatim evidence, figures on disk, compilability, originality."
import json, re, shutil, subprocess, tarfile, tempfile, gzip
from collections import Counter
from pathlib import Path

import pytest

from docbench_nb.demo import (demo_dir, demo_corpus_dir, demo_queries_path, demo_perspectives_path, demo_paper_ids,
                              demo_paper_path, demo_source_files, read_demo_source, demo_queries, demo_perspectives,
                              squash_ws, gzip_member_name, DEMO_FIELDS)

QUERY_KEYS = {'id', 'doc_id', 'evidence_type', 'evidence_file', 'evidence_locator', 'evidence_excerpt', 'answer',
              'query', 'rephrasings'}


def test_papers_present():
    ids = demo_paper_ids()
    assert len(ids) >= 14 and len(ids) == len(set(ids))
    assert sorted(DEMO_FIELDS) == ids
    kinds = Counter('dir' if demo_paper_path(i).is_dir() else demo_paper_path(i).name.split('.', 1)[1] for i in ids)
    assert kinds['tar.gz'] >= 1 and kinds['tex.gz'] >= 1
    for i in ids:   # every paper has exactly one file with \documentclass
        mains = [f for f in demo_source_files(i) if f.endswith('.tex') and '\\documentclass' in read_demo_source(i, f)]
        assert len(mains) == 1, (i, mains)


def test_gzip_single_file_is_named_after_paper():
    p = demo_paper_path('transmon-tls-fluctuations')
    assert p.name == 'transmon-tls-fluctuations.tex.gz'
    assert gzip_member_name(p) == 'transmon-tls-fluctuations.tex'
    assert gzip.decompress(p.read_bytes()).decode().lstrip('%').lstrip().startswith('arXiv')


def test_query_format_and_balance():
    qs = demo_queries()
    assert all(set(q) == QUERY_KEYS for q in qs)
    assert len({q['id'] for q in qs}) == len(qs) >= 42
    types = Counter(q['evidence_type'] for q in qs)
    assert set(types) == {'text', 'table', 'figure'} and min(types.values()) >= 14
    assert max(types.values()) <= 1.5 * min(types.values())
    for q in qs:
        assert isinstance(q['rephrasings'], list) and len(q['rephrasings']) == 3, q['id']
        assert all(isinstance(r, str) and len(r) > 30 for r in q['rephrasings']), q['id']
        assert len({q['query'], *q['rephrasings']}) == 4, q['id']
        assert not re.search(r'\b(this|the present) (paper|study|work)\b|\b(Table|Figure|Fig\.) ?\d', q['query'], re.I), q['id']


def test_every_paper_is_queried():
    qs = demo_queries()
    by_doc = {}
    for q in qs: by_doc.setdefault(q['doc_id'], []).append(q['evidence_type'])
    assert set(by_doc) == set(demo_paper_ids())
    for d, types in by_doc.items():
        assert len(types) >= 2 and len(set(types)) >= 2, d
        if any(f.lower().endswith(('.png', '.jpg', '.pdf')) for f in demo_source_files(d)): continue
        assert 'figure' not in types, d           # a paper without image files has no figure queries


def test_excerpts_verbatim_in_evidence_file():
    ids = set(demo_paper_ids())
    for q in demo_queries():
        assert q['doc_id'] in ids, q['id']
        src = squash_ws(read_demo_source(q['doc_id'], q['evidence_file']))
        assert squash_ws(q['evidence_excerpt']) in src, (q['id'], q['evidence_excerpt'])


def test_locators_point_at_labels_or_sections():
    for q in demo_queries():
        src = read_demo_source(q['doc_id'], q['evidence_file'])
        loc = q['evidence_locator']
        if re.match(r'(fig|tab|sec):', loc):
            assert f'\\label{{{loc}}}' in src, (q['id'], loc)
        else:   # a section title in this file or the paper's main file
            assert re.search(r'\\(sub)*section\*?\{' + re.escape(loc) + r'\}|\\paragraph\{' + re.escape(loc), src), (q['id'], loc)
        if q['evidence_type'] in ('table', 'figure'):
            assert loc.startswith('tab:' if q['evidence_type'] == 'table' else 'fig:'), q['id']


def test_perspectives():
    ids = set(demo_paper_ids())
    ps = demo_perspectives()
    assert len(ps) >= 4 and len({p['id'] for p in ps}) == len(ps)
    for p in ps:
        assert set(p) == {'id', 'query', 'perspectives'}
        assert 2 <= len(p['perspectives']) <= 3
        gold = [d for pp in p['perspectives'] for d in pp['doc_ids']]
        assert set(gold) <= ids and len(gold) == len(set(gold)), p['id']
        assert all(pp['text'].strip() for pp in p['perspectives'])


def test_shared_format_keys(shared_dir):
    dev = [json.loads(l) for l in (shared_dir / 'queries' / 'dev.jsonl').read_text().splitlines() if l.strip()]
    assert set(dev[0]) == QUERY_KEYS
    persp = [json.loads(l) for l in (shared_dir / 'queries' / 'dev_perspectives.jsonl').read_text().splitlines() if l.strip()]
    assert set(persp[0]) == {'id', 'query', 'perspectives'} and set(persp[0]['perspectives'][0]) == {'text', 'doc_ids'}


# ---------------------------------------------------------------- figures referenced by the sources exist
def _graphics_targets(doc_id):
    files = demo_source_files(doc_id)
    tex = '\n'.join(read_demo_source(doc_id, f) for f in files if f.endswith('.tex'))
    tex = re.sub(r'(?<!\\)%.*', '', tex)
    gp = re.search(r'\\graphicspath\{((?:\{[^{}]*\})+)\}', tex)
    dirs = [''] + (re.findall(r'\{([^{}]*)\}', gp.group(1)) if gp else [])
    return files, dirs, re.findall(r'\\includegraphics(?:\[[^\]]*\])?\{([^{}]+)\}', tex)


def test_includegraphics_targets_exist():
    for doc_id in demo_paper_ids():
        files, dirs, targets = _graphics_targets(doc_id)
        have = set(files)
        for t in targets:
            cands = [(d.removeprefix('./') + t) + e for d in dirs for e in ('', '.pdf', '.png', '.jpg')]
            assert any(c in have for c in cands), (doc_id, t)


def test_figure_files_small_and_demo_small():
    total = 0
    for f in demo_dir().rglob('*'):
        if not f.is_file(): continue
        total += f.stat().st_size
        if f.suffix.lower() in ('.png', '.jpg', '.pdf'): assert f.stat().st_size <= 60_000, f
    assert total < 3_000_000


# ---------------------------------------------------------------- compiles with plain pdflatex (when installed)
@pytest.mark.slow
@pytest.mark.skipif(shutil.which('pdflatex') is None, reason='pdflatex not installed')
def test_papers_compile_with_pdflatex():
    failed = []
    for doc_id in demo_paper_ids():
        with tempfile.TemporaryDirectory() as d:
            p = demo_paper_path(doc_id)
            if p.is_dir(): shutil.copytree(p, d, dirs_exist_ok=True)
            elif p.name.endswith('.tar.gz'):
                with tarfile.open(p) as tf: tf.extractall(d, filter='data')
            else: Path(d, gzip_member_name(p)).write_bytes(gzip.decompress(p.read_bytes()))
            main = next(f for f in demo_source_files(doc_id) if f.endswith('.tex') and '\\documentclass' in read_demo_source(doc_id, f))
            r = subprocess.run(['pdflatex', '-interaction=nonstopmode', '-halt-on-error', main], cwd=d,
                               capture_output=True, text=True, timeout=120)
            if r.returncode != 0 or not Path(d, Path(main).with_suffix('.pdf')).is_file():
                failed.append((doc_id, r.stdout[-800:]))
    assert not failed, failed


# ---------------------------------------------------------------- originality: nothing copied from ../shared
def _words(tex):
    tex = re.split(r'\\begin\{thebibliography\}', tex)[0]           # reference lists may legitimately coincide
    tex = re.sub(r'(?<!\\)%.*', ' ', tex)
    tex = re.sub(r'\\[A-Za-z@]+', ' ', tex)
    return re.findall(r'[a-z]+', tex.lower())


def _shingles(words, n=12):
    return {' '.join(words[i:i + n]) for i in range(len(words) - n + 1)}


@pytest.mark.slow
def test_no_text_copied_from_shared(shared_papers):
    demo = {}
    for doc_id in demo_paper_ids():
        for f in demo_source_files(doc_id):
            if f.endswith('.tex'):
                for s in _shingles(_words(read_demo_source(doc_id, f))): demo.setdefault(s, f'{doc_id}/{f}')
    assert len(demo) > 10_000
    hits, n_shared = [], 0
    for paper in shared_papers:
        for f in paper.rglob('*.tex'):
            try: shared = _shingles(_words(f.read_text(encoding='utf-8', errors='replace')))
            except OSError: continue
            n_shared += len(shared)
            hits += [(demo[s], str(f)) for s in shared if s in demo]
    assert n_shared > 100_000                                     # the shared corpus was really read
    assert not hits, hits[:10]
