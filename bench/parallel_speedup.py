"""All cores locally: the same stage on 1 worker and on every core, same inputs, cold caches, results compared.

    OMP_NUM_THREADS=1 python bench/parallel_speedup.py [--papers 80] [--render 8] [--out results/scale/parallel.md]

Stages: parse (`load_papers`, the shared papers), represent (`text`, 512 MiniLM tokens, chunking), and rendering
(`pages`: the authors' LaTeX compiled in the sandbox and rasterized, `--render` papers, 2 pages each). Each stage runs
with `workers=1` and `workers=os.cpu_count()` on a fresh cache; the outputs must be identical (papers' JSON, units,
page images' bytes). Prints seconds and the speed-up, and writes a small Markdown table.
"""
import argparse, hashlib, os, tempfile, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / 'shared' / 'corpus' / 'papers'


def timed(fn):
    t = time.time(); out = fn(); return out, time.time() - t


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--papers', type=int, default=80); ap.add_argument('--render', type=int, default=8)
    ap.add_argument('--out', default=str(ROOT / 'results' / 'scale' / 'parallel.md'))
    a = ap.parse_args()
    from docbench_nb.latex.corpus import load_papers
    from docbench_nb.retrieval.represent import represent
    from docbench_nb.retrieval.chunking import default_tokenizer
    import docbench_nb.retrieval.visual_units  # registers pages
    srcs = sorted(p for p in SHARED.iterdir() if p.is_dir())[:a.papers]
    n, rows = os.cpu_count() or 1, []
    strip = lambda p: {k: v for k, v in p.to_dict().items() if k not in ('meta', 'root')}

    runs = {w: timed(lambda: load_papers(srcs, cache_dir=tempfile.mkdtemp(), workers=w, progress=False)) for w in (1, n)}
    assert [strip(p) for p in runs[1][0][0]] == [strip(p) for p in runs[n][0][0]], 'parallel parse differs from serial'
    papers = runs[1][0][0]
    rows.append(('parse', f'{len(srcs)} papers', runs[1][1], runs[n][1]))

    tok = default_tokenizer()
    reps = {w: timed(lambda: represent(papers, 'text', tok, 512, workers=w)) for w in (1, n)}
    assert [u.to_dict() for u in reps[1][0].units] == [u.to_dict() for u in reps[n][0].units], 'parallel represent differs'
    rows.append(('represent text (512 tokens)', f'{len(reps[1][0].units)} units', reps[1][1], reps[n][1]))

    sub = papers[:a.render]
    pages = {w: timed(lambda: represent(sub, 'pages', tok, 512, workers=w, cache_dir=tempfile.mkdtemp(), max_pages=2))
             for w in (1, n)}
    digest = lambda r: [hashlib.sha256(Path(i).read_bytes()).hexdigest() for u in r.units for i in u.images]
    assert digest(pages[1][0]) == digest(pages[n][0]), 'parallel rendering gives other page images'
    rows.append(('render pages (sandboxed LaTeX, 2 pages/paper)', f'{len(sub)} papers, {len(pages[1][0].units)} pages',
                 pages[1][1], pages[n][1]))

    lines = [f'Command: `OMP_NUM_THREADS=1 python bench/parallel_speedup.py --papers {a.papers} --render {a.render}` '
             f'({n} cores; cold caches; outputs identical between 1 and {n} workers).', '',
             f'| stage | work | 1 worker s | {n} workers s | speed-up |', '|---|---|---|---|---|']
    for stage, work, s1, sn in rows: lines.append(f'| {stage} | {work} | {s1:.1f} | {sn:.1f} | {s1 / sn:.2f}x |')
    print('\n'.join(lines))
    Path(a.out).parent.mkdir(parents=True, exist_ok=True); Path(a.out).write_text('\n'.join(lines) + '\n')


if __name__ == '__main__':
    main()
