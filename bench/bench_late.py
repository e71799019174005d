"""Exact MaxSim scoring speed: docbench's blocked numpy `LateInteractionIndex` vs the padded-tensor torch scorer used by
ColPali-style code (`einsum` over queries x docs x tokens, max over doc tokens, sum over query tokens), same data, same process.

    python bench/bench_late.py [--units 2000] [--tokens 200] [--dim 128] [--queries 64] [--qtokens 24]

Prints seconds per query for both, the ratio, the largest score difference, and the index bytes (float32 / float16).
Token counts per unit are drawn uniformly from [tokens/2, tokens], so the torch scorer pays for padding as real code does.

    python bench/bench_late.py --memory [--units 4000 --tokens 200 --dim 384 --dtype float16]

`--memory`: peak RSS of building the index the way `LateRetriever.index` does (float32 matrices arriving in chunks of
`late._INDEX_CHUNK` units, stored in `dtype`): without a token cache (`add` + `_finalize`, a preallocated merge), with one
(the chunks go to an on-disk `TokenCache`, then `fill` copies them into one preallocated matrix), and the first
version (whole float32 list, cast copy, concatenated copy), each in a fresh subprocess; then search ms/query of the in-memory index, the same index
memory-mapped from disk, and a single-vector `DenseIndex` (mean-pooled token vectors) over the same units.
"""
import argparse, json, resource, subprocess, sys, tempfile, time
import numpy as np
import torch
from docbench_nb.records import Unit
from docbench_nb.retrieval.late import LateInteractionIndex

def torch_reference(qs, mats, batch=256):
    "ColPali-style: pad docs to (n, max_len, dim) per batch, einsum, mask padding, max over doc tokens, sum over query tokens."
    Q = torch.nn.utils.rnn.pad_sequence([torch.from_numpy(q) for q in qs], batch_first=True)   # zero query rows add 0
    out = torch.empty(len(qs), len(mats))
    for s in range(0, len(mats), batch):
        chunk = mats[s:s + batch]
        D = torch.nn.utils.rnn.pad_sequence([torch.from_numpy(m) for m in chunk], batch_first=True)
        pad = torch.arange(D.shape[1])[None, :] >= torch.tensor([len(m) for m in chunk])[:, None]    # (n, max_len)
        sim = torch.einsum('qtd,nsd->qnts', Q, D).masked_fill(pad[None, :, None, :], float('-inf'))
        out[:, s:s + batch] = sim.max(dim=3).values.sum(dim=2)
    return out.numpy()

def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--units', type=int, default=2000); ap.add_argument('--tokens', type=int, default=200)
    ap.add_argument('--dim', type=int, default=128); ap.add_argument('--queries', type=int, default=64)
    ap.add_argument('--qtokens', type=int, default=24)
    a = ap.parse_args()
    rng = np.random.default_rng(0)
    def unit_rows(n): x = rng.standard_normal((n, a.dim)).astype(np.float32); return x / np.linalg.norm(x, axis=1, keepdims=True)
    mats = [unit_rows(int(rng.integers(a.tokens // 2, a.tokens + 1))) for _ in range(a.units)]
    qs = [unit_rows(a.qtokens) for _ in range(a.queries)]
    units = [Unit(f"d{i // 3}", f"u{i}") for i in range(a.units)]
    ix = LateInteractionIndex(a.dim).add(units, mats); ix._finalize()
    t0 = time.perf_counter(); ours = ix.unit_scores(qs); t_ours = time.perf_counter() - t0
    t0 = time.perf_counter(); ref = torch_reference(qs, mats); t_ref = time.perf_counter() - t0
    print(f"{a.units} units, {ix.n_tokens} tokens x {a.dim} d; {a.queries} queries x {a.qtokens} tokens; torch threads={torch.get_num_threads()}")
    print(f"docbench numpy blocked : {t_ours / a.queries * 1000:8.2f} ms/query")
    print(f"torch padded einsum    : {t_ref / a.queries * 1000:8.2f} ms/query")
    print(f"speed ratio (torch / docbench): {t_ref / t_ours:.2f}x   max |score diff|: {np.abs(ours - ref.T).max():.2e}")
    print(f"index bytes: float32 {ix.index_bytes / 2**20:.1f} MiB, float16 {ix.index_bytes / 2**21:.1f} MiB, "
          f"single-vector equivalent {a.units * a.dim * 4 / 2**20:.2f} MiB")

def _mats(seed, n_units, tokens, dim, start=0, stop=None):
    "Deterministic random unit token matrices [start, stop) (each unit from its own seed: any chunking gives the same)."
    out = []
    for i in range(start, n_units if stop is None else stop):
        r = np.random.default_rng((seed, i))
        x = r.standard_normal((int(r.integers(tokens // 2, tokens + 1)), dim)).astype(np.float32)
        out.append(x / np.linalg.norm(x, axis=1, keepdims=True))
    return out

def _build_child(a):
    "Runs in a subprocess: build one way, report peak RSS above the baseline and the index bytes."
    import docbench_nb.retrieval.late as late
    base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    units = [Unit(f"d{i // 3}", f"u{i}") for i in range(a.units)]
    if a.child == 'old':                               # the previous path: all float32 matrices, a cast list, a concat
        mats = _mats(0, a.units, a.tokens, a.dim)
        cast = [m.astype(a.dtype) for m in mats]
        tokens = np.ascontiguousarray(np.concatenate(cast).astype(a.dtype, copy=False)); nbytes = tokens.nbytes
    elif a.child == 'fill':                            # LateRetriever.index with a token cache: embed into the cache, then fill
        cache = late.TokenCache(tempfile.mkdtemp(prefix='bench-late-tokens-'))
        lengths, C = [], late._INDEX_CHUNK
        for s in range(0, a.units, C):
            ms = _mats(0, a.units, a.tokens, a.dim, s, min(a.units, s + C))
            cache.put('fp', [u.unit_id for u in units[s:s + C]], ms); lengths += [len(m) for m in ms]; del ms
        def fetch(s, e):
            got = cache.lookup('fp', [u.unit_id for u in units[s:e]]); return [got[u.unit_id] for u in units[s:e]]
        ix = LateInteractionIndex(a.dim, a.dtype).fill(units, lengths, fetch); nbytes = ix.index_bytes
    else:                                              # LateRetriever.index without a cache: chunks + preallocated merge
        ix = LateInteractionIndex(a.dim, a.dtype)
        for s in range(0, a.units, late._INDEX_CHUNK):
            ix.add(units[s:s + late._INDEX_CHUNK], _mats(0, a.units, a.tokens, a.dim, s, min(a.units, s + late._INDEX_CHUNK)))
        ix._finalize(); nbytes = ix.index_bytes
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(dict(base_mb=base / 1024, peak_mb=peak / 1024, index_mb=nbytes / 2**20)))

def memory_bench(a):
    from docbench_nb.retrieval.unit_index import DenseIndex
    res = {}
    for way in ('old', 'new', 'fill'):
        cmd = [sys.executable, __file__, '--child', way, '--units', str(a.units), '--tokens', str(a.tokens),
               '--dim', str(a.dim), '--dtype', a.dtype]
        res[way] = json.loads(subprocess.run(cmd, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1])
    print(f"{a.units} units x {a.tokens // 2}-{a.tokens} tokens x {a.dim} d, {a.dtype}; index {res['new']['index_mb']:.0f} MiB")
    for way, label in (('old', 'previous build (list+cast+concat)'), ('new', 'chunked build, preallocated merge'),
                       ('fill', 'from the token cache, one-pass fill')):
        r = res[way]
        print(f"  {label:36s} peak RSS {r['peak_mb']:7.0f} MiB (baseline {r['base_mb']:.0f}; +{r['peak_mb'] - r['base_mb']:.0f} MiB "
              f"= {(r['peak_mb'] - r['base_mb']) / r['index_mb']:.1f}x the index)")
    units = [Unit(f"d{i // 3}", f"u{i}") for i in range(a.units)]
    mats = _mats(0, a.units, a.tokens, a.dim)
    ix = LateInteractionIndex(a.dim, a.dtype).add(units, mats); ix._finalize()
    dense = DenseIndex(a.dim).add(units, np.stack([m.mean(0) for m in mats]))
    del mats
    rng = np.random.default_rng(1)
    qs = [x / np.linalg.norm(x, axis=1, keepdims=True) for x in (rng.standard_normal((a.qtokens, a.dim)).astype(np.float32) for _ in range(a.queries))]
    qids = [f"q{i}" for i in range(a.queries)]
    with tempfile.TemporaryDirectory() as d:
        ix.save(d); mm = LateInteractionIndex.load(d, mmap=True)
        times = {}
        for name, fn in (('late, in memory', lambda: ix.search(qids, qs, k=10)), ('late, memory-mapped', lambda: mm.search(qids, qs, k=10)),
                         ('single-vector DenseIndex', lambda: dense.search(qids, np.stack([q.mean(0) for q in qs]), k=10))):
            fn(); t = time.perf_counter(); run = fn(); times[name] = (time.perf_counter() - t) / a.queries
            if name == 'late, in memory': ref = run
            if name == 'late, memory-mapped': assert all(run.ranking(q) == ref.ranking(q) for q in qids)
        del mm
    for name, t in times.items():
        print(f"  search {name:26s} {t * 1e3:8.2f} ms/query  ({t / times['single-vector DenseIndex']:.0f}x single-vector)")

if __name__ == '__main__':
    if '--memory' in sys.argv or '--child' in sys.argv:
        ap = argparse.ArgumentParser(); ap.add_argument('--memory', action='store_true'); ap.add_argument('--child', default=None)
        ap.add_argument('--units', type=int, default=4000); ap.add_argument('--tokens', type=int, default=200)
        ap.add_argument('--dim', type=int, default=384); ap.add_argument('--dtype', default='float16')
        ap.add_argument('--queries', type=int, default=32); ap.add_argument('--qtokens', type=int, default=24)
        a = ap.parse_args()
        _build_child(a) if a.child else memory_bench(a)
    else: main()
