"""Export of a benchmark made of real shared papers as a ViDoRe-style BEIR dataset: `datasets` reloads every config,
and docbench evaluates the re-imported dataset to exactly the page task's numbers."""
import json
from pathlib import Path
import pytest
from PIL import Image
from docbench_nb.latex.corpus import load_papers
from docbench_nb.evaluation.formats import load_queries, read_beir
from docbench_nb.pages.render import render_paper
from docbench_nb.evaluation.page_task import page_maps
from docbench_nb.evaluation.core import evaluate, evaluate_units
from docbench_nb.evaluation.export import export_benchmark, import_beir, add_export_parsers

IDS = ('3I-ATLAS-discovery', 'dong-obliquity', 'arxiv-1911.02782')


@pytest.fixture(scope='module')
def exported(shared_dir, tmp_path_factory):
    papers, _ = load_papers([shared_dir / 'corpus' / 'papers' / i for i in IDS], progress=False)
    maps = page_maps(papers)
    qfile = tmp_path_factory.mktemp('q') / 'dev_small.jsonl'
    qfile.write_text(''.join(l for l in open(shared_dir / 'queries' / 'dev.jsonl') if json.loads(l)['doc_id'] in IDS))
    out = tmp_path_factory.mktemp('export') / 'small'
    s = export_benchmark('small', qfile, out, papers=papers, maps=maps)
    return papers, maps, qfile, out, s


def test_datasets_reloads_every_config(exported):
    datasets = pytest.importorskip('datasets')
    papers, maps, qfile, out, s = exported
    n_pages = sum(m.n_pages for m in maps.values())
    assert s['n_pages'] == s['n_images'] == n_pages and s['n_unplaced'] == 0
    corpus = datasets.load_dataset(str(out), 'corpus', split='test')
    assert corpus.num_rows == n_pages and {'corpus-id', 'image', 'text'} <= set(corpus.column_names)
    row = corpus[3]
    pid, page = row['doc-id'], row['page']
    png = render_paper(next(p for p in papers if p.id == pid)).pages[page - 1]
    assert row['corpus-id'] == f'{pid}#p{page}' and row['image'].size == Image.open(png).size
    queries = datasets.load_dataset(str(out), 'queries', split='test')
    assert queries.num_rows == 4 * 6 and sorted(set(queries['level'])) == [0, 1, 2, 3]
    qrels = datasets.load_dataset('parquet', data_files=str(out / 'qrels' / '*.parquet'), split='train')
    assert qrels.num_rows == s['n_page_qrels'] and set(qrels['corpus-id']) <= set(corpus['corpus-id'])
    paper_qrels = datasets.load_dataset(str(out), 'qrels-paper', split='test')
    assert set(paper_qrels['corpus-id']) <= set(IDS) and paper_qrels.num_rows == 24
    docs, qs, rel = read_beir(out / 'jsonl' / 'pages')            # BEIR JSONL for text tools
    assert len(docs) == n_pages and len(qs) == 24


def test_reimport_evaluates_to_the_same_numbers(exported):
    papers, maps, qfile, out, s = exported
    mine = evaluate('small', qfile, 'page-latex', 'bm25', papers=papers, maps=maps, progress=False, task='page')
    units, qs, info = import_beir(out, content='text')
    theirs = evaluate_units(units, qs, 'bm25')
    assert len(theirs.per_query) == len(mine.per_query) == 24
    assert {r['query_id']: r['ndcg@10'] for r in theirs.per_query} == {r['query_id']: r['ndcg@10'] for r in mine.per_query}
    assert theirs.overall == mine.overall
    # paper level: the same pages filed under their papers, judged by the paper qrels
    pu, pq, _ = import_beir(out, content='text', level='paper')
    res = evaluate_units(pu, pq, 'bm25')
    assert res.n_docs == len(IDS) and all(q.doc_ids[0] in IDS for q in pq)


def test_import_keeps_images_byte_for_byte(exported, tmp_path):
    papers, maps, qfile, out, s = exported
    units, qs, info = import_beir(out, content='image', cache_dir=tmp_path)
    assert info['n_images'] == len(units) == s['n_pages'] and not any(u.text for u in units)
    u = next(u for u in units if u.unit_id == 'dong-obliquity#p2')
    p = next(p for p in papers if p.id == 'dong-obliquity')
    assert Path(u.images[0]).read_bytes() == Path(render_paper(p).pages[1]).read_bytes()


def test_import_errors_name_the_problem(tmp_path):
    with pytest.raises(FileNotFoundError, match='no such folder'): import_beir(tmp_path / 'nope')
    with pytest.raises(ValueError, match='neither corpus'): import_beir(tmp_path)
    with pytest.raises(ValueError, match='content must be'): import_beir(tmp_path, content='pixels')


def test_cli_export_and_evaluate_dataset(exported, tmp_path, capsys):
    import argparse
    papers, maps, qfile, out, s = exported
    ap = argparse.ArgumentParser(); ap.add_argument('--cache-dir', default=None); ap.add_argument('-q', '--quiet', action='store_true')
    add_export_parsers(ap.add_subparsers(dest='cmd'))
    src = next(Path(p.root) for p in papers if p.id == 'dong-obliquity')       # one paper's folder is a corpus of one
    one = tmp_path / 'q.jsonl'; one.write_text(''.join(l for l in open(qfile) if json.loads(l)['doc_id'] == 'dong-obliquity'))
    a = ap.parse_args(['-q', 'export', str(src), '--queries', str(one), '--out', str(tmp_path / 'ex')])
    assert a.fn(a) == 0
    d = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert d['n_papers'] == 1 and d['n_pages'] == maps['dong-obliquity'].n_pages and d['n_queries'] == 8
    a = ap.parse_args(['-q', 'evaluate-dataset', str(tmp_path / 'ex'), '--retriever', 'bm25', '--content', 'text'])
    assert a.fn(a) == 0 and 'overall (L0)' in capsys.readouterr().out


def test_graded_judgments_survive_export_and_import(tmp_path):
    "Grades 2 and 1 written as page and paper qrels come back as the same graded `Query`s (before: every grade became 1)."
    from docbench_nb.evaluation.export import export_beir
    from docbench_nb.records import Query, Paper
    img = tmp_path / 'p.png'; Image.new('RGB', (8, 8), 'white').save(img)
    pages = [{'corpus-id': f'a#p{i}', 'doc-id': 'a', 'page': i, 'text': f'page {i} text', 'image': str(img)} for i in (1, 2, 3)]
    qs = [Query('q1', 'which page', ['a'], 'text', 0, 'q1', {}, {'a': 2}), Query('q2', 'another', ['a'], 'text', 0, 'q2')]
    page_qrels = {'q1': {'a#p1': 2, 'a#p2': 1, 'a#p3': 0}, 'q2': {'a#p3': 1}}
    export_beir(tmp_path / 'ds', pages, qs, page_qrels, papers=[Paper('a', 'A title', 'a text')])
    _, got, _ = import_beir(tmp_path / 'ds', content='text')
    assert {q.id: q.judgments() for q in got} == {'q1': {'a#p1': 2, 'a#p2': 1}, 'q2': {'a#p3': 1}}
    _, got, _ = import_beir(tmp_path / 'ds', content='text', level='paper')
    assert {q.id: q.judgments() for q in got} == {'q1': {'a': 2}, 'q2': {'a': 1}}


def test_export_from_a_corpus_holds_a_batch_of_papers_and_writes_the_same_dataset(exported, shared_dir, tmp_path, monkeypatch):
    "From a corpus folder, the export parses, maps, renders and writes a batch of papers at a time; the files are the same."
    import docbench_nb.evaluation.export as ex
    import pyarrow.parquet as pq
    papers, maps, qfile, out, s = exported
    corpus = tmp_path / 'corpus'; corpus.mkdir()
    for i in IDS: (corpus / i).symlink_to(shared_dir / 'corpus' / 'papers' / i, target_is_directory=True)
    monkeypatch.setattr(ex, 'EXPORT_BATCH', 1)
    held, real = [], ex.load_papers
    monkeypatch.setattr(ex, 'load_papers', lambda srcs, **kw: (held.append(len(srcs)), real(srcs, **kw))[1])
    out2 = tmp_path / 'streamed'
    s2 = export_benchmark(str(corpus), qfile, out2)
    gold = len({json.loads(l)['doc_id'] for l in open(qfile)})
    assert held == [1] * len(IDS) + [1] * gold + [1] * len(IDS) * 2, held   # parse; the gold papers' maps; pages; papers (a batch each)
    assert {k: v for k, v in s2.items() if k != 'out'} == {k: v for k, v in s.items() if k != 'out'}
    for cfg in ('corpus', 'queries', 'qrels', 'papers', 'qrels-paper'):
        rows = lambda d: sorted(pq.read_table(sorted((d / cfg).glob('*.parquet'))).to_pylist(), key=lambda r: json.dumps(r, default=str))
        assert rows(out) == rows(out2), cfg               # the same rows (the fixture listed its papers in another order)
    for f in ('jsonl/pages/corpus.jsonl', 'jsonl/papers/corpus.jsonl', 'jsonl/pages/qrels/test.tsv', 'README.md'):
        assert sorted((out / f).read_bytes().splitlines()) == sorted((out2 / f).read_bytes().splitlines()), f
    assert not list(out2.glob('.*.spool.jsonl'))                               # the JSONL spools are gone


def test_export_from_a_corpus_refuses_two_papers_with_one_id_before_parsing(tmp_path, monkeypatch):
    "A folder `x` and an archive `x.tar.gz` are both paper `x`: refused for the corpus, not per batch (each batch sees one)."
    import tarfile
    import docbench_nb.evaluation.export as ex
    corpus = tmp_path / 'corpus'; (corpus / 'x').mkdir(parents=True)
    doc = '\\documentclass{article}\\begin{document}\\section{A} Text.\\end{document}\n'
    (corpus / 'x' / 'main.tex').write_text(doc)
    with tarfile.open(corpus / 'x.tar.gz', 'w:gz') as t: t.add(corpus / 'x' / 'main.tex', arcname='main.tex')
    monkeypatch.setattr(ex, 'EXPORT_BATCH', 1)
    parsed = []
    monkeypatch.setattr(ex, 'load_papers', lambda srcs, **kw: parsed.append(srcs))
    q = tmp_path / 'q.jsonl'; q.write_text(json.dumps({'id': 'q1', 'query': 'text', 'doc_ids': ['x']}) + '\n')
    with pytest.raises(ValueError, match=r"paper ids must be unique; 'x' is the id of .*corpus/x, .*corpus/x\.tar\.gz"):
        export_benchmark(str(corpus), q, tmp_path / 'out')
    assert parsed == [] and not (tmp_path / 'out').exists()
