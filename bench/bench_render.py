"""Rendering and figure-conversion throughput on a corpus of LaTeX papers (default: ../shared/corpus/papers).

    python bench/bench_render.py [--corpus DIR] [--procs 2] [--timeout 120] [--max-pixels 1000000] [--limit N]
                                 [--json out.json]

Per paper (2 worker processes by default, fresh cache so nothing is reused):
  * render_paper: real sandboxed compile, else the same compile with a repaired preamble (missing packages
    removed, missing class replaced by article), else the minimal-template fallback; records which path it took,
    pages, seconds, the first warning, the repairs and why repairing stopped;
  * rasterization alone: pdftoppm on the resulting PDF again into an empty cache (pages/second);
  * every figure file the parsed paper references: convert_figure at --max-pixels, success by format.
Prints the compile success rate (compiled / repaired / fallback / failed; "own LaTeX" = compiled + repaired), end-to-end and rasterization pages per second,
and figure-conversion success by format with the reasons for failures. There is no reference library for
LaTeX rendering to compare against in-process; the numbers are absolute (wall-clock on this machine).
"""
import argparse, json, os, re, sys, time, tempfile, collections
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path


def load_paper(src):
    "Parse with docbench_nb.latex.parse when it exists; else a Paper from the flattened source (text = raw LaTeX body)."
    try:
        from docbench_nb.latex.parse import parse_paper
        return parse_paper(src), 'parse'
    except ImportError:
        from docbench_nb.latex.flatten import flatten_latex
        from docbench_nb.records import Paper, Figure
        f = flatten_latex(src)
        imgs = []
        for m in re.finditer(r'\\includegraphics\s*(?:\[[^\]]*\])?\s*\{([^}]*)\}', f.text):
            from docbench_nb.latex.sources import resolve_name
            rel, _ = resolve_name(src, os.path.dirname(f.main_file), m.group(1).strip(),
                                  exts=('.pdf', '.png', '.jpg', '.jpeg', '.eps', '.ps', '.gif', '.tif', '.tiff'))
            if rel: imgs.append(rel)
        return Paper(id=Path(src).name, root=str(src), main_file=f.main_file, text=f.text,
                     figures=[Figure(images=imgs)]), 'latex-fallback'


def work(src, max_pixels, timeout, cache):
    from docbench_nb.pages.render import render_paper, render_pages
    from docbench_nb.pages.assets import convert_figure, AssetError, sniff_format, extension_format
    out = {'id': Path(src).name}
    try: paper, how = load_paper(src)
    except Exception as e:
        out.update(path='parse-error', error=f'{type(e).__name__}: {e}'[:300]); return out
    if not hasattr(paper, 'text'):
        out.update(path='parse-error', error=str(paper)[:300]); return out
    out['parser'] = how
    t0 = time.time()
    r = render_paper(paper, max_pixels=max_pixels, cache_dir=cache, timeout=timeout)
    out.update(path=r.path, pages=len(r.pages), seconds=round(time.time() - t0, 2), warning=(r.warnings or [''])[0][:200],
               repairs=list(getattr(r, 'repairs', [])),
               repair_stop=next((w[len('repair stopped: '):][:300] for w in r.warnings if w.startswith('repair stopped: ')), ''))
    if r.pdf:
        t1 = time.time()
        with tempfile.TemporaryDirectory() as td:
            n = len(render_pages(r.pdf, max_pixels=max_pixels, cache_dir=td, timeout=timeout))
        out['raster_pages'], out['raster_seconds'] = n, round(time.time() - t1, 3)
    figs = []
    root = Path(paper.root)
    for rel in dict.fromkeys(x for f in paper.figures for x in f.images):
        p = root / rel
        fmt = (sniff_format(p) if p.is_file() else None) or extension_format(p) or Path(rel).suffix.lower() or '?'
        t1 = time.time()
        try: convert_figure(p, max_pixels=max_pixels, cache_dir=cache); ok, why = True, ''
        except AssetError as e: ok, why = False, e.reason[:120]
        except Exception as e: ok, why = False, f'{type(e).__name__}: {e}'[:120]
        figs.append({'file': rel, 'ext': Path(rel).suffix.lower(), 'format': fmt, 'ok': ok, 'why': why,
                     'seconds': round(time.time() - t1, 3)})
    out['figures'] = figs
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--corpus', default=str(Path(__file__).resolve().parents[2] / 'shared' / 'corpus' / 'papers'))
    ap.add_argument('--procs', type=int, default=2); ap.add_argument('--timeout', type=float, default=120)
    ap.add_argument('--max-pixels', type=int, default=1_000_000); ap.add_argument('--limit', type=int, default=None)
    ap.add_argument('--json', default=None, help='write per-paper results here')
    a = ap.parse_args()
    papers = sorted(str(p) for p in Path(a.corpus).iterdir() if p.is_dir())[:a.limit]
    cache = tempfile.mkdtemp(prefix='bench-render-')
    print(f'{len(papers)} papers, {a.procs} processes, timeout {a.timeout:g}s, max_pixels {a.max_pixels:,}, cache {cache}', flush=True)
    t0, results = time.time(), []
    with ProcessPoolExecutor(a.procs) as ex:
        futs = {ex.submit(work, p, a.max_pixels, a.timeout, cache): p for p in papers}
        for f in as_completed(futs):
            r = f.result(); results.append(r)
            nf = len(r.get('figures', [])); okf = sum(x['ok'] for x in r.get('figures', []))
            note = ('; '.join(x.split(' (')[0] for x in r['repairs']) if r.get('repairs') else
                    'repair stopped: ' + r['repair_stop'] if r.get('repair_stop') else r.get('warning', r.get('error', '')))
            print(f"{r['id'][:40]:40s} {r['path']:9s} pages={r.get('pages', 0):3d} {r.get('seconds', 0):6.1f}s "
                  f"figs={okf}/{nf}  {note[:110]}", flush=True)
    wall = time.time() - t0
    results.sort(key=lambda r: r['id'])
    paths = collections.Counter(r['path'] for r in results)
    n = len(results)
    print(f'\n== compile paths over {n} papers (wall {wall:.0f}s with {a.procs} processes)')
    for k in ('compiled', 'repaired', 'fallback', 'failed', 'parse-error'):
        print(f'  {k:12s} {paths.get(k, 0):3d}  ({100 * paths.get(k, 0) / max(n, 1):.1f}%)')
    own = paths.get('compiled', 0) + paths.get('repaired', 0)
    print(f'  own LaTeX    {own:3d}  ({100 * own / max(n, 1):.1f}%)  (compiled + repaired)')
    pages = sum(r.get('pages', 0) for r in results)
    cpu_render = sum(r.get('seconds', 0) for r in results)
    print(f'  pages rendered {pages}; end-to-end (compile+rasterize) {pages / max(cpu_render, 1e-9):.2f} pages/s per process, '
          f'{pages / wall:.2f} pages/s wall')
    for k in ('compiled', 'repaired', 'fallback'):
        sel = [r for r in results if r['path'] == k]
        if sel: print(f'  {k}: median {sorted(r["seconds"] for r in sel)[len(sel) // 2]:.1f}s/paper, '
                      f'{sum(r["pages"] for r in sel)} pages')
    rp = sum(r.get('raster_pages', 0) for r in results); rs = sum(r.get('raster_seconds', 0) for r in results)
    print(f'  rasterization only (pdftoppm + budget check): {rp} pages in {rs:.1f}s = {rp / max(rs, 1e-9):.2f} pages/s per process')
    reasons = collections.Counter(re.sub(r"`[^']*'", '`X\'', r.get('warning', ''))[:80] for r in results if r['path'] not in ('compiled', 'repaired'))
    print('  why the real compile failed (top):')
    for w, c in reasons.most_common(8): print(f'    {c:3d}  {w}')
    missing = collections.Counter(m for r in results for m in re.findall(r"File `([^']+)' not found", r.get('warning', '')))
    if missing: print('  missing files (first compile):', ', '.join(f'{k} ({v})' for k, v in missing.most_common(15)))
    rep_kinds = collections.Counter(re.sub(r'\s*\(.*', '', re.sub(r'(package|class) \S+', r'\1 X', x)) for r in results for x in r.get('repairs', []))
    if rep_kinds: print('  repairs applied:', ', '.join(f'{k} ({v})' for k, v in rep_kinds.most_common(8)))
    stops = [r for r in results if r.get('repair_stop')]
    if stops:
        print('  why repairing stopped (papers left on the fallback):')
        for r in stops: print(f"    {r['id'][:32]:32s} {r['repair_stop'][:150]}")

    figs = [f for r in results for f in r.get('figures', [])]
    print(f'\n== figure conversion over {len(figs)} referenced figure files (max_pixels {a.max_pixels:,})')
    by = collections.defaultdict(list)
    for f in figs: by[f['format']].append(f)
    for fmt, fs in sorted(by.items(), key=lambda kv: -len(kv[1])):
        ok = sum(f['ok'] for f in fs); secs = sum(f['seconds'] for f in fs)
        print(f'  {fmt:8s} {ok:4d}/{len(fs):<4d} ({100 * ok / len(fs):5.1f}%)  {secs / len(fs):.3f}s/file')
    if figs:
        ok = sum(f['ok'] for f in figs); print(f'  all      {ok:4d}/{len(figs):<4d} ({100 * ok / len(figs):5.1f}%)')
    why = collections.Counter(f"{f['format']}: {f['why'][:70]}" for f in figs if not f['ok'])
    for w, c in why.most_common(10): print(f'    {c:3d}  {w}')
    if a.json:
        Path(a.json).write_text(json.dumps({'wall_seconds': wall, 'results': results}, indent=1))


if __name__ == '__main__':
    main()
