"""DenseIndex search speed against the reference libraries, same process, same data.

    python bench/bench_index.py                          # 200 queries x 50k units x 384-d (default)
    python bench/bench_index.py --queries 1000 --units 100000

Prints best-of-`--repeats` wall times and ratios for
  faiss FlatIP      faiss.IndexFlatIP.search, top-`unit_k` units (unit level, no document pooling) — the reference
  numpy matmul      Q @ V.T alone, and + argpartition top-`unit_k` units (unit level)
  DenseIndex numpy  exact document top-k with max over units (what docbench runs; backend='auto')
  DenseIndex faiss  exact document top-k via faiss with unit_k doubling
and checks that the two DenseIndex backends return the same rankings.
"""
import argparse, os, time
import numpy as np


def best_time(fn, repeats):
    out, best = None, float('inf')
    for _ in range(repeats):
        t = time.perf_counter(); out = fn(); best = min(best, time.perf_counter() - t)
    return best, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--queries', type=int, default=200); ap.add_argument('--units', type=int, default=50_000)
    ap.add_argument('--dim', type=int, default=384); ap.add_argument('--k', type=int, default=10)
    ap.add_argument('--max-units-per-doc', type=int, default=40); ap.add_argument('--repeats', type=int, default=3)
    ap.add_argument('--seed', type=int, default=0)
    a = ap.parse_args()
    import faiss
    from docbench_nb.records import Unit
    from docbench_nb.retrieval.text_retrievers import DenseIndex

    rng = np.random.default_rng(a.seed)
    counts = []
    while sum(counts) < a.units: counts.append(int(rng.integers(1, a.max_units_per_doc + 1)))
    counts[-1] -= sum(counts) - a.units
    units = [Unit(f"d{d}", f"d{d}#{i}") for d, c in enumerate(counts) for i in range(c)]
    V = rng.standard_normal((a.units, a.dim), dtype=np.float32); V /= np.linalg.norm(V, axis=1, keepdims=True)
    Q = rng.standard_normal((a.queries, a.dim), dtype=np.float32); Q /= np.linalg.norm(Q, axis=1, keepdims=True)
    qids = [f"q{i}" for i in range(a.queries)]
    unit_k = max(100, 20 * a.k)
    print(f"{a.queries} queries x {a.units} units ({len(counts)} docs, 1-{a.max_units_per_doc} units/doc) x {a.dim}-d, k={a.k}; "
          f"faiss {faiss.__version__} threads={faiss.omp_get_max_threads()}, numpy {np.__version__}, "
          f"OPENBLAS_CORETYPE={os.environ.get('OPENBLAS_CORETYPE', '(unset)')}, cpus={os.cpu_count()}")

    flat = faiss.IndexFlatIP(a.dim); flat.add(V)
    t_faiss, _ = best_time(lambda: flat.search(Q, unit_k), a.repeats)

    def np_topk():
        S = Q @ V.T
        return np.argpartition(-S, unit_k - 1, axis=1)[:, :unit_k]
    t_np, _ = best_time(np_topk, a.repeats)
    t_mm, _ = best_time(lambda: Q @ V.T, a.repeats)

    ix_np = DenseIndex(a.dim, 'auto').add(units, V); len(ix_np)
    ix_fa = DenseIndex(a.dim, 'faiss').add(units, V); len(ix_fa); ix_fa._faiss_index()
    t_ixnp, r_np = best_time(lambda: ix_np.search(qids, Q, k=a.k), a.repeats)
    t_ixfa, r_fa = best_time(lambda: ix_fa.search(qids, Q, k=a.k), a.repeats)
    same = sum(r_np.ranking(q) == r_fa.ranking(q) for q in qids)

    rows = [('faiss FlatIP (units, reference)', t_faiss), ('numpy matmul only (all unit scores)', t_mm),
            ('numpy matmul+argpartition (units)', t_np),
            (f"DenseIndex numpy [auto={ix_np.backend}] (exact docs)", t_ixnp), ('DenseIndex faiss (exact docs)', t_ixfa)]
    for name, t in rows:
        print(f"  {name:45s} {t:7.3f} s   {a.queries / t:8.0f} q/s   ratio vs faiss FlatIP: {t / t_faiss:5.2f}x")
    print(f"ratio DenseIndex(numpy)/faiss FlatIP = {t_ixnp / t_faiss:.2f}  (<1 means docbench's exact doc search is faster "
          f"than faiss' unit search alone)")
    print(f"ratio DenseIndex(faiss)/DenseIndex(numpy) = {t_ixfa / t_ixnp:.2f}")
    print(f"rankings identical between DenseIndex backends: {same}/{a.queries} queries")


if __name__ == '__main__':
    main()
