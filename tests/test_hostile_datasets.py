"""Datasets, review files and the cache as hostile inputs (issue #26): one test per reported case, and bounded
hypothesis fuzzing of the dataset and decisions readers. Only the error types the CLI maps to exit 2 may escape."""
import csv, io, json, os
from pathlib import Path
import pytest
from hypothesis import given, settings, strategies as st, HealthCheck
from docbench_nb.evaluation.formats import DataFileError, read_trec_qrels, load_queries, write_beir, read_beir
from docbench_nb.evaluation.export import import_beir
from docbench_nb.queries.review import read_decisions, DECISIONS
from docbench_nb.records import Query

ALLOWED = (DataFileError, ValueError, OSError)          # what `cli.main` turns into `error: ...`, exit 2
FUZZ = settings(max_examples=int(os.environ.get('DOCBENCH_FUZZ_EXAMPLES', 60)), deadline=3000, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _only_allowed(fn):
    try: return fn()
    except ALLOWED as e: return e


# ---------------------------------------------------------------- fuzz: qrels files (BEIR TSV / TREC)
TOK = st.sampled_from(['q1', 'q 1', 'd1', 'd#2', 'é/x', '0', '1', '2', '-1', '1.0', '1.5', 'inf', '-inf', 'nan', '1e400',
                       '', 'query-id', 'corpus-id', 'score', '\x00', '"', '9' * 30])
qrels_line = st.lists(TOK, max_size=5).flatmap(lambda xs: st.sampled_from(['\t', ' ', '  ', '\t ']).map(lambda sep: sep.join(xs)))
qrels_text = st.lists(qrels_line, max_size=8).map('\n'.join)


@FUZZ
@given(qrels_text)
def test_fuzz_qrels_reader(tmp_path, text):
    f = tmp_path / 'test.tsv'; f.write_text(text, encoding='utf-8')
    out = _only_allowed(lambda: read_trec_qrels(f))
    if isinstance(out, dict):
        assert all(isinstance(q, str) and isinstance(d, str) and type(r) is int for q, rs in out.items() for d, r in rs.items())
    else: assert str(f) in str(out)                                   # every error names the file


# ---------------------------------------------------------------- fuzz: decisions (CSV / JSONL)
CELL = st.sampled_from(['A-1', 'A-2', 'keep', 'drop', 'edit', 'KEEP', '', '"', '""', ',', '\n', '\r\n', '=SUM(A1)', '+1',
                        '-x', '@cmd', "'=a", 'é', '\x00', 'x' * 50])
csv_text = st.lists(CELL, max_size=30).map(''.join).map(lambda s: 'id,decision,edited_query\n' + s)
JV = st.recursive(st.none() | st.booleans() | st.integers(-2, 2) | st.floats() | st.sampled_from(['A-1', 'edit', 'keep', 'drop', '']),
                  lambda c: st.lists(c, max_size=2) | st.dictionaries(st.sampled_from(['id', 'decision', 'x']), c, max_size=2), max_leaves=4)
jsonl_text = st.lists(st.dictionaries(st.sampled_from(['id', 'decision', 'edited_query', 'note']), JV, max_size=4)
                      .map(json.dumps) | st.sampled_from(['', '[', 'null', '{"id": "A-1"']), max_size=5).map('\n'.join)


def _check_decisions(f):
    out = _only_allowed(lambda: read_decisions(f))
    if isinstance(out, dict):
        for qid, (dec, txt, line) in out.items():
            assert isinstance(qid, str) and qid and dec in DECISIONS and isinstance(txt, str) and isinstance(line, int)
            assert '\n' not in qid and '\r' not in qid                     # a quote never closed does not swallow rows into an id
    else: assert str(f) in str(out) and 'line' in str(out)           # errors name file and line


@FUZZ
@given(csv_text)
def test_fuzz_decisions_csv(tmp_path, text):
    f = tmp_path / 'decisions.csv'; f.write_text(text, encoding='utf-8'); _check_decisions(f)


@FUZZ
@given(jsonl_text)
def test_fuzz_decisions_jsonl(tmp_path, text):
    f = tmp_path / 'decisions.jsonl'; f.write_text(text, encoding='utf-8'); _check_decisions(f)


# ---------------------------------------------------------------- fuzz: Parquet datasets (ViDoRe layout)
KINDS = ['str', 'int', 'float', 'bool', 'list', 'bin', 'null', 'image']
IDS = ['d1', 'd2', 'q1', 'q 1', '', 'é#/x', None]


def _values(kind, n, draw):
    import pyarrow as pa
    pick = lambda xs: [draw(st.sampled_from(xs)) for _ in range(n)]
    if kind == 'str': return pa.array(pick(IDS + ['1', 'high', 'apples']), pa.string())
    if kind == 'int': return pa.array(pick([0, 1, 2, -1, None, 2**62]), pa.int64())
    if kind == 'float': return pa.array(pick([0.0, 1.0, 1.5, float('inf'), float('nan'), None]), pa.float64())
    if kind == 'bool': return pa.array(pick([True, False, None]), pa.bool_())
    if kind == 'list': return pa.array(pick([['d1'], [], None, ['a', 'b']]), pa.list_(pa.string()))
    if kind == 'bin': return pa.array(pick([b'', b'\x89PNG', None]), pa.binary())
    if kind == 'null': return pa.array([None] * n, pa.null())
    return pa.array(pick([None, {'bytes': None, 'path': None}, {'bytes': None, 'path': '/etc/passwd'}, {'bytes': None, 'path': '../x.png'},
                          {'bytes': b'not a png', 'path': 'a.png'}, {'bytes': None, 'path': 'x.png'}]),
                    pa.struct([('bytes', pa.binary()), ('path', pa.string())]))


COLS = {'corpus': ['corpus-id', 'text', 'image', 'doc-id', 'page'], 'queries': ['query-id', 'query', 'level', 'group-id'],
        'qrels': ['query-id', 'corpus-id', 'score']}


@st.composite
def parquet_dataset(draw):
    import pyarrow as pa
    out = {}
    for config, names in COLS.items():
        n = draw(st.integers(0, 4))
        cols = {}
        for name in names:
            if draw(st.integers(0, 9)) == 0: continue                          # a column missing now and then
            kind = draw(st.sampled_from(['str'] * 6 + KINDS)) if name not in ('image', 'score', 'level', 'page') else \
                draw(st.sampled_from({'image': ['image'] * 6, 'score': ['int'] * 5, 'level': ['int'] * 5, 'page': ['int'] * 5}[name] + KINDS))
            cols[name] = _values(kind, n, draw)
        out[config] = cols
    return out


@FUZZ
@given(parquet_dataset())
def test_fuzz_parquet_dataset(tmp_path_factory, ds):
    import pyarrow as pa, pyarrow.parquet as pq
    d = tmp_path_factory.mktemp('ds')
    for config, cols in ds.items():
        (d / config).mkdir()
        pq.write_table(pa.table(cols) if cols else pa.table({'x': pa.array([], pa.int64())}), d / config / 'test-00000-of-00001.parquet')
    out = _only_allowed(lambda: import_beir(d, cache_dir=d / 'cache', content='both'))
    if isinstance(out, tuple):
        units, queries, info = out
        ids = [str(x) for x in ds['corpus']['corpus-id'].to_pylist()]
        for q in queries:
            assert q.doc_ids and set(q.doc_ids) <= set(ids)                  # unknown ids refused, no query without gold
        for u in units:
            for p in u.images: assert Path(p).resolve().is_relative_to((d / 'cache').resolve())   # images only from the cache
    else: assert str(d) in str(out)                                  # the error names the dataset's file


# ---------------------------------------------------------------- fuzz: BEIR JSONL queries + qrels
@FUZZ
@given(st.lists(st.dictionaries(st.sampled_from(['_id', 'text', 'metadata']), JV | st.sampled_from(['q1', 'q 1', 'apples']), max_size=3),
                max_size=4),
       st.lists(st.tuples(st.sampled_from(['q1', 'q 1', 'q2']), st.sampled_from(['d1', 'd2', 'nope']), st.sampled_from(['0', '1', '2', 'x', 'inf'])),
                max_size=4))
def test_fuzz_beir_jsonl(tmp_path_factory, queries, qrels):
    d = tmp_path_factory.mktemp('beir')
    (d / 'corpus.jsonl').write_text('{"_id": "d1", "text": "apples"}\n{"_id": "d2", "text": "pears"}\n')
    (d / 'queries.jsonl').write_text(''.join(json.dumps(q) + '\n' for q in queries))
    (d / 'qrels').mkdir(); (d / 'qrels' / 'test.tsv').write_text('query-id\tcorpus-id\tscore\n' + ''.join('\t'.join(r) + '\n' for r in qrels))
    out = _only_allowed(lambda: read_beir(d))
    if isinstance(out, tuple):
        assert all(q.doc_ids and set(q.doc_ids) <= {'d1', 'd2'} for q in out[1])
    else: assert str(d) in str(out)


# ================================================================ the reported cases, one test each
import warnings, shutil
from docbench_nb.cache import OutsideRootError
from docbench_nb.evaluation.formats import read_limits
from docbench_nb.evaluation.export import export_beir, write_config
from docbench_nb.queries.review import import_review, decisions_csv, apply_decisions
from docbench_nb.queries.evidence import Draft, write_query_records

IMG_T = {'corpus-id': 'string', 'text': 'string', 'image': 'image'}


def _png(path, size=(40, 20)):
    from PIL import Image
    Image.new('RGB', size, 'white').save(path); return Path(path)


def parquet_ds(d, corpus=None, queries=None, qrels=None, ctypes=None):
    "A ViDoRe-layout folder written with the exporter's own `write_config`."
    d = Path(d)
    corpus = corpus or {'corpus-id': ['d1', 'd2'], 'text': ['apples and pears', 'rockets and stars'], 'image': [None, None]}
    write_config(d, 'corpus', corpus, ctypes or {k: IMG_T.get(k, 'string') for k in corpus})
    queries = queries or {'query-id': ['q1', 'q2'], 'query': ['apples', 'rockets']}
    write_config(d, 'queries', queries, {k: 'string' for k in queries})
    qrels = qrels or {'query-id': ['q1', 'q2'], 'corpus-id': ['d1', 'd2'], 'score': [1, 1]}
    write_config(d, 'qrels', qrels, {'query-id': 'string', 'corpus-id': 'string', 'score': 'int64'})
    return d


def beir_ds(d, qrels_lines, queries=(('q1', 'apples'), ('q2', 'rockets'))):
    d = Path(d); (d / 'qrels').mkdir(parents=True)
    (d / 'corpus.jsonl').write_text('{"_id": "d1", "text": "apples and pears"}\n{"_id": "d2", "text": "rockets and stars"}\n')
    (d / 'queries.jsonl').write_text(''.join(json.dumps({'_id': i, 'text': t}) + '\n' for i, t in queries))
    (d / 'qrels' / 'test.tsv').write_text('query-id\tcorpus-id\tscore\n' + ''.join(l + '\n' for l in qrels_lines))
    return d


@pytest.mark.parametrize('path, msg', [('/etc/passwd', 'absolute path'), ('OUTSIDE', 'absolute path'), ('../outside.png', "'..' in path"),
                                       ('link.png', 'leads out of')])
def test_image_path_outside_the_dataset_is_refused(tmp_path, path, msg):
    out = _png(tmp_path / 'outside.png', size=(41, 21))                 # bytes unlike ok.png's, so a copy of it would show
    d = tmp_path / 'ds'; d.mkdir(); os.symlink(out, d / 'link.png')
    path = str(out) if path == 'OUTSIDE' else path
    parquet_ds(d, corpus={'corpus-id': ['d1', 'd2'], 'text': ['', ''], 'image': [{'bytes': None, 'path': 'ok.png'}, {'bytes': None, 'path': path}]})
    _png(d / 'ok.png')
    with pytest.raises(DataFileError, match=rf"corpus/test-00000-of-00001.parquet, row 2: field 'image': path: .*{msg}"):
        import_beir(d, cache_dir=tmp_path / 'cache', content='image')
    secret = out.read_bytes()                                          # nothing of the refused path reached the cache
    assert not [f for f in (tmp_path / 'cache').rglob('*') if f.is_file() and f.read_bytes() == secret]
    # a path inside the folder is read and copied into the cache: a unit's image is always a cache file
    parquet_ds(d, corpus={'corpus-id': ['d1', 'd2'], 'text': ['', ''], 'image': [{'bytes': None, 'path': 'ok.png'}, None]})
    units, _, _ = import_beir(d, cache_dir=tmp_path / 'cache', content='image')
    assert [Path(u.images[0]).read_bytes() for u in units] == [(d / 'ok.png').read_bytes()]
    assert Path(units[0].images[0]).is_relative_to(tmp_path / 'cache')


def test_linked_dataset_files_are_not_followed(tmp_path):
    d = beir_ds(tmp_path / 'jsonl', ['q1\td1\t1'])
    (d / 'qrels' / 'test.tsv').unlink(); os.symlink('/etc/passwd', d / 'qrels' / 'test.tsv')
    with pytest.raises(OutsideRootError, match='is a link that leads out of') as ei: import_beir(d)
    assert 'nologin' not in str(ei.value) and 'root:' not in str(ei.value)          # nothing of the target is quoted
    d = beir_ds(tmp_path / 'jsonl2', ['q1\td1\t1'])
    (d / 'corpus.jsonl').rename(tmp_path / 'elsewhere.jsonl'); os.symlink(tmp_path / 'elsewhere.jsonl', d / 'corpus.jsonl')
    with pytest.raises(OutsideRootError, match="'corpus.jsonl' is a link"): import_beir(d)
    d = parquet_ds(tmp_path / 'pq')
    f = d / 'corpus' / 'test-00000-of-00001.parquet'; f.rename(tmp_path / 'x.parquet'); os.symlink(tmp_path / 'x.parquet', f)
    with pytest.raises(OutsideRootError, match='is a link that leads out of'): import_beir(d)


def test_unused_column_is_never_read_and_a_ratio_bomb_is_refused(tmp_path, monkeypatch):
    import pyarrow as pa, pyarrow.parquet as pq
    d = parquet_ds(tmp_path / 'ds')
    pq.write_table(pa.table({'corpus-id': ['d1', 'd2'], 'text': ['apples', 'rockets'], 'junk': ['x' * (1 << 20)] * 2}),
                   d / 'corpus' / 'test-00000-of-00001.parquet', compression='zstd')
    asked = []
    real = pq.ParquetFile.read
    monkeypatch.setattr(pq.ParquetFile, 'read', lambda self, columns=None, **kw: asked.append(list(columns)) or real(self, columns=columns, **kw))
    units, qs, info = import_beir(d, content='text')
    assert len(units) == 2 and not any('junk' in c for c in asked) and info['limits'] == read_limits()
    # 40 compressible 5 MB blobs in a few KB: refused from the metadata, nothing written to the cache
    cells = [{'bytes': bytes([i]) * (5 << 20), 'path': f'p{i}.png'} for i in range(40)]
    pq.write_table(pa.table({'corpus-id': [f'd{i}' for i in range(40)], 'image': cells}), d / 'corpus' / 'test-00000-of-00001.parquet', compression='zstd')
    with pytest.raises(DataFileError, match=r"column 'image' declares [\d,]+ bytes uncompressed in [\d,]+ \(ratio [\d,]+, over the read limit ratio=100"):
        import_beir(d, cache_dir=tmp_path / 'cache')
    assert not (tmp_path / 'cache').exists()
    assert len(asked) == 3                                             # the bomb's image column was never read
    # the limits are overridable (and a cell is still bounded)
    with pytest.raises(DataFileError, match=r"row 1: field 'image': 5,242,880 bytes, over the read limit cell_bytes=1,000,000"):
        import_beir(d, cache_dir=tmp_path / 'cache', limits='ratio=1000000,cell_bytes=1000000')


def test_unknown_ids_are_refused_in_every_format(tmp_path):
    d = parquet_ds(tmp_path / 'pq', qrels={'query-id': ['q1', 'q2'], 'corpus-id': ['d1', 'nope'], 'score': [1, 1]})
    with pytest.raises(DataFileError, match=r"qrels/test-00000-of-00001.parquet, row 2: field 'corpus-id': unknown corpus id 'nope'"):
        import_beir(d)
    d = parquet_ds(tmp_path / 'pq2', qrels={'query-id': ['q1', 'q9'], 'corpus-id': ['d1', 'd2'], 'score': [1, 1]})
    with pytest.raises(DataFileError, match=r"row 2: field 'query-id': unknown query id 'q9'"): import_beir(d)
    d = beir_ds(tmp_path / 'jsonl', ['q1\td1\t1', 'q2\tnope\t0'])           # even judged 0, and the error names the file and line
    with pytest.raises(DataFileError, match=r"qrels/test.tsv, line 3: query 'q2': unknown doc id 'nope'"): read_beir(d)
    d = beir_ds(tmp_path / 'jsonl2', ['q1\td1\t1', 'q9\td2\t1'])
    with pytest.raises(DataFileError, match=r"line 3: unknown query id 'q9'"): read_beir(d)


def test_query_ids_with_spaces_are_kept_not_dropped(tmp_path):
    d = beir_ds(tmp_path / 'ds', ['q 1\td1\t1', 'q2\td2\t1'], queries=(('q 1', 'apples'), ('q2', 'rockets')))
    corpus, qs, qrels = read_beir(d)
    assert [q.id for q in qs] == ['q 1', 'q2'] and qrels == {'q 1': {'d1': 1}, 'q2': {'d2': 1}}


def test_decisions_parsed_strictly(tmp_path):
    q = tmp_path / 'q.jsonl'
    write_query_records([Draft(i, 'p', 'text', query=f'query {i}') for i in ('A-1', 'A-2', 'A-3')], q)
    cases = [('open.csv', 'id,decision,edited_query\nA-1,edit,"never closed\nA-2,drop,\n', 'open.csv, line 2: a quoted field is never closed'),
             ('swallow.csv', 'id,decision,edited_query\nA-1,edit,"never closed\nA-2,drop,\nA-3,keep,"\n', "line 2: field 'edited_query' spans lines"),
             ('huge.csv', 'id,decision,edited_query\nA-1,edit,"' + 'x' * 140_000 + '"\n', 'huge.csv, line 2: a cell is over the CSV field limit'),
             ('fields.csv', 'id,decision,edited_query\nA-1,keep\n', 'line 2: expected 3 fields'),
             ('int.jsonl', '{"id": "A-1", "decision": "edit", "edited_query": 42}\n', "int.jsonl, line 1: field 'edited_query' must be a string, got int"),
             ('null.jsonl', 'null\n', 'line 1: expected a JSON object'),
             ('stray.csv', 'id,decision\nA-1,keep\nZ-9,drop\nZ-8,drop\n', "2 decision(s) for queries not in the query file: line 3: query 'Z-9' is not in the query file; line 4: query 'Z-8'")]
    for name, text, msg in cases:
        (tmp_path / name).write_text(text)
        with pytest.raises(ValueError) as ei: import_review(q, tmp_path / name, tmp_path / 'out.jsonl')
        assert msg in str(ei.value), (name, str(ei.value))
    assert not (tmp_path / 'out.jsonl').exists()


def test_review_csv_neutralises_formulas_and_round_trips(tmp_path):
    rows = [('-A', 'edit', '=HYPERLINK("http://x")'), ('@B', 'keep', ''), ('C', 'edit', '+1 "quoted", with\nnewline')]
    text = decisions_csv(rows)
    assert all(not line.split(',')[0].strip('"').startswith(('=', '+', '-', '@')) for line in text.splitlines())
    for cell in ('"\'-A"', '"\'=HYPERLINK(""http://x"")"', '"\'@B"'): assert cell in text
    (tmp_path / 'd.csv').write_text(text)
    assert {k: v[:2] for k, v in read_decisions(tmp_path / 'd.csv').items()} == {r[0]: (r[1], r[2]) for r in rows}


def test_decompression_bomb_is_the_units_error(tmp_path):
    from PIL import Image
    from docbench_nb.retrieval.image_encoders import load_image
    Image.new('1', (20000, 20000)).save(tmp_path / 'bomb.png')
    with pytest.raises(ValueError, match="bomb.png is over Pillow's limit"): load_image(tmp_path / 'bomb.png', 1_000_000)
    if not shutil.which('tesseract'): pytest.skip('tesseract not installed')
    from docbench_nb.retrieval.ocr import ocr_units
    from docbench_nb.records import Unit
    units = [Unit('d1', 'd1', 'page', 'own text', images=[str(tmp_path / 'bomb.png')])]
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter('always')
        out = ocr_units(units, 'tesseract', cache_dir=tmp_path, progress=False, on_error='warn')
    assert out[0].text == 'own text' and any("over Pillow's limit" in str(x.message) and "unit 'd1'" in str(x.message) for x in w)


@pytest.mark.parametrize('kind', ['inf', 'score_strings', 'missing_query', 'image_strings', 'id_lists', 'bool_level'])
def test_malformed_columns_are_errors_naming_file_and_field(tmp_path, kind):
    import pyarrow as pa, pyarrow.parquet as pq
    if kind == 'inf':
        with pytest.raises(DataFileError, match=r"test.tsv, line 2: relevance 'inf' is not an integer grade"):
            read_beir(beir_ds(tmp_path / 'ds', ['q1\td1\tinf']))
        return
    d = parquet_ds(tmp_path / 'ds')
    f = {'score_strings': 'qrels', 'missing_query': 'queries', 'image_strings': 'corpus', 'id_lists': 'corpus', 'bool_level': 'queries'}[kind]
    t = {'score_strings': {'query-id': ['q1'], 'corpus-id': ['d1'], 'score': ['high']},
         'missing_query': {'query-id': ['q1'], 'question': ['apples']},
         'image_strings': {'corpus-id': ['d1', 'd2'], 'image': ['x.png', 'y.png']},
         'id_lists': {'corpus-id': [['d1'], ['d2']], 'text': ['a', 'b']},
         'bool_level': {'query-id': ['q1', 'q2'], 'query': ['a', 'b'], 'level': [True, False]}}[kind]
    pq.write_table(pa.table(t), d / f / 'test-00000-of-00001.parquet')
    msg = {'score_strings': "field 'score' has type string", 'missing_query': "no 'query' column", 'image_strings': "field 'image' has type string",
           'id_lists': "field 'corpus-id' has type list", 'bool_level': "field 'level' has type bool"}[kind]
    with pytest.raises(DataFileError, match=f"{f}/test-00000-of-00001.parquet: {msg}"): import_beir(d)


def test_queries_judged_only_non_relevant_are_skipped_and_counted(tmp_path):
    units, qs, info = import_beir(beir_ds(tmp_path / 'jsonl', ['q1\td1\t1', 'q2\td2\t0']))
    assert [q.id for q in qs] == ['q1'] and info['n_no_positive'] == 1
    units, qs, info = import_beir(parquet_ds(tmp_path / 'pq', qrels={'query-id': ['q1', 'q2'], 'corpus-id': ['d1', 'd2'], 'score': [2, 0]}))
    assert [q.id for q in qs] == ['q1'] and info['n_no_positive'] == 1 and info['n_unjudged_queries'] == 0


def _pages(ids, doc='p'):
    return [{'corpus-id': c, 'doc-id': doc, 'page': i + 1, 'image': None, 'text': f'page {c} words {i}', 'render_path': None, 'method': 'm'}
            for i, c in enumerate(ids)]


def test_export_refuses_a_non_empty_out_and_import_reads_only_the_listed_shards(tmp_path):
    out = tmp_path / 'out'
    pages = _pages([f'd{i}' for i in range(10)])
    export_beir(out, _pages(['old']), [Query('q1', 'page old', ['p'])], {'q1': {'old': 1}}, jsonl=False)
    shutil.move(out / 'corpus' / 'test-00000-of-00001.parquet', out / 'corpus' / 'test-00000-of-00002.parquet')   # a stale shard
    with pytest.raises(FileExistsError, match='is not empty; pass --force'):
        export_beir(out, pages, [Query('q1', 'page d1', ['p'])], {'q1': {'d1': 1}}, jsonl=False)
    export_beir(out, pages, [Query('q1', 'page d1', ['p'])], {'q1': {'d1': 1}}, jsonl=False, force=True)
    units, qs, info = import_beir(out)
    assert len(units) == 10 and info['files']['corpus'] == ['corpus/test-00000-of-00001.parquet']
    with pytest.raises(ValueError, match="query id 'a\\\\tb' cannot be exported"):
        export_beir(tmp_path / 'o2', pages, [Query('a\tb', 'x', ['p'])], {'a\tb': {'d1': 1}})


AWKWARD = ['q 1', 'é/ü#2', 'a#b/c', 'x/../y', '  lead', 'tab-free "quote"', '中文 id', '-1', '=cmd']


def test_export_import_round_trip_with_awkward_ids(tmp_path):
    from docbench_nb.evaluation.core import evaluate_units
    docs = ['paper one/ä', 'paper#two']
    pages = _pages([f'{docs[0]}#p{i}' for i in (1, 2, 3)], docs[0]) + _pages([f'{docs[1]}#p{i}' for i in (1, 2)], docs[1])
    for r, words in zip(pages, ['alpha beta', 'gamma delta', 'epsilon zeta', 'eta theta', 'iota kappa']): r['text'] = words
    words = ['alpha', 'delta', 'zeta', 'theta', 'kappa', 'beta', 'gamma', 'epsilon', 'iota']
    qs = [Query(q, words[i], [pages[i % 5]['doc-id']]) for i, q in enumerate(AWKWARD)]
    qrels = {q.id: {pages[i % 5]['corpus-id']: 1, pages[(i + 1) % 5]['corpus-id']: 0} for i, q in enumerate(qs)}
    export_beir(tmp_path / 'ex', pages, qs, qrels)
    units, back, info = import_beir(tmp_path / 'ex', content='text')
    assert [q.id for q in back] == AWKWARD and {u.unit_id for u in units} == {p['corpus-id'] for p in pages}
    mine = evaluate_units([u for u in units], [Query(q.id, q.text, [d for d, s in qrels[q.id].items() if s > 0]) for q in qs], 'bm25')
    theirs = evaluate_units(units, back, 'bm25')
    per = lambda r: {x['query_id']: (x['ndcg@10'], x['recall@10']) for x in r.per_query}
    assert per(theirs) == per(mine) and set(per(theirs)) == set(AWKWARD)
    # the BEIR JSONL copy reads back to the same ids too
    corpus, jq, jr = read_beir(tmp_path / 'ex' / 'jsonl' / 'pages')
    assert [q.id for q in jq] == AWKWARD and jr == qrels and set(corpus) == {p['corpus-id'] for p in pages}
    jt = evaluate_units([u for u in units], jq, 'bm25')
    assert per(jt) == per(mine)


def test_every_flag_of_export_evaluate_dataset_and_cache_has_help():
    import argparse
    from docbench_nb.evaluation.export import add_export_parsers
    from docbench_nb.cache import add_cache_parsers
    ap = argparse.ArgumentParser(); sub = ap.add_subparsers()
    parsers = list(add_export_parsers(sub))
    p = add_cache_parsers(sub)
    parsers += [a for act in p._actions if isinstance(act, argparse._SubParsersAction) for a in act.choices.values()]
    for pr in parsers:
        for act in pr._actions:
            if isinstance(act, (argparse._HelpAction, argparse._SubParsersAction)): continue
            assert act.help, (pr.prog, act.dest)


def test_cli_read_limit_flag(tmp_path, capsys):
    from docbench_nb.cli import main
    d = parquet_ds(tmp_path / 'ds')
    assert main(['-q', 'evaluate-dataset', str(d), '--retriever', 'bm25', '--read-limit', 'rows=1']) == 2
    assert 'over the read limit rows=1' in capsys.readouterr().err
    assert main(['-q', 'evaluate-dataset', str(d), '--retriever', 'bm25', '--read-limit', 'rowz=1']) == 2
    assert "unknown read limit 'rowz'" in capsys.readouterr().err


@pytest.mark.skipif(not shutil.which('node'), reason='node not installed')
def test_review_sheet_javascript_neutralises_like_csv_cell():
    import re, subprocess
    from docbench_nb.queries.review import _JS, csv_cell
    fn = re.search(r'function safeCell\(s\)\{.*?\}', _JS).group(0)
    vals = ['=SUM(A1)', '+1', '-x', '@cmd', '\tx', '\rx', 'fine', "'=a", '']
    out = subprocess.run(['node', '-e', fn + f'; console.log(JSON.stringify({json.dumps(vals)}.map(safeCell)))'],
                         capture_output=True, text=True, timeout=60)
    assert json.loads(out.stdout) == [csv_cell(v) for v in vals], out.stderr


def test_cli_export_refuses_a_non_empty_out_before_any_work(tmp_path, capsys):
    from docbench_nb.cli import main
    (tmp_path / 'src').mkdir(); (tmp_path / 'q.jsonl').write_text('')
    out = tmp_path / 'out'; out.mkdir(); (out / 'old.txt').write_text('x')
    assert main(['-q', '--cache-dir', str(tmp_path / 'c'), 'export', str(tmp_path / 'src'), '--queries', str(tmp_path / 'q.jsonl'), '--out', str(out)]) == 2
    assert 'is not empty; pass --force' in capsys.readouterr().err and not (tmp_path / 'c').exists()   # nothing parsed or cached


# ================================================================ review fixes: card globs, cache links, limits
def test_old_style_card_glob_skips_leftover_tmp_and_hidden_copies(tmp_path):
    "Older exports list `path: corpus/test-*`: a leftover `….parquet.tmp` (or a hidden copy) is no shard (was: duplicate id)."
    from docbench_nb.evaluation.export import dataset_card
    d = parquet_ds(tmp_path / 'ds')
    types = {'corpus': IMG_T, 'queries': {'query-id': 'string', 'query': 'string'},
             'qrels': {'query-id': 'string', 'corpus-id': 'string', 'score': 'int64'}}
    (d / 'README.md').write_text(dataset_card(types, 'test'))                       # no `files`: globs, as older exports wrote
    assert 'corpus/test-*' in (d / 'README.md').read_text()
    for c in types:
        f = d / c / 'test-00000-of-00001.parquet'
        shutil.copy(f, f.with_name(f.name + '.tmp')); shutil.copy(f, f.with_name('.' + f.name))
    units, qs, info = import_beir(d, content='text')
    assert len(units) == 2 and [q.id for q in qs] == ['q1', 'q2']
    assert info['files'] == {c: [f'{c}/test-00000-of-00001.parquet'] for c in types}
    (d / 'README.md').write_text(dataset_card(types, 'test').replace('corpus/test-*', 'corpus/*'))   # a hidden copy matches `*`
    units, qs, info = import_beir(d, content='text')
    assert len(units) == 2 and info['files']['corpus'] == ['corpus/test-00000-of-00001.parquet']


def test_card_without_shards_for_the_split_says_so(tmp_path):
    from docbench_nb.evaluation.export import dataset_card
    d = parquet_ds(tmp_path / 'ds')
    types = {'corpus': IMG_T, 'queries': {'query-id': 'string', 'query': 'string'}}
    (d / 'README.md').write_text(dataset_card(types, 'dev'))                     # the card names only a 'dev' split
    with pytest.raises(ValueError, match='the dataset card lists no shards for corpus/test'): import_beir(d)
    (d / 'README.md').write_text(dataset_card({**types, 'qrels': {}}, 'test', files={'corpus': ['corpus/nope-*']}))
    with pytest.raises(ValueError, match=r"the dataset card's data files for corpus/test \('corpus/nope-\*'\) match no .parquet file"):
        import_beir(d)


def test_imported_image_never_written_through_a_linked_cache_folder(tmp_path):
    "`renders/imported` a link to an outside folder: the import is refused, nothing is written there."
    import io as _io
    from PIL import Image
    b = _io.BytesIO(); Image.new('RGB', (8, 8), 'red').save(b, 'PNG')
    d = parquet_ds(tmp_path / 'ds', corpus={'corpus-id': ['d1', 'd2'], 'text': ['', ''],
                                            'image': [{'bytes': b.getvalue(), 'path': 'a.png'}, None]})
    outside = tmp_path / 'outside'; outside.mkdir()
    cache = tmp_path / 'cache'; (cache / 'renders').mkdir(parents=True)
    os.symlink(outside, cache / 'renders' / 'imported')
    with pytest.raises(OSError, match=r"refused: it is reached through a link that leads out of the cache stage folder .*renders"):
        import_beir(d, cache_dir=cache, content='image')
    assert not list(outside.rglob('*'))
    os.unlink(cache / 'renders' / 'imported')                          # without the link: imported into the cache
    units, _, _ = import_beir(d, cache_dir=cache, content='image')
    assert Path(units[0].images[0]).read_bytes() == b.getvalue() and not os.path.islink(units[0].images[0])


def _declared_png(path, w, h):
    "A 1x1 PNG whose header declares `w` x `h` pixels: a few dozen bytes on disk, never decoded."
    import struct, zlib
    from PIL import Image
    Image.new('L', (1, 1)).save(path); b = bytearray(Path(path).read_bytes())
    b[16:24] = struct.pack('>II', w, h); b[29:33] = struct.pack('>I', zlib.crc32(bytes(b[12:29])))
    Path(path).write_bytes(bytes(b)); return Path(path)


@pytest.mark.filterwarnings('ignore::PIL.Image.DecompressionBombWarning')   # Pillow's own warning in the 1-2x band
def test_decompression_bomb_warning_band_is_refused_before_decoding(tmp_path):
    from PIL import Image
    from docbench_nb.retrieval.image_encoders import load_image
    w = 10_000; assert Image.MAX_IMAGE_PIXELS < w * w < 2 * Image.MAX_IMAGE_PIXELS   # Pillow only warns here, it does not raise
    with pytest.raises(ValueError, match=r"band.png is over Pillow's limit of [\d,]+ pixels \(10,000 x 10,000; a decompression bomb\?\)"):
        load_image(_declared_png(tmp_path / 'band.png', w, w))
    with pytest.raises(ValueError, match='cannot be read'):                     # under the limit the same header is decoded (and is short)
        load_image(_declared_png(tmp_path / 'small.png', 100, 100))


def test_decisions_file_has_its_own_small_limit(tmp_path):
    from docbench_nb.queries.review import DECISIONS_FILE_BYTES
    f = tmp_path / 'decisions.csv'
    with open(f, 'wb') as fh: fh.truncate(DECISIONS_FILE_BYTES + 1)         # sparse: nothing is read
    with pytest.raises(DataFileError, match=f'over the read limit file_bytes={DECISIONS_FILE_BYTES:,}'): read_decisions(f)
    f.write_text('id,decision\nA-1,keep\n')
    with pytest.raises(DataFileError, match='over the read limit file_bytes=10'): read_decisions(f, limits='file_bytes=10')
    assert read_decisions(f) == {'A-1': ('keep', '', 2)}


# ================================================================ perspective BEIR folders (perspectives.read_perspective_beir)
from docbench_nb.evaluation.formats import QueryFileError
from docbench_nb.coverage.perspectives import Perspective, PerspectiveQuery, write_perspective_beir, read_perspective_beir

P_CORPUS = {'a': 'alpha', 'b': 'beta', 'c': 'gamma'}
P_QUERIES = [PerspectiveQuery('q1', 'x?', [Perspective('one', ['a', 'b'], 'l1', {'k': 1}), Perspective('two', ['b'])], 'src'),
             PerspectiveQuery('q2', 'y?', [Perspective('three', ['c'])])]
P_QRELS = 'qrels/test-perspectives.tsv'


def persp_ds(d):
    return write_perspective_beir(d, P_CORPUS, P_QUERIES)


def _lines_of(d, rel): return (d / rel).read_text().splitlines()


@pytest.mark.parametrize('rel', ['corpus.jsonl', 'queries.jsonl', P_QRELS])
def test_perspective_folder_links_out_are_refused_and_never_read(tmp_path, rel):
    d = persp_ds(tmp_path / 'ds')
    secret = tmp_path / 'secret.txt'; secret.write_text('root:x:0:0:SECRET-LINE\n')
    (d / rel).unlink(); os.symlink(secret, d / rel)
    with pytest.raises(OutsideRootError, match=f"'{rel}' is a link that leads out of") as ei: read_perspective_beir(d)
    assert 'SECRET' not in str(ei.value)
    # the folder's own path through a link outside it (the split) is refused the same way
    with pytest.raises(OutsideRootError, match=r"'\.\.' in path"): read_perspective_beir(persp_ds(tmp_path / 'ok'), split='../../x')


def test_perspective_folder_fifo_and_size_limits(tmp_path):
    d = persp_ds(tmp_path / 'ds')
    (d / P_QRELS).unlink(); os.mkfifo(d / P_QRELS)
    with pytest.raises(OSError, match='is not a regular file'): read_perspective_beir(d)   # never opened, so never blocks
    d = persp_ds(tmp_path / 'ds2')
    with pytest.raises(DataFileError, match=r"corpus\.jsonl: .* over the read limit file_bytes=10"): read_perspective_beir(d, limits={'file_bytes': 10})
    with open(d / 'queries.jsonl', 'a') as f: f.write('{"_id": "' + 'x' * 5000 + '"}\n')
    with pytest.raises(DataFileError, match=r"queries\.jsonl, line 3: line longer than 1,000 bytes \(read limit line_bytes\)") as ei:
        read_perspective_beir(d, limits='line_bytes=1000')
    assert 'xxxxxxxx' not in str(ei.value)
    d = persp_ds(tmp_path / 'ds3')
    with pytest.raises(DataFileError, match=r"test-perspectives\.tsv, line 4: more than 3 lines \(read limit rows\)"):
        read_perspective_beir(d, limits={'rows': 3, 'line_bytes': 10**6})


BAD_QUERY_LINES = [
    ('{"_id": "q1", "text": "x?", "metadata": ', "line 1: bad JSON"),
    ('[1, 2]', "line 1: expected a JSON object, got list"),
    ('{"_id": "q1", "text": "x?", "metadata": "nope"}', "line 1: query 'q1': 'metadata' must be an object, got str"),
    ('{"_id": "q1", "text": "x?", "metadata": {"perspectives": {"0": "one"}}}', "line 1: query 'q1': metadata 'perspectives' must be a non-empty list"),
    ('{"_id": "q1", "text": "x?", "metadata": {"perspectives": [{"text": 7}, "two"]}}', "line 1: query 'q1': perspectives[0] field 'text' has the wrong type (7)"),
    ('{"_id": "q1", "text": "", "metadata": {"perspectives": [{"text": "one"}, {"text": "two"}]}}', "line 1: query 'q1': missing or empty 'text'"),
    ('{"_id": ["q1"], "text": "x?"}', "line 1: missing or empty '_id'"),
    ('{"_id": "q1", "text": "x?", "metadata": {"source": 3, "perspectives": [{"text": "one"}, {"text": "two"}]}}', "line 1: query 'q1': metadata field 'source' has the wrong type (3)"),
]


@pytest.mark.parametrize('line, msg', BAD_QUERY_LINES)
def test_perspective_queries_bad_lines_name_file_and_line(tmp_path, line, msg):
    d = persp_ds(tmp_path / 'ds')
    lines = _lines_of(d, 'queries.jsonl'); lines[0] = line
    (d / 'queries.jsonl').write_text('\n'.join(lines) + '\n')
    with pytest.raises(QueryFileError) as ei: read_perspective_beir(d)
    assert f"{d / 'queries.jsonl'}, {msg}" in str(ei.value)


BAD_QRELS_ROWS = [
    ('q1\ta\tinf\t0', "line 6: relevance 'inf' is not an integer grade"),
    ('q1\ta\t1\t-1', "line 6: perspective '-1' is not a perspective index"),
    ('q1\ta\t1\t' + '9' * 200, "line 6: perspective '99999"),
    ('q1\ta\t1', "line 6: expected 4 tab-separated fields 'query-id corpus-id score perspective', got 3"),
    ('q1\tzz\t1\t0', "line 6: doc 'zz' is not in corpus.jsonl"),
    ('q1\ta\t1\t0', "line 6: duplicate judgment for query 'q1', doc 'a', perspective 0 (first on line 2)"),
    ('q9\ta\t1\t0', "line 6: query 'q9': not in queries.jsonl"),
    ('q2\ta\t1\t1', "line 6: query 'q2': perspective 1, but the query has 1 perspective(s)"),
    ('\ta\t1\t0', "line 6: empty query or document id"),
]


@pytest.mark.parametrize('row, msg', BAD_QRELS_ROWS)
def test_perspective_qrels_bad_rows_name_file_and_line(tmp_path, row, msg):
    d = persp_ds(tmp_path / 'ds')
    with open(d / P_QRELS, 'a') as f: f.write(row + '\n')
    with pytest.raises(DataFileError) as ei: read_perspective_beir(d)
    err = str(ei.value)
    assert f"{d / P_QRELS}, {msg}" in err and len(err) < 400, err       # a long token is quoted in at most 60 characters


def test_perspective_folder_skips_nothing_silently(tmp_path):
    d = persp_ds(tmp_path / 'ds')
    assert read_perspective_beir(d) == (P_CORPUS, P_QUERIES)
    # judgments below 1 are judged non-relevant: not gold, and counted in a warning naming the file and the first line
    with open(d / P_QRELS, 'a') as f: f.write('q1\tc\t0\t0\nq2\ta\t-1\t0\n')
    with pytest.warns(UserWarning, match=r"2 judgment\(s\) in .*test-perspectives\.tsv with a score below 1 are judged non-relevant, not gold \(first on line 6\)"):
        assert read_perspective_beir(d) == (P_CORPUS, P_QUERIES)
    # a perspective whose only judgment is 0 is an error on the query's line, never a perspective dropped
    d = persp_ds(tmp_path / 'ds2')
    lines = [l for l in _lines_of(d, P_QRELS) if not l.startswith('q2\t')] + ['q2\tc\t0\t0']
    (d / P_QRELS).write_text('\n'.join(lines) + '\n')
    with pytest.raises(QueryFileError, match=r"queries\.jsonl, line 2: query 'q2': perspective\(s\) \[0\] without a judgment >= 1"), \
            pytest.warns(UserWarning, match='1 judgment'):
        read_perspective_beir(d)
    # a duplicate query id is refused with both lines
    d = persp_ds(tmp_path / 'ds3')
    (d / 'queries.jsonl').write_text((d / 'queries.jsonl').read_text() + _lines_of(d, 'queries.jsonl')[0] + '\n')
    with pytest.raises(QueryFileError, match=r"line 3: duplicate query id 'q1' \(first on line 1\)"): read_perspective_beir(d)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(['q1', 'q2', 'q 1', '', 'x' * 80]), st.sampled_from(['a', 'b', 'c', 'zz', '']),
                          st.sampled_from(['0', '1', '2', '-1', '1.5', 'inf', 'x']), st.sampled_from(['0', '1', '2', '-1', 'a', '٣', ''])),
                max_size=6),
       st.lists(JV | st.sampled_from(['q1', 'x?']), max_size=3))
def test_fuzz_perspective_folder(tmp_path_factory, rows, junk):
    d = persp_ds(tmp_path_factory.mktemp('persp'))
    with open(d / P_QRELS, 'a') as f: f.write(''.join('\t'.join(r) + '\n' for r in rows))
    with open(d / 'queries.jsonl', 'a') as f: f.write(''.join(json.dumps({'_id': 'j', 'text': 't', 'metadata': j}) + '\n' for j in junk))
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        out = _only_allowed(lambda: read_perspective_beir(d))
    if isinstance(out, tuple):
        assert all(p.doc_ids and set(p.doc_ids) <= set(P_CORPUS) for q in out[1] for p in q.perspectives)
    else: assert str(d) in str(out)
