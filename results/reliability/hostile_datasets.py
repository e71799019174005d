"""Hostile datasets, review files and caches (issue #26): each case built from a tiny crafted input, run through the
`docbench` CLI (or the reader) in its own process; prints and writes exit code, last message line, what was read or
written outside, and peak RSS. Usage: `python results/reliability/hostile_datasets.py OUT.json [CASE ...]`."""
import json, os, subprocess, sys, tempfile, textwrap, time
from pathlib import Path

PY = sys.executable
CLI = "import sys; from docbench_nb.cli import main; sys.exit(main(sys.argv[1:]))"


def run(args, cwd, code=None):
    "rc, stderr tail, stdout tail, peak RSS (MB) of one process (`/usr/bin/time -f %M`)."
    cmd = ['/usr/bin/time', '-f', 'PEAK_KB=%M', PY, '-c', code or CLI] + [str(a) for a in args]
    p = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=600)
    err = [l for l in p.stderr.splitlines() if l.strip()]
    peak = next((int(l.split('=')[1]) for l in err if l.startswith('PEAK_KB=')), 0) / 1024
    err = [l[:300] for l in err if not l.startswith(('PEAK_KB=', 'Command exited')) and not l.strip().startswith(('warnings.warn', 'warn('))]
    return {'rc': p.returncode, 'stderr': err[:2] + (['...'] + err[-2:] if len(err) > 4 else err[2:]), 'stdout': [l for l in p.stdout.splitlines() if l.strip()][-3:],
            'peak_mb': round(peak, 1)}


def table(path, cols, types=None, **kw):
    import pyarrow as pa, pyarrow.parquet as pq
    path = Path(path); path.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.table({k: pa.array(v, type=(types or {}).get(k)) for k, v in cols.items()}), path, **kw)
    return path


IMG = None
def png(path, text='OUTSIDE SECRET'):
    from PIL import Image, ImageDraw
    im = Image.new('RGB', (400, 80), 'white'); ImageDraw.Draw(im).text((10, 30), text, fill='black'); im.save(path)
    return Path(path)


def dataset(d, corpus=None, queries=None, qrels=None, types=None):
    "A minimal ViDoRe-layout folder: corpus/, queries/, qrels/ Parquet configs."
    import pyarrow as pa
    img_t = pa.struct([('bytes', pa.binary()), ('path', pa.string())])
    corpus = corpus or {'corpus-id': ['d1', 'd2'], 'text': ['apples and pears', 'rockets and stars'],
                        'image': [None, None]}
    table(d / 'corpus' / 'test-00000-of-00001.parquet', corpus, {'image': img_t, **(types or {})})
    table(d / 'queries' / 'test-00000-of-00001.parquet', queries or {'query-id': ['q1', 'q2'], 'query': ['apples', 'rockets']})
    table(d / 'qrels' / 'test-00000-of-00001.parquet', qrels or {'query-id': ['q1', 'q2'], 'corpus-id': ['d1', 'd2'], 'score': [1, 1]})
    return d


def beir_jsonl(d, qrels_lines=None, queries=None, corpus=None):
    d.mkdir(parents=True, exist_ok=True)
    (d / 'corpus.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in corpus or [
        {'_id': 'd1', 'title': '', 'text': 'apples and pears'}, {'_id': 'd2', 'title': '', 'text': 'rockets and stars'}]))
    (d / 'queries.jsonl').write_text(''.join(json.dumps(r) + '\n' for r in queries or [
        {'_id': 'q1', 'text': 'apples'}, {'_id': 'q2', 'text': 'rockets'}]))
    (d / 'qrels').mkdir(exist_ok=True)
    if qrels_lines is not None:
        (d / 'qrels' / 'test.tsv').write_text('query-id\tcorpus-id\tscore\n' + ''.join(l + '\n' for l in qrels_lines))
    return d


def ocr_read(cache, f):
    "Did the OCR cache get an entry for the file `f` (i.e. was it read and OCR'd)?"
    import hashlib
    h = hashlib.sha256(Path(f).read_bytes()).hexdigest()
    return any(p.stem == h for p in Path(cache).rglob('*.json'))


def evald(ds, w, *extra, retriever='bm25', content='text'):
    return run(['--cache-dir', w / 'cache', '-q', 'evaluate-dataset', ds, '--retriever', retriever, '--content', content, *extra], w)


CASES = {}
def case(f): CASES[f.__name__] = f; return f


@case
def image_path_absolute(w):
    out = png(w / 'outside.png')
    ds = dataset(w / 'ds', corpus={'corpus-id': ['d1', 'd2'], 'text': ['', ''],
                                   'image': [{'bytes': None, 'path': str(out)}, {'bytes': None, 'path': str(out)}]})
    r = evald(ds, w, retriever='ocr:tesseract+bm25', content='image')
    return {**r, 'outside_read': ocr_read(w / 'cache', out)}


@case
def image_path_dotdot(w):
    out = png(w / 'outside.png')
    ds = dataset(w / 'ds', corpus={'corpus-id': ['d1', 'd2'], 'text': ['', ''],
                                   'image': [{'bytes': None, 'path': '../outside.png'}, {'bytes': None, 'path': '../outside.png'}]})
    r = run(['--cache-dir', w / 'cache', '-q', 'evaluate-dataset', '.', '--retriever', 'ocr:tesseract+bm25', '--content', 'image'], ds)
    return {**r, 'outside_read': ocr_read(w / 'cache', out)}


@case
def image_path_etc_passwd(w):
    ds = dataset(w / 'ds', corpus={'corpus-id': ['d1', 'd2'], 'text': ['', ''],
                                   'image': [{'bytes': None, 'path': '/etc/passwd'}, {'bytes': None, 'path': '/etc/passwd'}]})
    return evald(ds, w, retriever='ocr:tesseract+bm25', content='image')


@case
def qrels_link_to_etc_passwd(w):
    ds = beir_jsonl(w / 'ds')
    os.symlink('/etc/passwd', ds / 'qrels' / 'test.tsv')
    return evald(ds, w)


@case
def corpus_jsonl_link_outside(w):
    ds = beir_jsonl(w / 'ds', ['q1\td1\t1', 'q2\td2\t1'])
    (w / 'elsewhere.jsonl').write_text((ds / 'corpus.jsonl').read_text()); (ds / 'corpus.jsonl').unlink()
    os.symlink(w / 'elsewhere.jsonl', ds / 'corpus.jsonl')
    r = evald(ds, w)
    return {**r, 'outside_read': r['rc'] == 0}


@case
def parquet_shard_link_outside(w):
    ds = dataset(w / 'ds')
    f = ds / 'corpus' / 'test-00000-of-00001.parquet'
    f.rename(w / 'elsewhere.parquet'); os.symlink(w / 'elsewhere.parquet', f)
    r = evald(ds, w)
    return {**r, 'outside_read': r['rc'] == 0}


@case
def cache_fix_stage_link(w):
    outside = w / 'precious'; outside.mkdir()
    (outside / 'notes.json').write_text('{not json')                  # looks damaged to verify
    (outside / 'vec.npy').write_bytes(b'')
    cache = w / 'cache'; cache.mkdir()
    os.symlink(outside, cache / 'papers')
    r = run(['--cache-dir', cache, 'cache', 'verify', '--fix'], w)
    return {**r, 'outside_deleted': sorted(p for p in ('notes.json', 'vec.npy') if not (outside / p).exists())}


@case
def unused_huge_column(w):
    import pyarrow as pa
    ds = dataset(w / 'ds')
    big = 'x' * (1 << 20)
    table(ds / 'corpus' / 'test-00000-of-00001.parquet',
          {'corpus-id': [f'd{i}' for i in range(300)], 'text': ['apples'] * 300, 'junk': [big] * 300}, compression='zstd')
    table(ds / 'qrels' / 'test-00000-of-00001.parquet', {'query-id': ['q1', 'q2'], 'corpus-id': ['d1', 'd2'], 'score': [1, 1]})
    r = evald(ds, w)
    return {**r, 'file_kb': round((ds / 'corpus' / 'test-00000-of-00001.parquet').stat().st_size / 1024, 1)}


@case
def compressible_image_blobs(w):
    import pyarrow as pa
    ds = dataset(w / 'ds')
    img_t = pa.struct([('bytes', pa.binary()), ('path', pa.string())])
    cells = [{'bytes': bytes([i]) * (5 << 20), 'path': f'p{i}.png'} for i in range(40)]
    table(ds / 'corpus' / 'test-00000-of-00001.parquet',
          {'corpus-id': [f'd{i}' for i in range(40)], 'text': ['apples'] * 40, 'image': cells}, {'image': img_t}, compression='zstd')
    table(ds / 'qrels' / 'test-00000-of-00001.parquet', {'query-id': ['q1', 'q2'], 'corpus-id': ['d1', 'd2'], 'score': [1, 1]})
    r = evald(ds, w, content='both')
    written = sum(p.stat().st_size for p in (w / 'cache').rglob('*') if p.is_file()) if (w / 'cache').exists() else 0
    return {**r, 'file_kb': round((ds / 'corpus' / 'test-00000-of-00001.parquet').stat().st_size / 1024, 1),
            'cache_mb': round(written / 1e6, 1)}


@case
def parquet_qrels_unknown_corpus_id(w):
    ds = dataset(w / 'ds', qrels={'query-id': ['q1', 'q2'], 'corpus-id': ['d1', 'nope'], 'score': [1, 1]})
    return evald(ds, w)


@case
def query_id_with_space(w):
    ds = beir_jsonl(w / 'ds', ['q 1\td1\t1', 'q2\td2\t1'], queries=[{'_id': 'q 1', 'text': 'apples'}, {'_id': 'q2', 'text': 'rockets'}])
    return evald(ds, w)


DRAFT = {'doc_id': 'p', 'evidence_type': 'text', 'query': 'what?', 'answer': 'a'}

def _review(w, decisions, name='decisions.csv'):
    q = w / 'q.jsonl'
    q.write_text(''.join(json.dumps({**DRAFT, 'id': i, 'query': f'query {i}'}) + '\n' for i in ('A-1', 'A-2', 'A-3')))
    (w / name).write_text(decisions) if isinstance(decisions, str) else (w / name).write_bytes(decisions)
    r = run(['queries', 'import-review', '--queries', q, '--decisions', w / name, '--out', w / 'kept.jsonl'], w)
    kept = [json.loads(l) for l in open(w / 'kept.jsonl')] if (w / 'kept.jsonl').exists() else []
    return {**r, 'kept': {d['id']: d['query'] for d in kept}}


@case
def csv_unterminated_quote(w):
    return _review(w, 'id,decision,edited_query\nA-1,edit,"never closed\nA-2,drop,\n')


@case
def csv_huge_cell(w):
    return _review(w, 'id,decision,edited_query\nA-1,edit,"' + 'x' * 140_000 + '"\n')


@case
def jsonl_integer_edited_query(w):
    return _review(w, '{"id": "A-1", "decision": "edit", "edited_query": 42}\n', 'decisions.jsonl')


@case
def csv_stray_ids(w):
    return _review(w, 'id,decision,edited_query\nA-1,keep,\nZ-9,drop,\nZ-8,drop,\n')


@case
def bomb_png_ocr(w):
    from PIL import Image
    Image.new('1', (20000, 20000)).save(w / 'bomb.png')                    # 400 M pixels, ~50 KB
    ds = dataset(w / 'ds', corpus={'corpus-id': ['d1', 'd2'], 'text': ['', ''],
                                   'image': [{'bytes': (w / 'bomb.png').read_bytes(), 'path': 'bomb.png'},
                                             {'bytes': png(w / 'ok.png', 'ROCKETS').read_bytes(), 'path': 'ok.png'}]})
    return evald(ds, w, retriever='ocr:tesseract+bm25', content='image')


@case
def bomb_png_load_image(w):
    from PIL import Image
    Image.new('1', (20000, 20000)).save(w / 'bomb.png')
    return run([w / 'bomb.png'], w, "import sys\nfrom docbench_nb.retrieval.image_encoders import load_image\nload_image(sys.argv[1], 1_000_000)")


@case
def relevance_inf(w):
    return evald(beir_jsonl(w / 'ds', ['q1\td1\tinf', 'q2\td2\t1']), w)


@case
def score_column_strings(w):
    return evald(dataset(w / 'ds', qrels={'query-id': ['q1', 'q2'], 'corpus-id': ['d1', 'd2'], 'score': ['1', 'high']}), w)


@case
def queries_missing_query_column(w):
    return evald(dataset(w / 'ds', queries={'query-id': ['q1', 'q2'], 'question': ['apples', 'rockets']}), w)


@case
def image_column_strings(w):
    import pyarrow as pa
    return evald(dataset(w / 'ds', corpus={'corpus-id': ['d1', 'd2'], 'text': ['a', 'b'], 'image': ['x.png', 'y.png']},
                         types={'image': pa.string()}), w, content='both')


@case
def corpus_id_list_column(w):
    return evald(dataset(w / 'ds', corpus={'corpus-id': [['d1'], ['d2']], 'text': ['a', 'b'], 'image': [None, None]}), w)


@case
def qrels_dict_unknown_doc(w):
    return evald(beir_jsonl(w / 'ds', ['q1\td1\t1', 'q2\tnope\t1']), w)


@case
def relevance_zero_only(w):
    return evald(beir_jsonl(w / 'ds', ['q1\td1\t1', 'q2\td2\t0']), w)


@case
def export_stale_shard(w):
    code = textwrap.dedent("""
        import sys
        from pathlib import Path
        from docbench_nb.records import Query
        from docbench_nb.evaluation.export import export_beir, import_beir, write_config
        out = Path(sys.argv[1])
        pages = [{'corpus-id': f'd{i}', 'doc-id': 'p', 'page': i, 'image': None, 'text': f'page {i}', 'render_path': None, 'method': 'x'} for i in range(10)]
        qs = [Query('q1', 'page 1', ['p'])]
        export_beir(out, [{**pages[1], 'corpus-id': 'old'}], qs, {'q1': {'old': 1}}, jsonl=False, **({'force': True} if 'force' in export_beir.__code__.co_varnames else {}))
        (out / 'corpus' / 'test-00000-of-00001.parquet').rename(out / 'corpus' / 'test-00001-of-00002.parquet')
        (out / 'corpus' / 'test-00001-of-00002.parquet').rename(out / 'corpus' / 'test-00000-of-00002.parquet')
        try: export_beir(out, pages, qs, {'q1': {'d1': 1}}, jsonl=False)
        except OSError as e:                                           # after the fix: refused, then written with force=True
            print('refused:', e); export_beir(out, pages, qs, {'q1': {'d1': 1}}, jsonl=False, force=True)
        units, q, info = import_beir(out)
        print('read back', len(units), 'documents of 10 written')
    """)
    return run([w / 'out'], w, code)


def main():
    out = Path(sys.argv[1]); only = sys.argv[2:] or list(CASES)
    res = json.loads(out.read_text()) if out.exists() else {}
    for name in only:
        with tempfile.TemporaryDirectory() as t:
            t0 = time.time()
            try: r = CASES[name](Path(t))
            except Exception as e: r = {'harness_error': f'{type(e).__name__}: {e}'}
            r['wall_s'] = round(time.time() - t0, 1)
        res[name] = r
        print(name, json.dumps(r, ensure_ascii=False)[:600], flush=True)
        out.write_text(json.dumps(res, indent=1, ensure_ascii=False))


if __name__ == '__main__': main()
