"""Sharded export: a config is written as it is produced into Parquet shards of bounded size, named and listed as the
Hub does (`corpus/test-00000-of-0000n.parquet`); `datasets.load_dataset` (offline) and docbench's `import_beir` read
them back to exactly what a single-file export holds."""
import json
import numpy as np
import pytest
from pathlib import Path
from PIL import Image
from docbench_nb.records import Query, Paper
from docbench_nb.evaluation import export as ex
from docbench_nb.evaluation.export import export_beir, import_beir, add_export_parsers, MAX_SHARD_BYTES

N_PAGES, BOUND = 24, 60_000


@pytest.fixture(scope='module')
def pages(tmp_path_factory):
    "24 pages of 4 papers, each with a noise PNG of ~12 kB (incompressible, so shard sizes follow the images)."
    d, rng, out = tmp_path_factory.mktemp('png'), np.random.default_rng(0), []
    for i in range(N_PAGES):
        f = d / f'p{i}.png'
        Image.fromarray(rng.integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(f)
        doc = f'paper{i % 4}'
        out.append({'corpus-id': f'{doc}#p{i // 4 + 1}', 'doc-id': doc, 'page': i // 4 + 1, 'image': str(f),
                    'text': f'page {i} of {doc}: ' + ' '.join(f'w{(i * 7 + j) % 50}' for j in range(30)), 'render_path': str(d), 'method': 'synctex'})
    return out


def dataset(pages):
    qs = [Query(f'q{i}', f'w{i} w{i + 1}', [f'paper{i % 4}'], 'text', i % 3, f'g{i // 3}') for i in range(12)]
    qrels = {q.id: {pages[(i * 5) % N_PAGES]['corpus-id']: 1 + i % 2, pages[(i * 5 + 1) % N_PAGES]['corpus-id']: 0} for i, q in enumerate(qs)}
    papers = [Paper(f'paper{j}', f'Title {j}', f'full text of paper {j} ' * 40) for j in range(4)]
    return qs, qrels, papers


@pytest.fixture(scope='module')
def exports(pages, tmp_path_factory):
    "The same dataset exported into one file per config and into shards of at most 60 kB (pages handed over as a generator)."
    qs, qrels, papers = dataset(pages)
    root = tmp_path_factory.mktemp('exports')
    one = export_beir(root / 'one', pages, qs, qrels, papers, max_shard_bytes=None)
    seen = []                                      # shards already on disk each time a page is handed over
    def stream():
        for r in pages:
            seen.append(len(list((root / 'sharded' / 'corpus').glob('.test-*.parquet.tmp'))))
            yield r
    sharded = export_beir(root / 'sharded', stream(), qs, qrels, papers, max_shard_bytes=BOUND)
    return root, one, sharded, seen


def test_shards_are_bounded_named_and_written_as_pages_come(exports):
    root, one, sharded, seen = exports
    n = sharded['shards']['corpus']
    assert one['shards'] == {c: 1 for c in one['shards']} and n >= 4              # 24 pages of ~12 kB in 60 kB shards
    files = sorted((root / 'sharded' / 'corpus').iterdir())
    assert [f.name for f in files] == [f'test-{i:05d}-of-{n:05d}.parquet' for i in range(n)]        # no temporary file left
    footer = lambda f: int.from_bytes(f.read_bytes()[-8:-4], 'little') + 8
    assert all(f.stat().st_size - footer(f) <= BOUND for f in files), [(f.stat().st_size, footer(f)) for f in files]
    assert max(seen) >= n - 1 and seen[0] == 0                                      # streamed: shards were on disk before the last page came
    card = (root / 'sharded' / 'README.md').read_text()
    assert all(f'          - corpus/{f.name}' in card for f in files)
    assert {k: v for k, v in sharded.items() if k not in ('out', 'shards')} == {k: v for k, v in one.items() if k not in ('out', 'shards')}


def test_datasets_loads_the_shards_offline_as_the_single_file(exports, monkeypatch):
    datasets = pytest.importorskip('datasets')
    monkeypatch.setattr(datasets.config, 'HF_HUB_OFFLINE', True)
    monkeypatch.setenv('HF_HUB_OFFLINE', '1'); monkeypatch.setenv('HF_DATASETS_OFFLINE', '1')
    root, one, sharded, _ = exports
    for config in ('corpus', 'queries', 'qrels', 'qrels-paper', 'papers'):
        a = datasets.load_dataset(str(root / 'one'), config, split='test', cache_dir=str(root / 'hf-cache'))
        b = datasets.load_dataset(str(root / 'sharded'), config, split='test', cache_dir=str(root / 'hf-cache'))
        if config == 'corpus':
            assert b.features['image'] == datasets.Image() and b[5]['image'].size == (64, 64)
            a, b = a.cast_column('image', datasets.Image(decode=False)), b.cast_column('image', datasets.Image(decode=False))
        assert b.num_rows == a.num_rows > 0 and b.to_dict() == a.to_dict(), config


def test_import_beir_reads_the_shards_as_the_single_file(exports, tmp_path):
    root, one, sharded, _ = exports
    for level in ('page', 'paper'):
        u1, q1, i1 = import_beir(root / 'one', cache_dir=tmp_path, level=level)
        u2, q2, i2 = import_beir(root / 'sharded', cache_dir=tmp_path, level=level)
        assert [u.to_json() for u in u2] == [u.to_json() for u in u1] and len(u1) == N_PAGES
        assert [q.to_json() for q in q2] == [q.to_json() for q in q1] and len(q1) == 12
        assert {k: v for k, v in i2.items() if k != 'files'} == {k: v for k, v in i1.items() if k != 'files'}
        assert len(i2['files']['corpus']) == sharded['shards']['corpus'] and i1['files']['corpus'] == ['corpus/test-00000-of-00001.parquet']


def test_a_failure_midway_leaves_no_shard_and_no_card(pages, tmp_path):
    qs, qrels, papers = dataset(pages)
    def bad():
        yield from pages[:20]
        yield dict(pages[3])                                   # a repeated page id after several shards were written
    with pytest.raises(ValueError, match='duplicate page id'):
        export_beir(tmp_path / 'x', bad(), qs, qrels, papers, max_shard_bytes=BOUND)
    assert not [f for f in (tmp_path / 'x').rglob('*') if f.is_file()]
    with pytest.raises(ValueError, match='page qrels name 1 pages not in the corpus'):
        export_beir(tmp_path / 'y', iter(pages), qs, {**qrels, 'q0': {'nowhere#p1': 1}}, papers, max_shard_bytes=BOUND)
    assert not [f for f in (tmp_path / 'y').rglob('*') if f.is_file()]
    with pytest.raises(ValueError, match='positive integer'):
        export_beir(tmp_path / 'z', pages, qs, qrels, papers, max_shard_bytes=0)


def test_cli_max_shard_mb(tmp_path, monkeypatch):
    import argparse
    ap = argparse.ArgumentParser(); ap.add_argument('--cache-dir', default=None); ap.add_argument('-q', '--quiet', action='store_true')
    add_export_parsers(ap.add_subparsers(dest='cmd'))
    (tmp_path / 'src').mkdir(); (tmp_path / 'q.jsonl').write_text('')
    a = ap.parse_args(['export', str(tmp_path / 'src'), '--queries', str(tmp_path / 'q.jsonl'), '--out', str(tmp_path / 'o')])
    assert a.max_shard_mb * 10**6 == MAX_SHARD_BYTES == 256 * 10**6
    got = {}
    monkeypatch.setattr(ex, 'export_benchmark', lambda *a_, **kw: got.update(kw) or {'n_unplaced': 0})
    a = ap.parse_args(['export', str(tmp_path / 'src'), '--queries', str(tmp_path / 'q.jsonl'), '--out', str(tmp_path / 'o'), '--max-shard-mb', '0.5'])
    assert a.fn(a) == 0 and got['max_shard_bytes'] == 500_000
    a = ap.parse_args(['export', str(tmp_path / 'src'), '--queries', str(tmp_path / 'q.jsonl'), '--out', str(tmp_path / 'o'), '--max-shard-mb', '0'])
    with pytest.raises(ValueError, match='--max-shard-mb must be positive'): a.fn(a)
