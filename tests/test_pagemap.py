"Page maps: SyncTeX coordinates against pdftotext, repaired papers' line numbers, the fallback's honesty, real shared papers."
import json, re, shutil, subprocess, html
from pathlib import Path
import pytest
from docbench_nb.pages import pagemap as PM
from docbench_nb.latex.parse import parse_paper, parse_text
from docbench_nb.pages.render import render_paper

pytestmark = pytest.mark.skipif(not (shutil.which('pdflatex') and shutil.which('pdftoppm') and shutil.which('pdftotext')),
                                reason='needs pdflatex (texlive-latex-base) and poppler-utils')

def page_words(pdf, page):
    return {t for w, *_ in PM.pdf_words(pdf).get(page, []) for t in PM.words(w)}

def write(d, files):
    d = Path(d); d.mkdir(parents=True, exist_ok=True)
    for k, v in files.items(): (d / k).parent.mkdir(parents=True, exist_ok=True); (d / k).write_text(v)
    return d

BODY = '\n'.join([r'\section{Start}', 'Alpha paragraph about numbats and bilbies living together.', '',
                  r'\begin{figure}[t]', r'\centering\rule{4cm}{3cm}', r'\caption{The quoll figure shows marsupial counts.}',
                  r'\label{fig:quoll}', r'\end{figure}', r'\newpage', 'Second page paragraph on dingo behaviour.', '',
                  r'\begin{table}[h]', r'\centering', r'\begin{tabular}{ll} echidna & platypus \\ x & y \end{tabular}',
                  r'\caption{Table of monotreme sightings.}', r'\label{tab:mono}', r'\end{table}'])

def test_synctex_boxes_hold_pdftotext_words(tmp_path):
    d = write(tmp_path / 'p', {'main.tex': '\\documentclass{article}\n\\begin{document}\n' + BODY + '\n\\end{document}\n'})
    p = parse_paper(d, cache_dir=tmp_path / 'c')
    pm = PM.map_paper(p, cache_dir=tmp_path / 'c')
    assert (pm.method, pm.render_path, pm.error) == ('synctex', 'compiled', None)
    lab = {l.label: l for l in pm.labels if l.kind in ('figure', 'table')}
    assert lab['fig:quoll'].pages == [1] and lab['tab:mono'].pages == [2]
    for key, word in [('fig:quoll', 'quoll'), ('tab:mono', 'echidna'), ('tab:mono', 'monotreme')]:
        l = lab[key]
        hits = [w for w in PM.pdf_words(pm.pdf)[l.pages[0]] if word in w[0]]
        assert hits and all(any(b[0] == l.pages[0] and w[1] >= b[1] - 2.5 and w[2] >= b[2] - 2.5 and w[3] <= b[3] + 2.5
                                    and w[4] <= b[4] + 2.5 for b in l.boxes) for w in hits), (key, hits, l.boxes)
    text = [l for l in pm.labels if l.kind == 'text']
    assert [l.pages for l in text if 'dingo' in p.span_text(l.span)] == [[2]]
    assert 'dingo' in pm.page_text[2] and 'numbats' in pm.page_text[1] and 'numbats' not in pm.page_text[2]

def test_repaired_paper_lines_map_back(tmp_path):
    "A missing package is removed from the preamble: SyncTeX's line numbers are the author's, not the patched copy's."
    src = '\\documentclass{article}\n\\usepackage{docbenchnosuchpackage}\n\\usepackage{amsmath}\n\\begin{document}\n' + BODY + '\n\\end{document}\n'
    d = write(tmp_path / 'r', {'main.tex': src})
    r = render_paper(parse_paper(d, cache_dir=tmp_path / 'c'), cache_dir=tmp_path / 'c')
    assert r.path == 'repaired' and r.synctex
    st = PM.read_synctex(r.synctex)
    line = src.split('\n').index('Second page paragraph on dingo behaviour.') + 1
    assert {b[2] for b in st.boxes if b[0] == 2 and b[1] == 'main.tex'} >= {line}
    pw = PM.pdf_words(r.pdf)[2]
    dingo = next(w for w in pw if w[0] == 'dingo')
    assert any(b[2] == line and b[3] - 1 <= dingo[1] and dingo[3] <= b[5] + 1 for b in st.boxes if b[0] == 2)

def test_input_files_are_relative_to_the_root(tmp_path):
    d = write(tmp_path / 'q', {'tex/ms.tex': '\\documentclass{article}\n\\begin{document}\nMain.\n\\input{sec/part}\n\\end{document}\n',
                               'tex/sec/part.tex': 'Part text about wombats.\n'})
    p = parse_paper(d, cache_dir=tmp_path / 'c')
    pm = PM.map_paper(p, cache_dir=tmp_path / 'c')
    assert pm.method == 'synctex' and 'tex/sec/part.tex' in pm.line_pages and pm.source_pages('tex/sec/part.tex', 1) == [1]
    assert not any('/tmp' in f or 'docbench-tex' in f for f in pm.line_pages)

def test_fallback_is_not_synctex(tmp_path):
    "A paper without a compilable source is typeset by the minimal template: the map says so."
    p = parse_text('\\documentclass{article}\\begin{document}\\section{S}\nThe bandicoot paragraph describes burrowing habits in detail here.\n\n'
                   '\\begin{figure}\\caption{Bandicoot burrow depth measured across many sites.}\\label{fig:b}\\end{figure}\n\\end{document}', id='fb')
    pm = PM.map_paper(p, cache_dir=tmp_path / 'c')
    assert pm.render_path == 'fallback' and pm.method == 'pdftotext'
    assert all(l.method in ('pdftotext', 'none') for l in pm.labels)
    fig = next(l for l in pm.labels if l.kind == 'figure')
    assert fig.pages == [1] and fig.method == 'pdftotext'
    rows = list(PM.page_labels_jsonl([pm]))
    assert all(set(PM.JSONL_KEYS) <= set(r) for r in rows) and {r['method'] for r in rows} <= {'pdftotext', 'none'}

def test_bad_source_gives_an_error_row(tmp_path):
    pm = PM.map_paper(str(tmp_path / 'does-not-exist'), cache_dir=tmp_path / 'c')
    assert pm.error and list(PM.page_labels_jsonl([pm]))[0].keys() == {'paper_id', 'error'}

# ------------------------------------------------------------- shared corpus (renders: minutes without a cache)
SHARED_IDS = ('araa-gps', '3I-ATLAS-discovery', 'alphabp')

@pytest.mark.slow
@pytest.mark.parametrize('pid', SHARED_IDS)
def test_shared_figure_captions_on_their_pages(shared_dir, pid):
    "Every mapped figure's and table's caption words appear in pdftotext of its page, and most lie inside its box."
    p = parse_paper(shared_dir / 'corpus' / 'papers' / pid)
    pm = PM.map_paper(p)
    assert pm.method == 'synctex' and pm.render_path in ('compiled', 'repaired')
    floats = [l for l in pm.labels if l.kind in ('figure', 'table')]
    caps = [f.caption for f in p.figures] + [t.caption for t in p.tables]
    assert floats and sum(bool(l.pages) for l in floats) >= 0.9 * len(floats)
    pw = PM.pdf_words(pm.pdf)
    for l, cap in zip(floats, caps):
        ws = set(PM.words(cap))
        if not l.pages or len(ws) < 4: continue
        on = {t for pg in l.pages for w, *_ in pw[pg] for t in PM.words(w)}
        assert len(ws & on) >= 0.8 * len(ws), (pid, l.label, l.pages, ws - on)

@pytest.mark.slow
def test_shared_dev_queries_placed(shared_dir):
    qs = [json.loads(x) for x in open(shared_dir / 'queries' / 'dev.jsonl')]
    qs = [q for q in qs if q['doc_id'] in SHARED_IDS]
    assert qs
    for q in qs:
        pm = PM.map_paper(parse_paper(shared_dir / 'corpus' / 'papers' / q['doc_id']))
        pages = PM.query_pages(q, pm)
        assert pages, q['id']
        ws = set(PM.words(PM.clean_latex(q['evidence_excerpt'])))
        on = {t for pg in pages for w, *_ in PM.pdf_words(pm.pdf)[pg] for t in PM.words(w)}
        assert len(ws) < 4 or len(ws & on) >= 0.5 * len(ws), (q['id'], pages, ws - on)

def test_endfloat_floats_fall_back_to_caption_words(tmp_path):
    "endfloat typesets floats from a generated file: SyncTeX cannot place them, the caption's words in the PDF do (and the label says so)."
    d = write(tmp_path / 'e', {'main.tex': '\\documentclass{article}\n\\usepackage{endfloat}\n\\begin{document}\n' + BODY + '\n\\end{document}\n'})
    p = parse_paper(d, cache_dir=tmp_path / 'c')
    pm = PM.map_paper(p, cache_dir=tmp_path / 'c')
    assert pm.method == 'synctex'
    fig = next(l for l in pm.labels if l.label == 'fig:quoll')
    assert fig.method == 'pdftotext' and len(fig.pages) == 1 and fig.pages[0] > 2
    assert 'quoll' in page_words(pm.pdf, fig.pages[0])
