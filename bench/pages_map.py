"""Page maps over the shared corpus: how many figures, tables, equations and passages land on a page, per
render path, and whether the mapping is right, checked independently against `pdftotext -bbox` of the PDF.

    OMP_NUM_THREADS=1 python bench/pages_map.py [--papers DIR] [--queries FILE] [--out results/pages] [--limit N]

Checks (figures and tables: the caption's words; text passages: the paragraph's first 80 words; words as
`pagemap.words` splits them, distinct, at least 4):
- on page:   >= 80% of the words are in pdftotext's words of the mapped page(s);
- in box:    >= 80% of them lie inside the mapped boxes (3 pt tolerance) — stricter: on the page, *and there*;
- best page: the mapped page is the page where the most of the words are found (so not a page that merely
             shares the vocabulary).
Dev queries: the evidence placed on a page by `query_pages`, and the excerpt's words found on those pages.
Writes mapping.json (per paper and totals) and mapping.md (the tables).
"""
import argparse, json, sys, time
from collections import Counter, defaultdict
from pathlib import Path

from docbench_nb.latex.sources import iter_sources
from docbench_nb.latex.parse import parse_paper
from docbench_nb.pages.pagemap import map_paper, pdf_words, words, query_pages, clean_latex, draw_overlay

THRESH = 0.8

def _check(ws, page_map_label, pw, page_sets):
    "(on_page, in_box, best_page) for distinct words `ws` of one mapped label against `pw` = pdf_words (`page_sets`: each page's word set)."
    pages = set(page_map_label.pages)
    onp = set().union(*(page_sets.get(p, set()) for p in pages))
    frac_page = sum(w in onp for w in ws) / len(ws)
    inbox = set()
    for b in page_map_label.boxes:
        p, x0, y0, x1, y1 = b
        for w, a, c, d, e in pw.get(p, []):
            if a >= x0 - 3 and c >= y0 - 3 and d <= x1 + 3 and e <= y1 + 3: inbox.update(words(w))
    frac_box = sum(w in inbox for w in ws) / len(ws)
    cover = {p: sum(w in pset for w in ws) for p, pset in page_sets.items()}
    best = max(cover.values()) if cover else 0
    best_page = any(cover.get(p, 0) == best for p in pages) and best > 0
    return frac_page >= THRESH, frac_box >= THRESH, best_page

OVERLAY_PAPERS = ('araa-gps', '3I-ATLAS-discovery')

def overlays(papers_dir, out, ids=OVERLAY_PAPERS):
    "One overlay per paper in `ids`: the page holding the most kinds of mapped evidence (then the most elements)."
    done = []
    for pid in ids:
        pm = map_paper(parse_paper(Path(papers_dir) / pid))
        if pm.error: continue
        per = defaultdict(list)
        for l in pm.labels:
            for p in l.pages: per[p].append(l.kind)
        page = max(per, key=lambda p: (len(set(per[p])), len(per[p]), -p))
        done.append(draw_overlay(pm, page, Path(out) / f'overlay-{pid}-p{page}.png'))
        print(f'overlay {done[-1]}: {dict(Counter(per[page]))}', file=sys.stderr)
    return done

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--papers', default='/work/shared/corpus/papers')
    ap.add_argument('--queries', default='/work/shared/queries/dev.jsonl')
    ap.add_argument('--out', default='results/pages')
    ap.add_argument('--limit', type=int, default=None)
    ap.add_argument('--overlays-only', action='store_true', help='only draw the overlay pictures')
    a = ap.parse_args()
    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    if a.overlays_only: overlays(a.papers, out); return
    srcs = iter_sources(a.papers)[:a.limit]
    queries = [json.loads(l) for l in open(a.queries)] if a.queries and Path(a.queries).exists() else []
    by_doc = defaultdict(list)
    for q in queries: by_doc[q['doc_id']].append(q)
    rows, qrows, page_rows = [], [], []
    agg = defaultdict(Counter)        # (render_path, kind) -> counts
    t_all = time.time()
    for src in srcs:
        t0 = time.time()
        try: paper = parse_paper(src)
        except Exception as e: rows.append({'paper': src, 'error': f'parse: {e}'}); continue
        pm = map_paper(paper)
        if pm.error: rows.append({'paper': paper.id, 'render_path': pm.render_path, 'error': pm.error}); print(paper.id, pm.error, file=sys.stderr); continue
        pw = pdf_words(pm.pdf)
        page_sets = {p: set(t for w, *_ in ws_ for t in words(w)) for p, ws_ in pw.items()}
        row = {'paper': paper.id, 'render_path': pm.render_path, 'method': pm.method, 'pages': pm.n_pages, 'kinds': {}}
        for pg, txt in pm.page_text.items():       # per-page LaTeX text vs the words printed on the page
            lw, pwds = set(words(txt)), page_sets.get(pg, set())
            if len(lw) >= 20 and len(pwds) >= 20:
                page_rows.append({'paper': paper.id, 'page': pg, 'recall': len(lw & pwds) / len(pwds), 'precision': len(lw & pwds) / len(lw)})
        els = {'figure': paper.figures, 'table': paper.tables}
        idx = Counter()
        for l in pm.labels:
            k = l.kind; c = agg[(pm.render_path, k)]
            c['n'] += 1; c['mapped'] += bool(l.pages); c['synctex'] += l.method == 'synctex'
            c['multi_page'] += len(l.pages) > 1
            if k in els: text = els[k][idx[k]].caption
            elif k == 'text': text = ' '.join(paper.span_text(l.span).split()[:80])
            else: text = ''
            idx[k] += 1
            ws = list(dict.fromkeys(words(text)))
            if len(ws) >= 4:
                c['checkable'] += 1
                if l.pages:
                    c['checked'] += 1
                    onp, inb, best = _check(ws, l, pw, page_sets)
                    c['on_page'] += onp; c['in_box'] += inb; c['best_page'] += best
        for q in by_doc.get(paper.id, []):
            pages = query_pages(q, pm)
            ws = list(dict.fromkeys(words(clean_latex(q.get('evidence_excerpt') or ''))))
            onp = None
            if pages and len(ws) >= 4:
                found = set().union(*(page_sets.get(p, set()) for p in pages))
                onp = sum(w in found for w in ws) / len(ws) >= 0.6
            qrows.append({'id': q['id'], 'doc_id': paper.id, 'evidence_type': q.get('evidence_type'),
                          'locator': q.get('evidence_locator'), 'render_path': pm.render_path, 'pages': pages, 'excerpt_words_on_page': onp})
        row['seconds'] = round(time.time() - t0, 1)
        rows.append(row)
        print(f"{paper.id}: {pm.render_path} {pm.method} {sum(bool(l.pages) for l in pm.labels)}/{len(pm.labels)} mapped, {row['seconds']}s", file=sys.stderr, flush=True)
    # tables
    paths = ('compiled', 'repaired', 'fallback')
    md = ['# Page maps of the shared corpus', '',
          f'`OMP_NUM_THREADS=1 python bench/pages_map.py` over {len(srcs)} papers ({sum("error" in r for r in rows)} errors), '
          f'{round(time.time() - t_all)} s. Method: SyncTeX for compiled/repaired papers, pdftotext word anchors for fallback renders.', '',
          'Papers per render path: ' + ', '.join(f'{p} {sum(r.get("render_path") == p for r in rows)}' for p in paths + ('failed',)), '',
          '## Share of elements mapped to a page', '',
          'mapped: on at least one page; by SyncTeX: of those, placed by SyncTeX (the rest: caption words in pdftotext, for floats '
          'SyncTeX cannot place, e.g. moved by endfloat, and every element of a fallback render).', '',
          '| render path | kind | elements | mapped to a page | share | by SyncTeX | on >1 page |', '|---|---|---|---|---|---|---|']
    for p in paths:
        for k in ('figure', 'table', 'equation', 'text'):
            c = agg.get((p, k))
            if not c or not c['n']: continue
            md.append(f"| {p} | {k} | {c['n']} | {c['mapped']} | {c['mapped'] / c['n']:.1%} | {c['synctex']} | {c['multi_page']} |")
    md += ['', '## Precision, checked against `pdftotext -bbox` of the PDF', '',
           'Mapped figures/tables (caption words) and passages (first 80 words) with at least 4 distinct words. '
           f'on page: >= {THRESH:.0%} of the words on the mapped page(s); in box: >= {THRESH:.0%} inside the mapped boxes; '
           'best page: a mapped page is the page holding most of the words. For fallback renders the mapping itself '
           'used pdftotext words, so its check is not independent.', '',
           '| render path | kind | checked | on page | in box | best page |', '|---|---|---|---|---|---|']
    for p in paths:
        for k in ('figure', 'table', 'text'):
            c = agg.get((p, k))
            if not c or not c['checked']: continue
            n = c['checked']
            md.append(f"| {p} | {k} | {n} | {c['on_page'] / n:.1%} | {c['in_box'] / n:.1%} | {c['best_page'] / n:.1%} |")
    if page_rows:
        import statistics as S
        rc, pr = [r['recall'] for r in page_rows], [r['precision'] for r in page_rows]
        md += ['', '## Per-page LaTeX text (`PageMap.page_text`) against the words pdftotext reads off the same page', '',
               f'{len(page_rows)} pages of SyncTeX-mapped papers (pages with at least 20 distinct words either way). '
               'recall: share of the page\'s printed words that its LaTeX text holds; precision: share of the LaTeX text\'s words printed on that page.', '',
               '| pages | recall median | recall mean | precision median | precision mean |', '|---|---|---|---|---|',
               f'| {len(page_rows)} | {S.median(rc):.1%} | {S.mean(rc):.1%} | {S.median(pr):.1%} | {S.mean(pr):.1%} |']
    md += ['', f'## Dev queries ({len(qrows)} of {len(queries)} on mapped papers): evidence placed on a page', '',
           '| evidence type | queries | placed | share | excerpt words (>=60%) on the page / checkable |', '|---|---|---|---|---|']
    for et in sorted({q['evidence_type'] for q in qrows} | {'all'}):
        qs = [q for q in qrows if et == 'all' or q['evidence_type'] == et]
        if not qs: continue
        placed = sum(bool(q['pages']) for q in qs); chk = [q for q in qs if q['excerpt_words_on_page'] is not None]
        md.append(f"| {et} | {len(qs)} | {placed} | {placed / len(qs):.1%} | {sum(q['excerpt_words_on_page'] for q in chk)}/{len(chk)} |")
    pngs = overlays(a.papers, out)
    md += ['', '## Overlays', '', 'The page of each paper holding the most kinds of mapped evidence, boxes drawn by `pagemap.draw_overlay` '
           '(figures blue, tables green, equations orange, passages grey):', ''] + [f'![{Path(x).stem}]({Path(x).name})' for x in pngs]
    (out / 'mapping.md').write_text('\n'.join(md) + '\n')
    json.dump({'papers': rows, 'queries': qrows, 'page_text': page_rows, 'totals': {f'{p}/{k}': dict(c) for (p, k), c in sorted(agg.items())}},
              open(out / 'mapping.json', 'w'), indent=1)
    print('\n'.join(md))

if __name__ == '__main__': main()
