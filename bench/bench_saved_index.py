"""Saved indexes: a cold build (and save) against a warm load of the same index, each in a fresh process.

    python bench/bench_saved_index.py --papers 2000 --ann-n 200000 --cache-dir /work/helpers/cache_idx \
        --out results/bench/saved_index.md

BM25: the units of the shared papers (`text` representation, chunk 512, parsed once into `--cache-dir`) replicated to
`--papers` papers under new ids, every unit of a replica starting with its tag (`r{i}`), so no replica shares a unit
text with another; the dev queries (level 0) are the queries. HNSW: `--ann-n` MiniLM vectors tiled from the local
embedding cache with noise, as `bench/bench_ann.py` makes them (m=32, ef_search=64), 4 units per document, 200 query
vectors. Each child process indexes through the store the retrievers use (`IndexStore.get_or_build`) in a folder of
saved indexes emptied before the cold run, searches every query, and reports the index step's wall time, its peak RSS
(`VmHWM`) and the RSS before it; the runs of the cold and the warm process are compared query by query (rankings
and scores must be identical). Peak RSS includes the units the child holds (the same in both runs).

    python bench/bench_saved_index.py --late --late-papers 20 --cache-dir /work/helpers/cache_idx --out results/bench/saved_index.md

`--late`: the late-interaction index (bundled MiniLM token vectors, `LateRetriever` with a `TokenCache` and an
`IndexStore`) over the units of the first `--late-papers` shared papers, in three fresh processes: cold (empty token
cache, no saved index: encode every unit, fill, save), token cache warm but no saved index (what every rerun did
before: look every unit's matrix up, fill, save), and warm (load the saved index). Its table is written as a section
of `--out`, replacing an earlier late section and keeping the rest of the file.
"""
import argparse, json, os, shutil, subprocess, sys, time
from pathlib import Path
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / 'shared'


def _status_mb(field):
    with open('/proc/self/status') as f:
        return next(int(l.split()[1]) for l in f if l.startswith(field + ':')) / 1024


def rss_mb(): return _status_mb('VmRSS')


def peak_mb():
    "This process's peak RSS (`VmHWM`: `ru_maxrss` would include the parent's RSS at the fork before exec)."
    return _status_mb('VmHWM')


def prepare_units(work: Path, cache_dir: str, papers: int) -> Path:
    "JSON lines of the replicated units (written once), and the dev queries beside them."
    out = work / f'units_{papers}.jsonl'
    if out.exists(): return out
    from docbench_nb.latex.corpus import load_papers, corpus_sources
    from docbench_nb.retrieval.represent import represent
    from docbench_nb.evaluation.formats import load_queries
    srcs = corpus_sources(SHARED / 'corpus' / 'papers')
    ps, errs = load_papers(srcs, cache_dir=cache_dir, progress=False, workers=2)
    base = represent(ps, 'text', tokenizer=None, chunk_size=512, cache_dir=cache_dir, workers=1).units
    qs = load_queries(SHARED / 'queries' / 'dev.jsonl', levels=(0,))
    (work / 'queries.jsonl').write_text(''.join(q.to_json() + '\n' for q in qs))
    n_orig = len(ps)
    with open(out, 'w') as f:
        for r in range(-(-papers // n_orig)):
            for j, p in enumerate(ps):
                if r * n_orig + j >= papers: break
                for u in (u for u in base if u.doc_id == p.id):
                    if r: u = type(u)(f'{u.doc_id}-r{r}', f'{u.unit_id}-r{r}', text=f'r{r} {u.text}', span=u.span)
                    f.write(u.to_json() + '\n')
    return out


def child_bm25(a) -> dict:
    from docbench_nb.records import Unit, Query
    from docbench_nb.retrieval.text_retrievers import BM25Retriever
    from docbench_nb.retrieval.unit_index import IndexStore
    with open(a.units) as f: units = [Unit.from_json(l) for l in f]
    qs = [Query.from_json(l) for l in Path(a.queries).read_text().splitlines()]
    r = BM25Retriever(store=IndexStore(a.store))
    before, t = rss_mb(), time.perf_counter()
    r.index(units, progress=False)
    index_s, index_peak = time.perf_counter() - t, peak_mb()
    t = time.perf_counter(); run = r.search(qs, k=10); search_s = time.perf_counter() - t
    return dict(n_units=len(units), n_docs=len({u.doc_id for u in units}), index_s=index_s, search_s=search_s,
                rss_before_mb=before, peak_index_mb=index_peak, peak_mb=peak_mb(), built=r.store.built, loaded=r.store.loaded,
                index_bytes=r.index_bytes, run={q: run.scores[q] for q in run.scores}, prov=run.provenance)


def ann_vectors(n: int, nq: int):
    "Tiled cached MiniLM vectors, as bench_ann.py makes them (seed 0)."
    sys.path.insert(0, str(ROOT / 'bench'))
    from bench_ann import cached_vectors, unit_norm
    real, _ = cached_vectors()
    rng = np.random.default_rng(0)
    base = real[rng.integers(0, len(real), n)]
    V = unit_norm(base + 0.02 * rng.standard_normal(base.shape, dtype=np.float32))
    Q = unit_norm(real[rng.integers(0, len(real), nq)] + 0.05 * rng.standard_normal((nq, 384), dtype=np.float32))
    return V, Q


def child_ann(a) -> dict:
    from docbench_nb.records import Unit
    from docbench_nb.retrieval.unit_index import IndexStore, DenseIndex
    units = [Unit(f"d{i // 4}", f"d{i // 4}#{i % 4}") for i in range(a.ann_n)]
    ann = dict(index='hnsw', m=32, ef_search=64)
    store = IndexStore(a.store)
    key = store.key('dense', dict(dim=384, ann=ann, bench='tiled-minilm', seed=0), units)
    before, t = rss_mb(), time.perf_counter()
    ix = store.get_or_build('dense', key, lambda: DenseIndex(384, **ann).add(units, ann_vectors(a.ann_n, 0)[0]),
                            lambda ix, d: ix.save_arrays(d), lambda d: DenseIndex.open_saved(d, units, 384, **ann))
    index_s, index_peak = time.perf_counter() - t, peak_mb()
    Q = ann_vectors(2000, 200)[1]                # query vectors only (a small tiling: same seed, cheap)
    qids = [f"q{i}" for i in range(len(Q))]
    t = time.perf_counter(); run = ix.search(qids, Q, k=10); search_s = time.perf_counter() - t
    return dict(n_units=a.ann_n, index_s=index_s, search_s=search_s, rss_before_mb=before, peak_index_mb=index_peak,
                peak_mb=peak_mb(), built=store.built, loaded=store.loaded, index_bytes=ix.index_bytes,
                run={q: run.scores[q] for q in run.scores}, prov=run.provenance)


def child_late(a) -> dict:
    from docbench_nb.records import Unit, Query
    from docbench_nb.retrieval.late import LateRetriever, TokenCache, HFTokenEncoder
    from docbench_nb.retrieval.unit_index import IndexStore
    with open(a.units) as f: units = [Unit.from_json(l) for l in f]
    qs = [Query.from_json(l) for l in Path(a.queries).read_text().splitlines()]
    r = LateRetriever(HFTokenEncoder(), cache=TokenCache(a.tokens), store=IndexStore(a.store))
    before, t = rss_mb(), time.perf_counter()
    r.index(units, progress=False)
    index_s, index_peak = time.perf_counter() - t, peak_mb()
    embedded, hits = r.cache.embedded, r.cache.hits                     # the index step's own (queries come after)
    t = time.perf_counter(); run = r.search(qs, k=10); search_s = time.perf_counter() - t
    return dict(n_units=len(units), n_docs=len({u.doc_id for u in units}), n_tokens=r._index.n_tokens, index_s=index_s,
                search_s=search_s, rss_before_mb=before, peak_index_mb=index_peak, peak_mb=peak_mb(), built=r.store.built,
                loaded=r.store.loaded, embedded=embedded, cache_hits=hits, index_bytes=r.index_bytes,
                mmap=type(r._index.tokens).__name__, run={q: run.scores[q] for q in run.scores}, prov=run.provenance)


def run_child(kind: str, a, store=None, **extra) -> dict:
    cmd = [sys.executable, __file__, '--child', kind, '--store', str(store or a.store_dir / kind)] + sum(([f'--{k}', str(v)] for k, v in extra.items()), [])
    t = time.time()
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, 'OMP_NUM_THREADS': os.environ.get('OMP_NUM_THREADS', '1')})
    if r.returncode: raise SystemExit(f"{kind} child failed:\n{r.stderr[-3000:]}")
    d = json.loads(r.stdout.strip().splitlines()[-1]); d['process_s'] = time.time() - t
    return d


NOTES = """
Index step: `index()` (BM25: tokenize, build, save; warm: key the units, verify every saved file's sha256, open
memory-mapped) or `get_or_build` (HNSW: the cold step also makes the tiled vectors, which a warm run never needs, as a
real warm run embeds nothing). Process s: the whole child, reading the units (BM25: 82k units from JSON lines) and
searching included. A saved HNSW index holds the vectors twice (`vectors.npy` for exact unit scores, and in `ann.faiss`),
both memory-mapped on load (faiss `IO_FLAG_MMAP_IFC`).
"""


def du(p: Path) -> int: return sum(f.stat().st_size for f in p.rglob('*') if f.is_file())


def main_late(a, work: Path):
    "Cold, token-cache-warm and saved-index-warm late index steps; a section of `--out`."
    units = prepare_units(work, a.cache_dir, a.late_papers)
    late_dir = work / 'late'; shutil.rmtree(late_dir, ignore_errors=True)
    extra = dict(units=units, queries=work / 'queries.jsonl', tokens=late_dir / 'tokens')
    cold = run_child('late', a, store=late_dir / 'indexes', **extra)
    tok_warm = run_child('late', a, store=late_dir / 'indexes-2', **extra)          # a new store: the token cache only
    warm = run_child('late', a, store=late_dir / 'indexes', **extra)
    assert (cold['built'], tok_warm['built'], warm['built'], warm['loaded']) == (1, 1, 0, 1)
    assert cold['embedded'] > 0
    assert (tok_warm['embedded'], warm['embedded'], warm['cache_hits']) == (0, 0, 0)
    same = all(d['run'] == cold['run'] and d['prov'] == cold['prov'] for d in (tok_warm, warm))
    rows = []
    for name, d in (('cold: encode, fill, save', cold), ('token cache warm, no saved index: look up, fill, save', tok_warm),
                    ('warm: load the saved index', warm)):
        rows.append(f"| {name} | {d['n_units']} | {d['n_tokens']} | {d['index_s']:.2f} | {d['process_s']:.1f} | {d['rss_before_mb']:.0f} | "
                    f"{d['peak_index_mb']:.0f} | {d['peak_index_mb'] - d['rss_before_mb']:.0f} |")
        print(rows[-1], flush=True)
    cmd = (f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')} python bench/bench_saved_index.py --late --late-papers {a.late_papers}"
           + (f" --cache-dir {a.cache_dir}" if a.cache_dir else '') + (f" --out {a.out}" if a.out else ''))
    text = (f"{LATE_HEAD}\n\n`{cmd}`\n\n{os.cpu_count()} cores (shared with other work). Units of the first {a.late_papers} shared "
            f"papers (`text`, chunk 512): {cold['n_units']} units of {cold['n_docs']} papers, {cold['n_tokens']:,} token vectors "
            f"(bundled MiniLM, 384-d float32), {len(cold['run'])} dev queries (level 0). Each row is a fresh process; the MiniLM "
            f"load comes before the index step (the warm run still needs the model for the queries).\n\n"
            "| run | units | tokens | index step s | process s | RSS before MB | peak RSS MB | index step MB |\n"
            "|---|---|---|---|---|---|---|---|\n" + '\n'.join(rows) + '\n\n'
            f"- warm/cold index step {warm['index_s'] / cold['index_s']:.4f}x; warm/token-cache-warm {warm['index_s'] / tok_warm['index_s']:.3f}x\n"
            f"- index_bytes {cold['index_bytes'] / 1e6:.1f} MB; saved on disk {du(late_dir / 'indexes') / 1e6:.1f} MB (`tokens.npy`, "
            f"`offsets.npy`, `manifest.json`); the warm index's token matrix is a `{warm['mmap']}`\n"
            f"- units encoded: cold {cold['embedded']}, token-cache warm {tok_warm['embedded']} ({tok_warm['cache_hits']} cache hits), "
            f"saved-index warm {warm['embedded']} ({warm['cache_hits']} cache hits: the token cache is not read)\n"
            f"- {len(cold['run'])} queries, per-query rankings, scores and provenance {'identical' if same else 'DIFFERENT'} in the three runs\n"
            "\nIndex step: `LateRetriever.index()`; warm, it keys the units (sha256 of ids, documents, texts and the encoder's "
            "fingerprint), verifies each saved file's sha256 and memory-maps `tokens.npy`. Peak RSS is the process's high-water mark "
            "after the index step (model included).\n")
    print(text)
    if not same: raise SystemExit('late runs differ')
    if a.out:
        out = Path(a.out); old = out.read_text() if out.exists() else ''
        old = old.split(LATE_HEAD)[0].rstrip('\n')
        out.parent.mkdir(parents=True, exist_ok=True); out.write_text((old + '\n\n' if old else '') + text)


LATE_HEAD = '## Late interaction: cold build vs warm load'


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--papers', type=int, default=2000); ap.add_argument('--ann-n', type=int, default=200_000)
    ap.add_argument('--cache-dir', default=None); ap.add_argument('--workdir', default='/tmp/docbench-saved-index')
    ap.add_argument('--out', default=None); ap.add_argument('--skip-ann', action='store_true')
    ap.add_argument('--child', default=None); ap.add_argument('--store', default=None)
    ap.add_argument('--units', default=None); ap.add_argument('--queries', default=None)
    ap.add_argument('--late', action='store_true', help='measure the late-interaction index only (a section of --out)')
    ap.add_argument('--late-papers', type=int, default=20); ap.add_argument('--tokens', default=None)
    a = ap.parse_args()
    if a.child:
        print(json.dumps({'bm25': child_bm25, 'ann': child_ann, 'late': child_late}[a.child](a))); return
    work = Path(a.workdir); work.mkdir(parents=True, exist_ok=True)
    if a.late: return main_late(a, work)
    a.store_dir = work / 'indexes'
    shutil.rmtree(a.store_dir, ignore_errors=True)          # cold: no saved index
    rows, notes = [], []
    units = prepare_units(work, a.cache_dir, a.papers)
    jobs = [('bm25', f'BM25, {a.papers} papers', dict(units=units, queries=work / 'queries.jsonl'))]
    if not a.skip_ann: jobs.append(('ann', f'faiss HNSW m=32, {a.ann_n} vectors', {'ann-n': a.ann_n}))
    for kind, label, extra in jobs:
        cold = run_child(kind, a, **extra)
        warm = run_child(kind, a, **extra)
        same = cold['run'] == warm['run'] and cold['prov'] == warm['prov']
        assert (cold['built'], cold['loaded'], warm['built'], warm['loaded']) == (1, 0, 0, 1), (cold['built'], warm['loaded'])
        disk = du(a.store_dir / kind) / 1e6
        for name, d in (('cold build + save', cold), ('warm load', warm)):
            rows.append(f"| {label} | {name} | {d['n_units']} | {d['index_s']:.1f} | {d['process_s']:.1f} | {d['rss_before_mb']:.0f} | "
                        f"{d['peak_index_mb']:.0f} | {d['peak_index_mb'] - d['rss_before_mb']:.0f} |")
        notes.append(f"{label}: warm/cold index time {warm['index_s'] / cold['index_s']:.3f}x, index-step memory "
                     f"(peak - RSS before) {warm['peak_index_mb'] - warm['rss_before_mb']:.0f} vs "
                     f"{cold['peak_index_mb'] - cold['rss_before_mb']:.0f} MB; saved on disk {disk:.0f} MB; index_bytes "
                     f"{cold['index_bytes'] / 1e6:.0f} MB; {len(cold['run'])} queries, per-query rankings and scores "
                     f"{'identical' if same else 'DIFFERENT'} (cold vs warm)")
        print(rows[-2]); print(rows[-1]); print(notes[-1], flush=True)
        if not same: raise SystemExit('cold and warm runs differ')
    table = ["| index | run | units | index step s | process s | RSS before MB | peak RSS MB | index step MB |",
             "|---|---|---|---|---|---|---|---|"] + rows
    cmd = f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '1')} python bench/bench_saved_index.py --papers {a.papers} " + \
          (f"--skip-ann" if a.skip_ann else f"--ann-n {a.ann_n}") + (f" --cache-dir {a.cache_dir}" if a.cache_dir else '') + \
          (f" --out {a.out}" if a.out else '')
    text = (f"# Saved indexes: cold build vs warm load\n\n`{cmd}`\n\n{os.cpu_count()} cores (shared with other work). Each row "
            f"is a fresh process; the warm one finds the index the cold one saved (`IndexStore`, checksums verified on "
            f"load) and builds nothing.\n\n" + '\n'.join(table) + '\n\n' + '\n'.join(f'- {n}' for n in notes) + '\n' + NOTES)
    print(text)
    if a.out:
        out = Path(a.out); old = out.read_text() if out.exists() else ''
        late = (LATE_HEAD + old.split(LATE_HEAD, 1)[1]) if LATE_HEAD in old else ''     # keep the late section of a --late run
        out.parent.mkdir(parents=True, exist_ok=True); out.write_text(text + ('\n' + late if late else ''))


if __name__ == '__main__':
    main()
