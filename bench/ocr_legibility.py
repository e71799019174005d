"""How legible is a rendered page at 600K / 1M / 2M pixels? OCR word recall against the PDF's own text layer.

    python bench/ocr_legibility.py --corpus ../shared/corpus/papers --queries ../shared/queries/dev.jsonl \
        --papers 30 --out results/max_pixels/legibility.json

Retrieval nDCG on the dev queries is at ceiling, so it barely moves with the pixel budget. This measures the budget
directly: for every page rendered by the paper's own LaTeX (or the fallback template), the words `pdftotext`
extracts from that page of the PDF are the reference; Tesseract's words on the page image at each budget are the
hypothesis. Word recall = multiset overlap / reference words (words: lowercase, alphanumeric, >= 3 characters).
Uses the same caches as `max_pixels_sweep.py` (renders and OCR), so after the sweep it only runs pdftotext.
"""
import argparse, json, re, statistics, subprocess, sys
from collections import Counter
from pathlib import Path
from tqdm.auto import tqdm
sys.path.insert(0, str(Path(__file__).parent))
from max_pixels_sweep import subset
from docbench_nb.latex.corpus import load_papers
from docbench_nb.pages.render import render_paper
from docbench_nb.retrieval.ocr import ocr_image

WORD = re.compile(r'[a-z0-9]{3,}')

def words(t: str) -> Counter: return Counter(WORD.findall(t.lower()))

def pdf_page_text(pdf: str, page: int, timeout: float = 60) -> str:
    r = subprocess.run(['pdftotext', '-f', str(page), '-l', str(page), '-layout', pdf, '-'], capture_output=True, timeout=timeout)
    return r.stdout.decode('utf-8', 'replace')

def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--corpus', required=True); ap.add_argument('--queries', required=True)
    ap.add_argument('--papers', type=int, default=30); ap.add_argument('--pixels', default='600000,1000000,2000000')
    ap.add_argument('--cache-dir', default=None); ap.add_argument('--out', default='results/max_pixels/legibility.json')
    a = ap.parse_args()
    papers, _ = load_papers(a.corpus, cache_dir=a.cache_dir, progress=False)
    if a.papers: papers, _ = subset(papers, a.queries, a.papers)
    rows = []
    for mp in map(int, a.pixels.split(',')):
        for p in tqdm(papers, desc=f'{mp:,} px'):
            r = render_paper(p, max_pixels=mp, cache_dir=a.cache_dir)
            if not r.pdf: continue
            for i, png in enumerate(r.pages, 1):
                ref = words(pdf_page_text(r.pdf, i))
                if sum(ref.values()) < 50: continue          # figure-only or near-empty pages say nothing about legibility
                hyp = words(ocr_image(png, 'tesseract', cache_dir=a.cache_dir))
                rows.append(dict(paper=p.id, page=i, max_pixels=mp, path=r.path, ref_words=sum(ref.values()),
                                 recall=sum((ref & hyp).values()) / sum(ref.values()),
                                 precision=sum((ref & hyp).values()) / max(1, sum(hyp.values()))))
    summary = {}
    for mp in sorted({r['max_pixels'] for r in rows}):
        for path in ('all', 'compiled', 'repaired', 'fallback'):
            rs = [r for r in rows if r['max_pixels'] == mp and (path == 'all' or r['path'] == path)]
            if rs: summary[f'{mp}|{path}'] = dict(pages=len(rs), recall_mean=round(statistics.mean(r['recall'] for r in rs), 4),
                                                  recall_median=round(statistics.median(r['recall'] for r in rs), 4),
                                                  precision_mean=round(statistics.mean(r['precision'] for r in rs), 4))
    for k, v in summary.items(): print(k, v)
    Path(a.out).parent.mkdir(parents=True, exist_ok=True)
    Path(a.out).write_text(json.dumps({'summary': summary, 'pages': rows}, indent=1))

if __name__ == '__main__': main()
