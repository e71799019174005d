"""Speed, memory and float detection of `docbench_nb.latex.parse` on a corpus, against pylatexenc in the same process.

    python bench/bench_parse.py [PAPERS_DIR] [--limit N]

PAPERS_DIR defaults to ../shared/corpus/papers. Every paper is flattened once (not timed); then, on the same
flattened texts, we time (1) `parse_text` (our scanner: cleaning + floats + refs + spans), (2) pylatexenc's
`LatexNodes2Text().latex_to_text` (text only, the reference), and (3) pylatexenc's `LatexWalker` node tree, from
which we count figure/table environments it finds, to compare detection with ours. Peak memory of our parse is
measured with tracemalloc in a separate pass; whole-process peak RSS is printed at the end.
"""
import argparse, re, resource, sys, time, tracemalloc, warnings
from pathlib import Path

from docbench_nb.latex.sources import iter_sources, load_source
from docbench_nb.latex.flatten import flatten_latex
from docbench_nb.latex.parse import parse_text

FLOAT_ENVS = {'figure', 'figure*', 'wrapfigure', 'SCfigure', 'sidewaysfigure', 'table', 'table*', 'deluxetable',
              'deluxetable*', 'longtable', 'sidewaystable', 'wraptable'}

def count_pylatexenc_floats(nodes):
    from pylatexenc.latexwalker import LatexEnvironmentNode, LatexGroupNode, LatexMacroNode
    n, stack = 0, list(nodes or [])
    while stack:
        x = stack.pop()
        if x is None: continue
        if isinstance(x, LatexEnvironmentNode):
            n += x.envname in FLOAT_ENVS
            stack.extend(x.nodelist or [])
        elif isinstance(x, LatexGroupNode): stack.extend(x.nodelist or [])
        elif isinstance(x, LatexMacroNode) and x.nodeargd is not None:
            stack.extend(a for a in (x.nodeargd.argnlist or []) if a is not None)
    return n

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('papers', nargs='?', default=str(Path(__file__).resolve().parents[2] / 'shared' / 'corpus' / 'papers'))
    ap.add_argument('--limit', type=int, default=0)
    ap.add_argument('--cache', default='/tmp/docbench-bench-cache')
    a = ap.parse_args()
    srcs = iter_sources(a.papers)[:a.limit or None]
    flat = []
    for s in srcs:
        try:
            t = load_source(s, cache_dir=a.cache)
            fl = flatten_latex(t.root, id=t.id)
            flat.append((t, fl))
        except Exception as e: print(f'skip {s}: {e}', file=sys.stderr)
    mb = sum(len(fl.text) for _, fl in flat) / 1e6
    print(f'{len(flat)} papers, {mb:.1f} M chars of flattened LaTeX')

    t0 = time.perf_counter(); ours = []
    for t, fl in flat:
        ours.append(parse_text(fl.text, id=t.id, root=t.root, main_file=fl.main_file, strip=False))
    t_ours = time.perf_counter() - t0

    from pylatexenc.latex2text import LatexNodes2Text
    from pylatexenc.latexwalker import LatexWalker
    l2t, t_ref, ref_fail = LatexNodes2Text(), 0.0, 0
    for _, fl in flat:
        t0 = time.perf_counter()
        try:
            with warnings.catch_warnings():
                warnings.simplefilter('ignore'); l2t.latex_to_text(fl.text)
        except Exception: ref_fail += 1
        t_ref += time.perf_counter() - t0
    t_walk, walk_fail, py_floats = 0.0, 0, 0
    for _, fl in flat:
        t0 = time.perf_counter()
        try:
            nodes, _, _ = LatexWalker(fl.text, tolerant_parsing=True).get_latex_nodes()
            py_floats += count_pylatexenc_floats(nodes)
        except Exception: walk_fail += 1
        t_walk += time.perf_counter() - t0

    tracemalloc.start()
    for t, fl in flat[:min(len(flat), 20)]:
        parse_text(fl.text, id=t.id, root=t.root, main_file=fl.main_file, strip=False)
    peak = tracemalloc.get_traced_memory()[1] / 1e6
    tracemalloc.stop()

    want = sum(len(re.findall(r'\\begin\s*\{(' + '|'.join(map(re.escape, FLOAT_ENVS)) + r')\}', fl.text)) for _, fl in flat)
    got = sum(len(p.figures) + len([x for x in p.tables if x.env != 'tabular']) for p in ours)
    n = len(flat)
    print(f'docbench parse_text          : {t_ours:7.2f} s  {n / t_ours:7.1f} papers/s  {mb / t_ours:6.2f} M chars/s')
    print(f'pylatexenc LatexNodes2Text   : {t_ref:7.2f} s  {n / t_ref:7.1f} papers/s  ({ref_fail} failures; text only, no structure)')
    print(f'pylatexenc LatexWalker nodes : {t_walk:7.2f} s  {n / t_walk:7.1f} papers/s  ({walk_fail} failures)')
    print(f'ratio: pylatexenc LatexNodes2Text time / docbench parse time = {t_ref / t_ours:.2f}x')
    print(f'ratio: pylatexenc LatexWalker time / docbench parse time = {t_walk / t_ours:.2f}x')
    print(f'float environments (regex count over whole flattened texts, incl. preamble/verbatim): {want}; '
          f'docbench found {got}; pylatexenc tree holds {py_floats}')
    print(f'peak traced memory of parse_text over {min(n, 20)} papers: {peak:.1f} MB; '
          f'process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB')

if __name__ == '__main__': main()
