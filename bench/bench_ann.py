"""Approximate dense search (faiss HNSW / IVF through `DenseIndex(index=...)`) against exact search, same process.

    OMP_NUM_THREADS=1 python bench/bench_ann.py --n 200000 --out results/bench/ann.md

Vectors: the real all-MiniLM-L6-v2 embeddings in the local embedding cache (chunks of the shared papers and queries,
read with the cache's checksum check), tiled to `--n` 384-d units with small Gaussian noise and re-normalised
(4 units per document). Queries: `--queries` cached vectors with larger noise. For each index: build seconds, recall@10
of the top-10 *documents* against the exact numpy search (the default), ms per query and the speed-up over exact.
Peak RSS is printed at the end (goal < 4 GB).
"""
import argparse, os, resource, time
from pathlib import Path
import numpy as np


def cached_vectors():
    from docbench_nb.cache import stage_dir, load_npy_checked
    root = stage_dir('embeddings')
    fps = sorted(p for p in root.glob('all-MiniLM-L6-v2-*') if p.is_dir())
    vs = [load_npy_checked(f, what='embedding cache shard') for fp in fps for f in sorted(fp.glob('*.vecs.npy'))]
    vs = [v for v in vs if v is not None and v.ndim == 2 and v.shape[1] == 384]
    if not vs: raise SystemExit(f"no cached MiniLM vectors under {root}: run a dense evaluation first")
    return np.unique(np.concatenate(vs).astype(np.float32), axis=0), root


def unit_norm(x): return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--n', type=int, default=200_000); ap.add_argument('--queries', type=int, default=200)
    ap.add_argument('--noise', type=float, default=0.02); ap.add_argument('--qnoise', type=float, default=0.05)
    ap.add_argument('--out', default=None)
    a = ap.parse_args()
    from docbench_nb.records import Unit
    from docbench_nb.retrieval.unit_index import DenseIndex
    real, root = cached_vectors()
    rng = np.random.default_rng(0)
    base = real[rng.integers(0, len(real), a.n)]
    V = unit_norm(base + a.noise * rng.standard_normal(base.shape, dtype=np.float32))
    del base
    Q = unit_norm(real[rng.integers(0, len(real), a.queries)] + a.qnoise * rng.standard_normal((a.queries, 384), dtype=np.float32))
    units = [Unit(f"d{i // 4}", f"d{i // 4}#{i % 4}") for i in range(a.n)]
    qids = [f"q{i}" for i in range(a.queries)]
    head = (f"{a.n} units x 384 (tiled from {len(real)} distinct cached MiniLM vectors in {root}, noise {a.noise}), "
            f"{a.n // 4} docs, {a.queries} queries (noise {a.qnoise}); OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print(head, flush=True)
    configs = [('exact', {}, [{}]), ('hnsw', dict(m=32), [dict(ef_search=64), dict(ef_search=128)]),
               ('ivf', {}, [dict(nprobe=8), dict(nprobe=32)])]
    rows, exact_top, t_exact = [], None, None
    for kind, build_kw, variants in configs:                 # one build per index; search settings varied on it
        ix = DenseIndex(384, index=kind, **build_kw).add(units, V)
        t = time.perf_counter(); ix._finalize()
        if kind != 'exact': ix._faiss_index()
        build = time.perf_counter() - t
        for kw in variants:
            if 'ef_search' in kw: ix._faiss.hnsw.efSearch = kw['ef_search']
            if 'nprobe' in kw: ix._faiss.nprobe = kw['nprobe']
            ix.search(qids[:2], Q[:2], k=10)                                          # warm-up
            t = time.perf_counter(); run = ix.search(qids, Q, k=10); tq = (time.perf_counter() - t) / a.queries
            top = {q: run.ranking(q)[:10] for q in qids}
            if exact_top is None: exact_top, t_exact = top, tq
            rec = np.mean([len(set(top[q]) & set(exact_top[q])) / 10 for q in qids])
            name = kind + ''.join(f" {k}={v}" for k, v in {**build_kw, **kw}.items())
            if kind == 'ivf': name += f" nlist={ix._faiss.nlist}"
            rows.append((name, build, rec, tq * 1e3, t_exact / tq))
            print(f"  {name:32s} build {build:7.1f} s  recall@10 {rec:.3f}  {tq * 1e3:7.2f} ms/query  x{t_exact / tq:.1f}", flush=True)
        del ix
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20
    table = ["| index | build s | recall@10 vs exact | ms/query | speed-up |", "|---|---|---|---|---|"]
    table += [f"| {n} | {b:.1f} | {r:.3f} | {t:.2f} | {s:.1f}x |" for n, b, r, t, s in rows]
    print('\n'.join(table)); print(f"peak RSS {peak:.2f} GB")
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(f"# Approximate index bench\n\n`OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '')} python bench/bench_ann.py "
                               f"--n {a.n} --queries {a.queries} --out {a.out}`\n\n{head}\n\n" + '\n'.join(table) +
                               f"\n\nexact = numpy `DenseIndex` (the default). Peak RSS {peak:.2f} GB.\n")


if __name__ == '__main__':
    main()
