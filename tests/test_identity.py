"Paper identity comes from the caller, never from the content-keyed parse cache; differential checks of the evaluation."
import json, random, shutil, tarfile, warnings
from pathlib import Path
import pytest
from docbench_nb.latex import corpus as C
from docbench_nb.evaluation.core import evaluate
from docbench_nb.latex.corpus import load_papers, source_key
from docbench_nb.cache import stage_dir
from docbench_nb.demo import demo_corpus_dir, demo_queries_path

def _content(p):
    "What a paper is, apart from who it is: everything but id, root and the warnings that name it."
    d = p.to_dict()
    for k in ('id', 'root', 'warnings', 'meta'): d.pop(k)
    return d

def _per_query(res):
    "`{qid: {metric: value, rank, level, type}}` of a result: everything per query but the gold ids (renamed in some cases)."
    return {q['query_id']: {k: v for k, v in q.items() if k != 'gold'} for q in res['per_query']}

def _write_queries(src, dst, idmap):
    "The query file `src` with every gold doc id renamed through `idmap`."
    lines = []
    for l in Path(src).read_text().splitlines():
        if not l.strip(): continue
        q = json.loads(l)
        if 'doc_id' in q: q['doc_id'] = idmap.get(q['doc_id'], q['doc_id'])
        if 'doc_ids' in q: q['doc_ids'] = [idmap.get(d, d) for d in q['doc_ids']]
        lines.append(json.dumps(q))
    Path(dst).write_text('\n'.join(lines) + '\n')

def _renamed_copy(srcs, dst, prefix='arxiv-'):
    "Copies of `srcs` in `dst` under new names; `{old_id: new_id}`."
    dst.mkdir(parents=True, exist_ok=True); idmap = {}
    for s in srcs:
        s = Path(s); old = C.latex.paper_id_from_path(s)
        new = prefix + s.name
        (shutil.copytree if s.is_dir() else shutil.copyfile)(s, dst / new)
        idmap[old] = C.latex.paper_id_from_path(dst / new)
    return idmap

def test_renamed_copies_keep_their_own_ids_on_a_warm_cache(shared_papers, tmp_path):
    "The issue's case: three papers parsed once, then copied under new names and parsed with the same cache."
    cache, srcs = tmp_path / 'c', shared_papers[:3]
    orig, _ = load_papers(srcs, cache_dir=cache, progress=False, workers=1)
    idmap = _renamed_copy(srcs, tmp_path / 'copies')
    copies, errors = load_papers(tmp_path / 'copies', cache_dir=cache, progress=False, workers=1)
    assert not errors
    assert [p.id for p in copies] == [idmap[p.id] for p in orig]             # the new names, not the cached ones
    for o, c in zip(orig, copies):
        assert c.root == str((tmp_path / 'copies' / c.id).resolve())         # the caller's folder, not the first source's
        assert _content(c) == _content(o)                                    # content shared through the cache
        assert not any(str(Path(o.root)) in w for w in c.warnings)           # no warning names the first source's path
    # a cold cache gives exactly the same records
    cold, _ = load_papers(tmp_path / 'copies', cache_dir=tmp_path / 'cold', progress=False, workers=1)
    assert [p.to_dict() for p in cold] == [{**p.to_dict(), 'meta': c.meta} for p, c in zip(copies, cold)]

def test_identical_sources_stay_two_papers_parsed_once(tmp_path, monkeypatch):
    "Two byte-identical sources in one corpus: two papers with their own ids, one parse, a warning naming both."
    src = sorted(Path(demo_corpus_dir()).iterdir())[0]
    corpus = tmp_path / 'corpus'; corpus.mkdir()
    shutil.copytree(src, corpus / 'v1'); shutil.copytree(src, corpus / 'v2')
    parsed = []
    real = C.imap_bounded
    def counting(fn, items, **kw):
        items = list(items); parsed.extend(i[0] for i in items)
        return real(fn, items, **kw)
    monkeypatch.setattr(C, 'imap_bounded', counting)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        papers, errors = load_papers(corpus, cache_dir=tmp_path / 'c', progress=False, workers=1)
    assert [p.id for p in papers] == ['v1', 'v2'] and not errors
    assert len(parsed) == 1                                                   # identical sources parsed once
    assert papers[0].root != papers[1].root
    assert any('v1, v2 have identical sources' in str(x.message) for x in w)
    assert any('identical source to v2' in x for x in papers[0].warnings)
    assert any('identical source to v1' in x for x in papers[1].warnings)
    # warm: still two, nothing parsed
    again, _ = load_papers(corpus, cache_dir=tmp_path / 'c', progress=False, workers=1)
    assert [p.id for p in again] == ['v1', 'v2'] and len(parsed) == 1

def test_explicit_ids_and_archive_warnings_are_the_callers(tmp_path):
    "A mapping gives ids explicitly; an archive's unpack warnings name the archive the caller gave, not the first copy."
    tree = tmp_path / 'tree'; tree.mkdir()
    (tree / 'main.tex').write_text('\\documentclass{article}\\title{T}\\begin{document}\\section{A}Hello world.\\end{document}\n')
    a = tmp_path / 'first.tar.gz'
    with tarfile.open(a, 'w:gz') as tf:
        tf.add(tree / 'main.tex', arcname='main.tex')
        info = tarfile.TarInfo('../evil.tex'); info.size = 0
        import io; tf.addfile(info, io.BytesIO(b''))
    b = tmp_path / 'second.tar.gz'; shutil.copyfile(a, b)
    cache = tmp_path / 'c'
    (p1,), _ = load_papers([a], cache_dir=cache, progress=False)
    (p2,), _ = load_papers({'2401.00001v2': b}, cache_dir=cache, progress=False)
    assert p1.id == 'first' and p2.id == '2401.00001v2'
    unsafe1 = [w for w in p1.warnings if 'unsafe member' in w]; unsafe2 = [w for w in p2.warnings if 'unsafe member' in w]
    assert unsafe1 and unsafe2
    assert str(a) in unsafe1[0] and str(b) in unsafe2[0] and str(a) not in unsafe2[0]
    assert unsafe2[0].startswith('paper 2401.00001v2:')

def test_failed_paper_is_reported_under_the_callers_id(tmp_path):
    "A cached parse failure, loaded for a renamed copy, names the copy and its path, not the first source."
    bad = tmp_path / 'broken.tar.gz'; bad.write_bytes(b'%PDF-1.4 not a source archive')
    cache = tmp_path / 'c'
    _, (e1,) = load_papers([bad], cache_dir=cache, progress=False, workers=1)
    copy = tmp_path / 'broken-copy.tar.gz'; shutil.copyfile(bad, copy)
    _, (e2,) = load_papers([copy], cache_dir=cache, progress=False, workers=1)
    assert e1.id == 'broken' and e2.id == 'broken-copy'
    assert 'PDF' in e2.error and str(copy) in e2.error + (e2.file or '')
    assert str(bad) not in e2.error and e2.file != str(bad)

# ---- differential checks: transformations that must not change any per-query number ----------------------------

def _demo_eval(corpus, queries, cache, **kw):
    return evaluate(corpus, queries, representation='text', retriever='bm25', chunk_size=256, cache_dir=cache,
                    progress=False, **kw)

@pytest.fixture(scope='module')
def demo_base(tmp_path_factory):
    cache = tmp_path_factory.mktemp('base')
    return _demo_eval(demo_corpus_dir(), demo_queries_path(), cache / 'c'), cache / 'c'

def test_differential_renamed_folders_warm_cache(demo_base, tmp_path):
    "Every demo paper copied under a new name, evaluated on the warm cache: the same per-query numbers, the new ids."
    base, cache = demo_base
    idmap = _renamed_copy(sorted(Path(demo_corpus_dir()).iterdir()), tmp_path / 'corpus', prefix='2501.')
    _write_queries(demo_queries_path(), tmp_path / 'q.jsonl', idmap)
    res = _demo_eval(tmp_path / 'corpus', tmp_path / 'q.jsonl', cache)
    assert _per_query(res) == _per_query(base)
    run_ids = {d for s in res.run.scores.values() for d in s}
    assert run_ids and run_ids <= set(idmap.values())                         # the run file carries the new ids

def test_differential_shuffled_sources_and_workers(demo_base, tmp_path):
    "Source order shuffled, one worker, a cold cache: identical per-query numbers."
    base, _ = demo_base
    srcs = C.corpus_sources(str(demo_corpus_dir())); random.Random(0).shuffle(srcs)
    res = _demo_eval(srcs, demo_queries_path(), tmp_path / 'cold', workers=1)
    assert _per_query(res) == _per_query(base)

def test_differential_duplicate_paper_only_moves_its_own_queries(demo_base, tmp_path):
    """One paper duplicated under a second id: its duplicate ties it, so only queries whose gold is that paper (or that
    ranked it) may change; every other query's numbers are identical."""
    base, cache = demo_base
    srcs = C.corpus_sources(str(demo_corpus_dir()))
    dup = next(s for s in srcs if Path(s).is_dir())
    shutil.copytree(dup, tmp_path / 'dup-copy')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        res = _demo_eval(srcs + [str(tmp_path / 'dup-copy')], demo_queries_path(), cache)
    did = C.latex.paper_id_from_path(dup)
    touched = {qid for qid, s in base.run.scores.items() if did in s}
    a, b = _per_query(base), _per_query(res)
    assert set(a) == set(b)
    assert all(a[q] == b[q] for q in a if q not in touched)
    assert any('identical source' in w for w in res.warnings)

def test_differential_archive_vs_unpacked(tmp_path):
    "A paper as an unpacked folder and as a .tar.gz of the same files: the same paper content."
    src = next(p for p in sorted(Path(demo_corpus_dir()).iterdir()) if p.is_dir())
    arch = tmp_path / f'{src.name}.tar.gz'
    with tarfile.open(arch, 'w:gz') as tf:
        for f in sorted(src.rglob('*')):
            if f.is_file(): tf.add(f, arcname=str(f.relative_to(src)))
    (a,), _ = load_papers([src], cache_dir=tmp_path / 'c', progress=False)
    (b,), _ = load_papers([arch], cache_dir=tmp_path / 'c', progress=False)
    assert a.id == b.id and _content(a) == _content(b)

# ---- on the shared corpus: renamed copy on a warm cache, and `docbench reproduce` -----------------------------------

@pytest.fixture(scope='module')
def shared_base(shared_dir, tmp_path_factory):
    tmp = tmp_path_factory.mktemp('shared')
    res = evaluate(shared_dir / 'corpus' / 'papers', shared_dir / 'queries' / 'dev.jsonl', retriever='bm25', chunk_size=512,
                   cache_dir=tmp / 'c', progress=False)
    res.save(tmp / 'bm25.json')
    return res, tmp

def test_shared_renamed_copy_warm_cache_same_numbers_new_ids(shared_base, shared_dir, tmp_path):
    "The 80 shared papers copied under arXiv-style names, evaluated on the warm cache: per-query numbers identical."
    base, tmp = shared_base
    idmap = _renamed_copy(sorted(p for p in (shared_dir / 'corpus' / 'papers').iterdir() if p.is_dir()), tmp_path / 'p', '2512.')
    _write_queries(shared_dir / 'queries' / 'dev.jsonl', tmp_path / 'q.jsonl', idmap)
    res = evaluate(tmp_path / 'p', tmp_path / 'q.jsonl', retriever='bm25', chunk_size=512, cache_dir=tmp / 'c', progress=False)
    assert res.n_docs == base.n_docs == len(idmap)
    assert _per_query(res) == _per_query(base)
    assert {d for s in res.run.scores.values() for d in s} <= set(idmap.values())
    assert all(g in idmap.values() for q in res.per_query for g in q['gold'])

def test_reproduce_shared_result_identical_then_names_the_changed_paper(shared_base, shared_dir, tmp_path):
    "`reproduce` on a saved shared-corpus result: identical from a cold cache; then a corpus with one paper edited."
    from docbench_nb.evaluation.reproduce import reproduce
    base, tmp = shared_base
    rep = reproduce(tmp / 'bm25.json', cache_dir=tmp_path / 'cold', progress=False)
    assert rep['identical'] and rep['n_identical'] == base.n_queries and rep['max_abs_diff'] == 0
    assert not any(rep['changed_inputs']['corpus'].values()) and not rep['changed_inputs']['queries']
    # the same result against a copy of the corpus with one gold paper's text replaced
    corpus = tmp_path / 'papers'; shutil.copytree(shared_dir / 'corpus' / 'papers', corpus)
    gold = base.per_query[0]['gold'][0]
    for f in (corpus / gold).rglob('*.tex'): f.write_text('\\documentclass{article}\\begin{document}Nothing here.\\end{document}\n')
    rep2 = reproduce(tmp / 'bm25.json', corpus=corpus, cache_dir=tmp_path / 'cold', progress=False)
    assert rep2['changed_inputs']['corpus'] == {'added': [], 'removed': [], 'changed': [gold]}
    assert not rep2['identical'] and base.per_query[0]['query_id'] in rep2['differ']

def test_cli_reproduce_exit_codes(tmp_path, capsys):
    "`docbench reproduce`: exit 0 when every query is identical, 1 with the changed paper named when one is not."
    from docbench_nb.cli import main
    corpus = tmp_path / 'papers'; shutil.copytree(demo_corpus_dir(), corpus)
    c = ['--cache-dir', str(tmp_path / 'c'), '-q']
    assert main(['evaluate', '--corpus', str(corpus), '--queries', str(demo_queries_path()), '--out', str(tmp_path / 'r.json')] + c) == 0
    assert main(['reproduce', str(tmp_path / 'r.json'), '--cache-dir', str(tmp_path / 'c2'), '-q']) == 0
    for tex in (corpus / 'curneg-dense-retrieval').glob('*.tex'):          # the paper's text replaced: its queries must move
        tex.write_text('\\documentclass{article}\\begin{document}\\section{Notes}Nothing to see here.\\end{document}\n')
    capsys.readouterr()
    rc = main(['reproduce', str(tmp_path / 'r.json'), '--json'] + c)
    rep = json.loads(capsys.readouterr().out)
    assert rep['changed_inputs']['corpus']['changed'] == ['curneg-dense-retrieval']
    assert rc == 1 and not rep['identical'] and rep['differ'] and rep['n_queries'] == 240


@pytest.mark.skipif(shutil.which('pdflatex') is None, reason='the page task needs pdflatex (page maps)')
def test_reproduce_a_page_task_result(tmp_path):
    "A page-task result is rerun on the page task: identical from a cold cache (rerun as the paper task it would differ)."
    from docbench_nb.evaluation.reproduce import reproduce
    name = 'karst-spring-recession'
    corpus = tmp_path / 'papers'; corpus.mkdir(); shutil.copytree(Path(demo_corpus_dir()) / name, corpus / name)
    q = tmp_path / 'q.jsonl'; q.write_text(''.join(l for l in open(demo_queries_path()) if json.loads(l)['doc_id'] == name))
    res = evaluate(corpus, q, 'text', 'bm25', 128, task='page', cache_dir=tmp_path / 'c', progress=False)
    res.save(tmp_path / 'page.json')
    rep = reproduce(tmp_path / 'page.json', cache_dir=tmp_path / 'c2', progress=False)
    assert res.config['task'] == rep['result'].config['task'] == 'page' and res.n_docs == rep['result'].n_docs > 1
    assert rep['identical'] and rep['n_identical'] == res.n_queries and rep['max_abs_diff'] == 0
