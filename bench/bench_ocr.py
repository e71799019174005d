"""OCR engines on LaTeX-rendered pages: speed and accuracy against the known source text.

    python bench/bench_ocr.py [--dpi 100 150] [--repeat 1]

Compiles two synthetic pages with pdflatex (one column, two columns; made-up prose, no hyphenation), renders
each with pdftoppm at every --dpi, OCRs every image with RapidOCR and Tesseract (no cache), and prints per
engine: seconds per page, OCR'd characters per second, character accuracy (difflib ratio of the
whitespace-normalised, lower-cased text against the source, so reading order counts), the same ratio with all
whitespace removed (isolates dropped spaces), and word recall (fraction of source words found, as a bag; what
BM25 sees). The last line is the speed ratio tesseract/rapidocr. Needs pdflatex + pdftoppm.
"""
import argparse, difflib, re, shutil, tempfile, time
from collections import Counter
from pathlib import Path
from docbench_nb.pages.assets import run_tool
from docbench_nb.retrieval.ocr import ocr_record, OCR_ENGINES

PARAS = [
    "We study how galaxy clusters grow by accreting smaller groups over cosmic time. Using a sample of four hundred "
    "clusters observed in the microwave and the X-ray bands, we measure the gas fraction as a function of mass and "
    "redshift. The gas fraction rises slowly with mass and shows no clear evolution out to redshift one.",
    "Our pipeline first removes point sources, then fits a pressure profile to every cluster, and finally "
    "combines the profiles in a hierarchical model. Simulated observations show that the estimator is unbiased "
    "for clusters above the detection threshold, while scatter dominates the error budget for the faintest systems.",
    "A second result concerns the relation between temperature and luminosity. The slope we find is steeper than "
    "the self similar expectation, which points to heating by active nuclei in low mass groups. Removing the "
    "cool cores reduces the scatter by a third but leaves the slope unchanged.",
    "Finally we compare the masses inferred from weak lensing with those from the hydrostatic method. The ratio "
    "is close to one for relaxed clusters and drops for merging systems, in line with numerical simulations that "
    "include turbulent pressure support in the outskirts of the intracluster medium.",
    "The catalogue was assembled from three surveys with different depths and angular resolutions. To avoid a "
    "selection bias we keep only clusters whose signal exceeds five times the local noise in every survey.",
    "Photometric redshifts were calibrated against a spectroscopic subsample of two hundred members. The median "
    "offset is below one percent and the outlier rate stays under three percent at all magnitudes.",
    "Instrumental effects were modelled by injecting mock clusters into the raw maps before source removal. "
    "Recovered fluxes match the injected ones within the quoted uncertainties for every frequency channel.",
    "Our fitting code runs on a single workstation in about an hour. It samples the posterior with an ensemble "
    "method and monitors convergence through the autocorrelation time of each parameter chain.",
    "Several questions remain open. Deeper spectroscopy of distant groups would tighten the evolution constraint, "
    "and future wide surveys will increase the sample tenfold while reaching lower masses.",
    "We thank the observatory staff for their support during the observing runs and the computing centre for "
    "providing storage for the reduced maps and the simulation outputs used in this study.",
]
TITLE = "Gas fractions of galaxy clusters across cosmic time"

def latex_source(twocolumn: bool) -> str:
    paras = PARAS if twocolumn else PARAS[:6]      # distinct paragraphs: repeated text would confuse difflib's alignment
    body = '\n\n'.join(paras)
    opts = '[twocolumn,11pt]' if twocolumn else '[11pt]'
    return (f"\\documentclass{opts}{{article}}\n\\pagestyle{{empty}}\\hyphenpenalty=10000\\exhyphenpenalty=10000\n"
            f"\\begin{{document}}\\raggedright\n{{\\Large {TITLE}\\par}}\\bigskip\n{body}\n\\end{{document}}\n"), \
           TITLE + ' ' + ' '.join(paras)

def norm(s): return ' '.join(re.sub(r'[^a-z0-9]+', ' ', s.lower()).split())

def scores(ocr, ref):
    a, b = norm(ocr), norm(ref)
    ratio = difflib.SequenceMatcher(None, a, b, autojunk=False).ratio()
    a2, b2 = a.replace(' ', ''), b.replace(' ', '')
    ratio_ns = difflib.SequenceMatcher(None, a2, b2, autojunk=False).ratio()
    found, want = Counter(a.split()), Counter(b.split())
    recall = sum(min(found[w], n) for w, n in want.items()) / sum(want.values())
    return ratio, ratio_ns, recall

def main():
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--dpi', type=int, nargs='+', default=[100, 150])
    ap.add_argument('--repeat', type=int, default=1, help='OCR each image this many times (timing: the minimum)')
    args = ap.parse_args()
    for tool in ('pdflatex', 'pdftoppm'):
        if not shutil.which(tool): raise SystemExit(f"{tool} not found: apt-get install texlive-latex-base poppler-utils")
    tmp = Path(tempfile.mkdtemp(prefix='bench-ocr-'))
    pages = []
    for two in (False, True):
        src, ref = latex_source(two)
        name = 'twocol' if two else 'onecol'
        (tmp/f'{name}.tex').write_text(src)
        r = run_tool(['pdflatex', '-interaction=nonstopmode', '-halt-on-error', f'{name}.tex'], timeout=120, cwd=tmp)
        if r.returncode != 0: raise SystemExit(f"pdflatex failed on {name}: {r.stdout.decode()[-500:]}")
        n_pages = re.search(r'Pages:\s+(\d+)', run_tool(['pdfinfo', f'{name}.pdf'], timeout=60, cwd=tmp).stdout.decode())
        if not n_pages or n_pages.group(1) != '1': raise SystemExit(f"{name}: the text must fit on one page (reference = whole text)")
        for dpi in args.dpi:
            run_tool(['pdftoppm', '-png', '-r', str(dpi), '-f', '1', '-l', '1', '-singlefile', f'{name}.pdf', f'{name}-{dpi}'], timeout=120, cwd=tmp)
            pages.append((f'{name}@{dpi}dpi', tmp/f'{name}-{dpi}.png', ref))
    ocr_record(pages[0][1], 'rapidocr', cache_dir=False)        # load the ONNX sessions before timing
    totals = {e: [0.0, 0] for e in OCR_ENGINES}
    print(f"{'page':16s} {'engine':10s} {'size':>10s} {'s/page':>7s} {'chars/s':>8s} {'char acc':>8s} {'no-space':>8s} {'word rec':>8s}")
    for name, png, ref in pages:
        for engine in OCR_ENGINES:
            best = None
            for _ in range(args.repeat):
                t0 = time.perf_counter(); rec = ocr_record(png, engine, cache_dir=False); dt = time.perf_counter() - t0
                best = dt if best is None else min(best, dt)
            ratio, ratio_ns, recall = scores(rec['text'], ref)
            totals[engine][0] += best; totals[engine][1] += len(rec['text'])
            print(f"{name:16s} {engine:10s} {'x'.join(map(str, rec['size'])):>10s} {best:7.2f} {len(rec['text']) / best:8.0f} "
                  f"{ratio:8.3f} {ratio_ns:8.3f} {recall:8.3f}")
    for e, (s, c) in totals.items(): print(f"total {e:10s} {s:7.2f}s  {c / s:8.0f} chars/s")
    print(f"speed ratio tesseract/rapidocr (chars/s): {(totals['tesseract'][1] / totals['tesseract'][0]) / (totals['rapidocr'][1] / totals['rapidocr'][0]):.2f}x")
    shutil.rmtree(tmp)

if __name__ == '__main__': main()
