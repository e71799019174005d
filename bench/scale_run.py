"""Whole-run scale: `docbench evaluate` (BM25 or dense on `text`) end to end over N papers, from a cold cache.

    python bench/scale_run.py [--sizes 100,1000,10000] [--retriever bm25] [--workdir /tmp/docbench-scale] \
        [--out results/scale] [--workers N] [--chunk-size N] [--distinct-units]

The corpus of size N is the shared papers replicated under new ids (`{id}-r{i}`), each copy with one changed byte
(a trailing `% replica i` line in every .tex file), so nothing is a cache hit: every copy is read, parsed,
chunked, indexed. Only the TeX-ish files are copied (.tex .bib .bbl .sty .cls .bst): the `text` representation
reads nothing else. `--distinct-units` (for dense runs) also starts every paragraph of a replica with its tag
(`r{i}`), so that no text unit of a replica equals one of its original: embeddings are cached per unit text, and
a trailing line alone would make every other unit of a copy a cache hit. The dev queries (gold = the original papers, which are always in the corpus) are the queries.
`--stream` runs `docbench evaluate --stream` (a batch of papers at a time through unit shards on disk); `--warm`
reruns each size at once on its warm cache (every shard and index loaded); `--drop-after` removes a size's corpus
and cache once measured, for disk. Each size runs in a fresh process under `/usr/bin/time -v` (peak RSS) with a fresh cache folder; the per-stage
seconds come from the result's `timings`. The child gets OMP_NUM_THREADS from the environment, 1 when unset (right
for BM25, whose worker processes use the cores); a dense run wants the torch threads on every core:

    OMP_NUM_THREADS=2 python bench/scale_run.py --sizes 1000 --retriever dense --chunk-size 512 --distinct-units

Writes `--out/scale_{name}.json` and `scale_{name}.png` ({name}: the retriever, plus `_c{chunk}` and `_distinct` when given)
(wall and per-stage seconds and peak memory against N).
"""
import argparse, json, os, shutil, subprocess, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / 'shared'
TEXISH = {'.tex', '.bib', '.bbl', '.sty', '.cls', '.bst', '.clo', '.def', '.cfg'}


def build_corpus(n: int, dest: Path, distinct_units: bool = False) -> Path:
    "A corpus folder of `n` papers: the shared originals first, then replicas `{id}-r{i}` with a changed byte."
    src = SHARED / 'corpus' / 'papers'
    originals = sorted(p for p in src.iterdir() if p.is_dir())
    if dest.exists() and len(list(dest.iterdir())) == n: return dest
    shutil.rmtree(dest, ignore_errors=True); dest.mkdir(parents=True)
    for j in range(n):
        orig = originals[j % len(originals)]; rep = j // len(originals)
        out = dest / (orig.name if rep == 0 else f'{orig.name}-r{rep}')
        for f in orig.rglob('*'):
            if not f.is_file() or f.suffix.lower() not in TEXISH: continue
            t = out / f.relative_to(orig); t.parent.mkdir(parents=True, exist_ok=True)
            data = f.read_bytes()
            if rep and f.suffix.lower() == '.tex':
                data += f'\n% replica {rep}\n'.encode()
                if distinct_units: data = data.replace(b'\n\n', f'\n\nr{rep} '.encode())
            t.write_bytes(data)
    return dest


def run_size(n: int, args, warm: bool = False) -> dict:
    work = Path(args.workdir)
    tag = '_distinct' if args.distinct_units else ''
    corpus = build_corpus(n, work / f'corpus_{n}{tag}', args.distinct_units)
    name = _name(args)
    cache = work / f'cache_{n}_{name}'
    if not warm: shutil.rmtree(cache, ignore_errors=True)
    out = work / f'result_{n}_{name}{"_warm" if warm else ""}.json'
    for f in (out, Path(f'{out}.run'), Path(f'{out}.qrels')): f.unlink(missing_ok=True)      # this run's, not an earlier one's
    cmd = ['/usr/bin/time', '-v', str(ROOT / '.venv' / 'bin' / 'docbench'), '--cache-dir', str(cache), 'evaluate',
           '--corpus', str(corpus), '--queries', str(SHARED / 'queries' / 'dev.jsonl'), '--retriever', args.retriever,
           '--out', str(out)]
    if args.workers: cmd[4:4] = ['--workers', str(args.workers)]
    if args.chunk_size: cmd += ['--chunk-size', str(args.chunk_size)]
    if args.stream: cmd += ['--stream']
    t0 = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, 'OMP_NUM_THREADS': os.environ.get('OMP_NUM_THREADS', '1')})
    wall = time.time() - t0
    if r.returncode != 0: raise SystemExit(f'size {n}: docbench evaluate failed (rc {r.returncode}):\n{r.stderr[-3000:]}')
    rss = next(int(l.split(':')[1]) for l in r.stderr.splitlines() if 'Maximum resident set size' in l) / 1024
    res = json.loads(out.read_text())
    row = {'papers': n, 'run': 'warm' if warm else 'cold', 'stream': args.stream, 'wall_s': round(wall, 1), 'peak_rss_mb': round(rss), 'ndcg@10': res['overall'].get('ndcg@10'),
           'chunk_size': res.get('config', {}).get('chunk_size'), 'distinct_units': args.distinct_units,
           'n_units': res.get('config', {}).get('n_units') or res.get('n_units'), 'cores': os.cpu_count(),
           **{k: round(v, 1) for k, v in res.get('timings', {}).items() if isinstance(v, (int, float))}}
    if row.get('n_units') and row.get('index_s'): row['index_units_per_s'] = round(row['n_units'] / row['index_s'], 1)
    row['torch_threads'] = int(os.environ.get('OMP_NUM_THREADS', '1'))
    row['index_bytes'] = res.get('index_bytes')
    row['cache_gb'] = round(sum(f.stat().st_size for f in cache.rglob('*') if f.is_file()) / 1e9, 2)
    if args.drop_after and not (args.warm and not warm): shutil.rmtree(cache, ignore_errors=True); shutil.rmtree(corpus, ignore_errors=True)
    print(json.dumps(row), flush=True)
    return row


def _name(args) -> str:
    "File stem of a run: the retriever, plus the chunk size and unit variation when not the default."
    return (args.retriever.replace(':', '_') + (f'_c{args.chunk_size}' if args.chunk_size else '')
            + ('_distinct' if args.distinct_units else '') + ('_stream' if args.stream else ''))


def plot(rows, path, retriever):
    import matplotlib; matplotlib.use('Agg'); import matplotlib.pyplot as plt
    ns = [r['papers'] for r in rows]
    fig, (a, b) = plt.subplots(1, 2, figsize=(10, 4))
    a.plot(ns, [r['wall_s'] for r in rows], 'o-', label='wall')
    for k in sorted({k for r in rows for k in r if k.endswith('_s') and k != 'wall_s' and any(x.get(k) for x in rows)}):
        a.plot(ns, [r.get(k, 0) for r in rows], '.--', label=k[:-2])
    a.axhline(900, color='grey', lw=0.8, ls=':'); a.text(ns[0], 960, 'goal for 10,000 papers: 15 min', fontsize=7, color='grey')
    a.set(xscale='log', yscale='log', xlabel='papers', ylabel='seconds', title=f'{retriever}: seconds by stage (2 cores)'); a.legend(fontsize=8)
    b.plot(ns, [r['peak_rss_mb'] for r in rows], 'o-'); b.set(xscale='log', xlabel='papers', ylabel='MB', title='peak RSS')
    fig.tight_layout(); fig.savefig(path, dpi=120)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--sizes', default='100,1000,10000'); ap.add_argument('--retriever', default='bm25')
    ap.add_argument('--workdir', default='/tmp/docbench-scale'); ap.add_argument('--out', default=str(ROOT / 'results' / 'scale'))
    ap.add_argument('--workers', type=int, default=None, help='passed to docbench when the CLI has --workers')
    ap.add_argument('--chunk-size', type=int, default=None, help='passed to docbench evaluate (default: its own)')
    ap.add_argument('--distinct-units', action='store_true', help='tag every paragraph of a replica (no unit-level cache hit)')
    ap.add_argument('--stream', action='store_true', help='docbench evaluate --stream (unit shards on disk, flat memory)')
    ap.add_argument('--warm', action='store_true', help='rerun each size at once on its warm cache (a second row, run=warm)')
    ap.add_argument('--drop-after', action='store_true', help='remove each size\'s corpus and cache once measured (disk)')
    ap.add_argument('--plot-only', action='store_true', help='redraw the plot from --out/scale_{name}.json')
    args = ap.parse_args()
    name = _name(args)
    if args.plot_only:
        out = Path(args.out); plot(json.loads((out / f'scale_{name}.json').read_text()), out / f'scale_{name}.png', args.retriever); return
    if not (SHARED / 'corpus' / 'papers').is_dir(): raise SystemExit(f'needs the shared corpus at {SHARED}')
    out = Path(args.out); out.mkdir(parents=True, exist_ok=True)
    rows = []
    for n in args.sizes.split(','):
        rows.append(run_size(int(n), args))
        if args.warm: rows.append(run_size(int(n), args, warm=True))
        (out / f'scale_{name}.json').write_text(json.dumps(rows, indent=1) + '\n')      # after every size: a long run keeps what it measured
    rows_cold = [r for r in rows if r.get('run') != 'warm']
    plot(rows_cold, out / f'scale_{name}.png', args.retriever)


if __name__ == '__main__':
    main()
