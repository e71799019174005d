"""Differential checks: the same evaluation under transformations that must not change any per-query number.

    python bench/differential.py [--corpus ../shared/corpus/papers] [--queries ../shared/queries/dev.jsonl] [--no-ray]

Writes results/trust/differential.md (and .json): case -> identical per query? -> largest |delta|. Each case has a
test (tests/test_identity.py, tests/test_ray.py); this script runs them all on the shared corpus in one go."""
import argparse, json, random, shutil, sys, tarfile, tempfile, time, warnings
from pathlib import Path
from docbench_nb.evaluation.core import evaluate
from docbench_nb.latex.corpus import corpus_sources
from docbench_nb.latex.sources import paper_id_from_path
from docbench_nb.evaluation.reproduce import compare_per_query

ROOT = Path(__file__).resolve().parents[1]

def rows_without_gold(res):
    return [{k: v for k, v in r.items() if k != 'gold'} for r in res.per_query]

def renamed_queries(src, dst, idmap):
    out = []
    for l in Path(src).read_text().splitlines():
        if not l.strip(): continue
        q = json.loads(l)
        if 'doc_id' in q: q['doc_id'] = idmap.get(q['doc_id'], q['doc_id'])
        if 'doc_ids' in q: q['doc_ids'] = [idmap.get(d, d) for d in q['doc_ids']]
        out.append(json.dumps(q))
    Path(dst).write_text('\n'.join(out) + '\n')

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--corpus', default=str(ROOT.parent / 'shared' / 'corpus' / 'papers'))
    ap.add_argument('--queries', default=str(ROOT.parent / 'shared' / 'queries' / 'dev.jsonl'))
    ap.add_argument('--retriever', default='bm25'); ap.add_argument('--chunk-size', type=int, default=512)
    ap.add_argument('--no-ray', action='store_true'); ap.add_argument('--out', default=str(ROOT / 'results' / 'trust' / 'differential'))
    a = ap.parse_args(argv)
    tmp = Path(tempfile.mkdtemp(prefix='docbench-diff-'))
    ev = lambda corpus, queries, cache, **kw: evaluate(corpus, queries, retriever=a.retriever, chunk_size=a.chunk_size,
                                                       cache_dir=tmp / cache, progress=False, **kw)
    t0 = time.time()
    base = ev(a.corpus, a.queries, 'A')
    rows = []
    def add(case, res, note='', allowed=()):
        c = compare_per_query(rows_without_gold(base), rows_without_gold(res))
        unexpected = [q for q in c['differ'] if q not in allowed]
        rows.append({'case': case, 'queries': c['n_queries'], 'identical': c['n_identical'], 'differ': len(c['differ']),
                     'unexpected': len(unexpected), 'max_abs_diff': c['max_abs_diff'], 'note': note})
        print(rows[-1], flush=True)
    add('cold vs warm cache', ev(a.corpus, a.queries, 'A'), 'the same corpus again, every paper from the parse cache')
    srcs = corpus_sources(a.corpus); shuffled = list(srcs); random.Random(0).shuffle(shuffled)
    add('source order shuffled', ev(shuffled, a.queries, 'A'), 'sources as a shuffled list')
    add('1 vs N workers', ev(a.corpus, a.queries, 'B', workers=1), 'cold cache, one parse process (base: every core)')
    ren, idmap = tmp / 'renamed', {}
    ren.mkdir()
    for s in srcs:
        new = '2512.' + Path(s).name
        (shutil.copytree if Path(s).is_dir() else shutil.copyfile)(s, ren / new); idmap[paper_id_from_path(s)] = paper_id_from_path(ren / new)
    renamed_queries(a.queries, tmp / 'q_renamed.jsonl', idmap)
    r = ev(ren, tmp / 'q_renamed.jsonl', 'A')
    assert {d for s in r.run.scores.values() for d in s} <= set(idmap.values()), 'old ids leaked into the run'
    add('folders renamed (warm cache)', r, f'{len(idmap)} papers under new ids; the run holds only the new ids')
    arch = tmp / 'archives'; arch.mkdir()
    for s in srcs:
        if not Path(s).is_dir(): shutil.copyfile(s, arch / Path(s).name); continue
        with tarfile.open(arch / f'{Path(s).name}.tar.gz', 'w:gz') as tf:
            for f in sorted(Path(s).rglob('*')):
                if f.is_file(): tf.add(f, arcname=str(f.relative_to(s)))
    add('archive vs unpacked folder', ev(arch, a.queries, 'C'), 'every paper folder as a .tar.gz, cold cache')
    dup_src = next(s for s in srcs if Path(s).is_dir()); dup_id = paper_id_from_path(dup_src)
    shutil.copytree(dup_src, tmp / f'{dup_id}-copy')
    with warnings.catch_warnings():
        warnings.simplefilter('ignore')
        d = ev(srcs + [str(tmp / f'{dup_id}-copy')], a.queries, 'A')
    touched = {q for q, s in base.run.scores.items() if dup_id in s}
    add(f'one paper duplicated under a second id', d,
        f'{dup_id}: only the {len(touched)} queries that ranked it may change (its copy ties it)', allowed=touched)
    if not a.no_ray:
        from docbench_nb.evaluation import ray_engine
        if ray_engine.ray_available():
            r = ray_engine.evaluate_ray(a.corpus, a.queries, retriever=a.retriever, chunk_size=a.chunk_size, cache_dir=tmp / 'R',
                                        num_cpus=2, progress=False, log=lambda m: None)
            e = r.config['engine']
            add('local vs Ray engine', r, f"Ray parsed {e['parse']['parsed']}; the driver parsed {e['driver_parsed']}, embedded {e['driver_embedded']}")
    out = Path(a.out); out.parent.mkdir(parents=True, exist_ok=True)
    meta = {'corpus': a.corpus, 'queries': a.queries, 'retriever': a.retriever, 'chunk_size': a.chunk_size,
            'n_docs': base.n_docs, 'wall_s': round(time.time() - t0, 1)}
    out.with_suffix('.json').write_text(json.dumps({'meta': meta, 'rows': rows}, indent=1))
    lines = [f"Per-query differential checks: {a.retriever}, chunk {a.chunk_size}, {base.n_docs} papers, "
             f"{base.n_queries} query rows (all levels). Command: `python bench/differential.py`.", '',
             '| case | identical per query | largest \\|Δ\\| | note |', '|---|---|---:|---|']
    for r in rows:
        ok = (f"yes ({r['identical']}/{r['queries']})" if not r['differ'] else
              f"{r['identical']}/{r['queries']}; {r['differ']} differ, {r['unexpected']} unexpected")
        lines.append(f"| {r['case']} | {ok} | {r['max_abs_diff']:.3g} | {r['note']} |")
    out.with_suffix('.md').write_text('\n'.join(lines) + '\n')
    print('\n'.join(lines))
    shutil.rmtree(tmp, ignore_errors=True)
    return 0 if all(r['unexpected'] == 0 for r in rows) else 1

if __name__ == '__main__': sys.exit(main())
