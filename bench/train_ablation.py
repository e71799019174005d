"""REAL-MM-RAG's fine-tuning ablation on the shared corpus: base MiniLM vs LLM-free in-domain pairs vs dev-query pairs
with and without their rephrasings vs both, evaluated on the held-out half of the dev queries (split by query group).

    OMP_NUM_THREADS=2 python bench/train_ablation.py [--per-paper 8] [--max-length 128] [--out results/train]
    OMP_NUM_THREADS=2 python bench/train_ablation.py --kind late --mixes base,llm-free-queries-rephrased --out results/train_late

Writes results/train/ablation.json, one result JSON per mix and results/train/ablation.md."""
import argparse, json, sys, time
from pathlib import Path
from docbench_nb.training.finetune import ablation, MIXES

ROOT = Path(__file__).resolve().parents[1]

def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--corpus', default=str(ROOT.parent / 'shared' / 'corpus' / 'papers'))
    ap.add_argument('--queries', default=str(ROOT.parent / 'shared' / 'queries' / 'dev.jsonl'))
    ap.add_argument('--out', default=str(ROOT / 'results' / 'train'))
    ap.add_argument('--mixes', default=None); ap.add_argument('--llm', default=None); ap.add_argument('--chunk-size', type=int, default=512)
    ap.add_argument('--per-paper', type=int, default=8); ap.add_argument('--max-length', type=int, default=128)
    ap.add_argument('--batch-size', type=int, default=32); ap.add_argument('--cache-dir', default=None)
    ap.add_argument('--kind', default='dense', choices=['dense', 'late'], help='retriever to fine-tune')
    a = ap.parse_args(argv)
    t0 = time.time()
    rows = ablation(a.corpus, a.queries, a.out, mixes=a.mixes.split(',') if a.mixes else None, kind=a.kind, llm=a.llm, chunk_size=a.chunk_size, cache_dir=a.cache_dir,
                    progress=False, per_paper=a.per_paper, max_length=a.max_length, batch_size=a.batch_size)
    cols = ['mix', 'n_pairs', 'train_s', 'peak_rss_mb', 'L0', 'L1', 'L2', 'L3', 'type=figure', 'type=table', 'type=text', 'robust@10',
            'p_L0', 'p_L1', 'p_L2', 'p_L3']
    fmt = lambda v: '—' if v is None else (f'{v:.3f}' if isinstance(v, float) else str(v))
    lines = [f"Fine-tuning ablation (MiniLM, {a.kind}, chunk {a.chunk_size}; LLM-free pairs {a.per_paper}/paper; max length "
             f"{a.max_length}; 1 epoch, batch {a.batch_size}); held-out dev queries; wall {time.time() - t0:.0f} s. "
             f"`p_Lk`: paired randomization p vs base at level k.", '',
             '| ' + ' | '.join(cols) + ' |', '|' + '---|' * len(cols)]
    lines += ['| ' + ' | '.join(fmt(r.get(c)) for c in cols) + ' |' for r in rows]
    Path(a.out, f'ablation_{a.kind}.md' if a.kind != 'dense' else 'ablation.md').write_text('\n'.join(lines) + '\n'); print('\n'.join(lines))
    return 0

if __name__ == '__main__': sys.exit(main())
