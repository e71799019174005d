"""Exact MaxSim scoring speed: docbench's blocked numpy `LateInteractionIndex` vs the padded-tensor torch scorer used by
ColPali-style code (`einsum` over queries x docs x tokens, max over doc tokens, sum over query tokens), same data, same process.

    python bench/bench_late.py [--units 2000] [--tokens 200] [--dim 128] [--queries 64] [--qtokens 24]

Prints seconds per query for both, the ratio, the largest score difference, and the index bytes (float32 / float16).
Token counts per unit are drawn uniformly from [tokens/2, tokens], so the torch scorer pays for padding as real code does.
"""
import argparse, time
import numpy as np
import torch
from docbench_nb.records import Unit
from docbench_nb.late import LateInteractionIndex

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

if __name__ == '__main__': main()
