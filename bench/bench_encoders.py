"""HFTextEncoder vs sentence-transformers on the same passages, same process, same model (bundled MiniLM).

    python bench/bench_encoders.py                  # 200 passages of ~200 words
    python bench/bench_encoders.py --n 100 --words 100

Passages are 200-word windows of the shared papers' LaTeX sources when ../shared is present (read only, never
stored), else synthetic text. Prints passages/s for both, their ratio, and the largest vector difference.
"""
import argparse, time
from pathlib import Path
import numpy as np

SHARED = Path(__file__).resolve().parents[2] / 'shared' / 'corpus' / 'papers'


def passages(n, words):
    out = []
    if SHARED.is_dir():
        for tex in sorted(SHARED.glob('*/**/*.tex')):
            w = tex.read_text(errors='ignore').split()
            out += [' '.join(w[i:i + words]) for i in range(0, len(w) - words, words * 7)]
            if len(out) >= n: return out[:n], f"windows of {SHARED}"
    rng = np.random.default_rng(0)
    vocab = [f"term{i}" for i in range(3000)] + 'the of a in we model data results method show'.split()
    out += [' '.join(rng.choice(vocab, words)) for _ in range(n - len(out))]
    return out[:n], 'synthetic text'


def best_time(fn, repeats):
    best, out = float('inf'), None
    for _ in range(repeats):
        t = time.perf_counter(); out = fn(); best = min(best, time.perf_counter() - t)
    return best, out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--n', type=int, default=200); ap.add_argument('--words', type=int, default=200)
    ap.add_argument('--batch-size', type=int, default=32); ap.add_argument('--repeats', type=int, default=2)
    a = ap.parse_args()
    import torch
    from sentence_transformers import SentenceTransformer
    from docbench_nb.retrieval.encoders import HFTextEncoder, default_text_model_path
    from docbench_nb.context import RunContext
    texts, src = passages(a.n, a.words)
    ours = HFTextEncoder(ctx=RunContext(device='cpu'))
    st = SentenceTransformer(default_text_model_path(), device='cpu')
    print(f"{len(texts)} passages x {a.words} words ({src}); batch {a.batch_size}; torch threads {torch.get_num_threads()}")
    ours.encode_units(texts[:8]); st.encode(texts[:8])                        # warm-up
    t_st, v_st = best_time(lambda: st.encode(texts, batch_size=a.batch_size, normalize_embeddings=True, convert_to_numpy=True), a.repeats)
    t_us, v_us = best_time(lambda: ours.encode_units(texts, batch_size=a.batch_size), a.repeats)
    print(f"  sentence-transformers  {t_st:7.2f} s  {len(texts) / t_st:6.1f} passages/s")
    print(f"  HFTextEncoder          {t_us:7.2f} s  {len(texts) / t_us:6.1f} passages/s")
    print(f"ratio HFTextEncoder/sentence-transformers time = {t_us / t_st:.2f}   max |diff| = {np.abs(v_us - v_st).max():.2e}")


if __name__ == '__main__':
    main()
