"""Embedding throughput: docbench's HFTextEncoder (token-length bucketing) vs sentence-transformers, same process.

    OMP_NUM_THREADS=1 python bench/bench_embed_throughput.py --n 400 --threads 1
    python bench/bench_embed_throughput.py --n 400 --out results/bench/embed_throughput.txt

Passages are windows of 32..512 MiniLM tokens cut from the shared papers' LaTeX sources (read only, never stored):
mixed lengths, as a real chunked corpus gives. Both sides load the same MiniLM folder
(`encoders.default_text_model_path()`), use the same batch size and torch thread count, and run alternately
(best of --repeats). Prints units/s of both, the ratio, the padding each ordering implies and max |diff| of the vectors.
"""
import argparse, time
from pathlib import Path
import numpy as np

SHARED = Path(__file__).resolve().parents[2] / 'shared' / 'corpus' / 'papers'


def mixed_windows(tokenizer, n, lo, hi, seed=0):
    from docbench_nb.testing import latex_windows
    out = latex_windows(tokenizer, n, SHARED, lo, hi, seed=seed, stride=3)
    if len(out) < n: raise SystemExit(f"only {len(out)} windows found under {SHARED}")
    return out


def padded_tokens(lens, order, bs):
    return sum(max(lens[i] for i in order[s:s + bs]) * len(order[s:s + bs]) for s in range(0, len(order), bs))


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--n', type=int, default=400); ap.add_argument('--lo', type=int, default=32)
    ap.add_argument('--hi', type=int, default=512); ap.add_argument('--batch-size', type=int, default=32)
    ap.add_argument('--repeats', type=int, default=2); ap.add_argument('--threads', type=int, default=1)
    ap.add_argument('--out', default=None, help='also write the report here')
    a = ap.parse_args()
    import torch
    torch.set_num_threads(a.threads)
    from sentence_transformers import SentenceTransformer
    from docbench_nb.retrieval.encoders import HFTextEncoder, default_text_model_path
    ours = HFTextEncoder(device='cpu')
    st = SentenceTransformer(default_text_model_path(), device='cpu')
    texts = mixed_windows(ours.tokenizer, a.n, a.lo, a.hi)
    lens = [min(len(x), ours.max_length) for x in ours.tokenizer(texts, truncation=False)['input_ids']]
    by_chars = sorted(range(len(texts)), key=lambda i: -len(texts[i]))
    by_tokens = sorted(range(len(texts)), key=lambda i: -lens[i])
    pc, pt, real = padded_tokens(lens, by_chars, a.batch_size), padded_tokens(lens, by_tokens, a.batch_size), sum(lens)
    lines = [f"{len(texts)} LaTeX windows of {a.lo}-{a.hi} tokens from {SHARED} (tokens after truncation to {ours.max_length}: "
             f"min {min(lens)}, median {int(np.median(lens))}, max {max(lens)}); batch {a.batch_size}; torch threads {torch.get_num_threads()}",
             f"padded tokens: char-sorted {pc} (+{pc / real - 1:.0%} over {real} real), token-sorted {pt} (+{pt / real - 1:.0%})"]
    print('\n'.join(lines), flush=True)
    ours.encode_units(texts[:8]); st.encode(texts[:8])                                       # warm-up
    t_st = t_us = float('inf')
    for _ in range(a.repeats):                                                                # alternate: same conditions
        t = time.perf_counter(); v_st = st.encode(texts, batch_size=a.batch_size, normalize_embeddings=True, convert_to_numpy=True)
        t_st = min(t_st, time.perf_counter() - t)
        t = time.perf_counter(); v_us = ours.encode_units(texts, batch_size=a.batch_size); t_us = min(t_us, time.perf_counter() - t)
    lines += [f"  sentence-transformers  {t_st:7.2f} s  {len(texts) / t_st:6.1f} units/s",
              f"  docbench HFTextEncoder {t_us:7.2f} s  {len(texts) / t_us:6.1f} units/s",
              f"speed-up docbench/sentence-transformers = {t_st / t_us:.2f}x   max |diff| = {np.abs(v_us - v_st).max():.2e}"]
    print('\n'.join(lines[-3:]))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(f"$ OMP_NUM_THREADS={a.threads} python bench/bench_embed_throughput.py --n {a.n} --lo {a.lo} --hi {a.hi} --threads {a.threads} "
                               f"--repeats {a.repeats} --out {a.out}\n" + '\n'.join(lines) + '\n')


if __name__ == '__main__':
    main()
