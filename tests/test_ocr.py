"OCR: reading order, both engines on drawn and LaTeX-rendered text, content-keyed cache, errors, OCR'd units and retrieval."
import difflib, json, re, shutil, subprocess
import numpy as np
import pytest
from docbench_nb.records import Unit, Query
from docbench_nb.retrieval.ocr import (reading_order_text, group_lines, xy_cut, ocr_image, ocr_record, ocr_units,
                             OCRError, OCREncoder, OCRRetriever, OCR_ENGINES)
from docbench_nb.retrieval.registry import make_retriever
from docbench_nb.testing import draw_text_image

needs_tesseract = pytest.mark.skipif(shutil.which('tesseract') is None, reason='tesseract not installed')


def _ratio(a, b):
    n = lambda s: ' '.join(re.sub(r'[^a-z0-9]+', ' ', s.lower()).split())
    return difflib.SequenceMatcher(None, n(a), n(b), autojunk=False).ratio()


def test_reading_order_columns_and_lines():
    boxes = [(0, 0, 300, 12, 'A title across the page')]
    for i in range(4):                                     # two columns whose lines sit at the same heights
        y = 30 + 16 * i
        boxes += [(0, y, 140, y + 12, f'L{i}'), (160, y, 300, y + 12, f'R{i}')]
    boxes += [(0, 120, 300, 132, 'A footer across the page')]
    text = reading_order_text(boxes).split('\n')
    assert text == ['A title across the page'] + [f'L{i}' for i in range(4)] + [f'R{i}' for i in range(4)] + ['A footer across the page']
    assert reading_order_text(boxes, columns=False).split('\n')[1] == 'L0 R0'
    # words of one line split into two boxes stay on one line; a slightly skewed box still joins its line
    assert reading_order_text([(50, 2, 90, 14, 'world'), (0, 0, 40, 12, 'hello')]) == 'hello world'
    assert [len(l) for l in group_lines([(0, 0, 10, 10, 'a'), (12, 3, 20, 13, 'b'), (0, 30, 10, 40, 'c')])] == [2, 1]
    assert reading_order_text([(0, 0, 10, 10, '  ')]) == ''


def test_xy_cut_three_columns():
    boxes = [(x0, y, x0 + 80, y + 10, f'{c}{r}') for c, x0 in zip('abc', (0, 100, 200)) for r, y in enumerate((0, 14, 28))]
    blocks = xy_cut(boxes, row_gap=10, col_gap=5)
    assert [[b[4] for b in blk] for blk in blocks] == [['a0', 'a1', 'a2'], ['b0', 'b1', 'b2'], ['c0', 'c1', 'c2']]


@needs_tesseract
def test_errors(tmp_path):
    with pytest.raises(OCRError, match='no such file'): ocr_image(tmp_path/'missing.png', 'tesseract', cache_dir=tmp_path)
    (tmp_path/'bad.png').write_bytes(b'\x89PNG garbage')
    with pytest.raises(OCRError, match='not a readable image'): ocr_image(tmp_path/'bad.png', 'tesseract', cache_dir=tmp_path)
    with pytest.raises(ValueError, match='unknown OCR engine'): ocr_image(tmp_path/'bad.png', 'paddle')
    with pytest.raises(OSError, match='no language data'): ocr_image(tmp_path/'bad.png', 'tesseract', lang='xxx')
    img = draw_text_image(tmp_path/'t.png', ['timeout test line'] * 30, width=1600)
    with pytest.raises(OCRError, match='killed after'): ocr_image(img, 'tesseract', cache_dir=False, timeout=0.01)


@pytest.mark.slow
@pytest.mark.parametrize('engine', OCR_ENGINES)
def test_engine_reads_drawn_text_and_caches_by_content(engine, tmp_path):
    if engine == 'tesseract' and shutil.which('tesseract') is None: pytest.skip('tesseract not installed')
    lines = ['Table 4: posterior mean of the Hubble constant', 'with sixty eight percent credible intervals']
    img = draw_text_image(tmp_path/'a.png', lines)
    rec = ocr_record(img, engine, cache_dir=tmp_path/'c')
    assert not rec['cached'] and rec['seconds'] > 0 and rec['size'][0] == 900
    assert _ratio(rec['text'], ' '.join(lines)) > 0.85, rec['text']
    shutil.copy(img, tmp_path/'renamed.png')                # same bytes, other name: served from the cache
    again = ocr_record(tmp_path/'renamed.png', engine, cache_dir=tmp_path/'c')
    assert again['cached'] and again['text'] == rec['text']
    files = list((tmp_path/'c'/'ocr').rglob('*.json'))
    assert len(files) == 1 and json.loads(files[0].read_text())['engine'].startswith(engine)
    assert not list((tmp_path/'c').rglob('*.tmp'))           # atomic writes leave no temp files


@pytest.mark.slow
def test_rapidocr_two_column_reading_order(tmp_path):
    left = ['alpha bravo charlie', 'delta echo foxtrot', 'golf hotel india']
    right = ['kilo lima mike', 'november oscar papa', 'quebec romeo sierra']
    img = draw_text_image(tmp_path/'cols.png', ['Synthetic two column page'], width=1000, columns=[left, right])
    text = ocr_image(img, 'rapidocr', cache_dir=False)
    flat = ' '.join(text.lower().split())
    pos = [flat.find(w) for w in ('alpha', 'golf', 'kilo', 'quebec')]
    assert all(p >= 0 for p in pos) and pos == sorted(pos), text     # the whole left column before the right one


@pytest.mark.slow
@pytest.mark.skipif(not (shutil.which('pdflatex') and shutil.which('pdftoppm') and shutil.which('tesseract')), reason='needs pdflatex, pdftoppm, tesseract')
def test_tesseract_on_rendered_real_paper_text(shared_dir, tmp_path):
    "Real sentences of a shared paper, typeset by pdflatex, rendered at 100 dpi: tesseract must recover the words."
    rec = json.loads((shared_dir/'corpus'/'manifest.jsonl').read_text().splitlines()[0])
    tex = (shared_dir/'corpus'/'papers'/rec['id']/rec['main_tex']).read_text(errors='replace').split('\\begin{document}', 1)[-1]
    tex = re.sub(r'(?<!\\)%.*', ' ', tex)
    words = [w for w in re.findall(r"(?<![\\\w])[A-Za-z]{3,}(?![\w{])", tex)][200:500]
    (tmp_path/'p.tex').write_text('\\documentclass{article}\\pagestyle{empty}\\hyphenpenalty=10000\\begin{document}\\raggedright\n'
                                  + ' '.join(words) + '\n\\end{document}\n')
    subprocess.run(['pdflatex', '-interaction=nonstopmode', 'p.tex'], cwd=tmp_path, capture_output=True, timeout=120, check=True)
    subprocess.run(['pdftoppm', '-png', '-r', '100', '-singlefile', 'p.pdf', 'p'], cwd=tmp_path, capture_output=True, timeout=120, check=True)
    text = ocr_image(tmp_path/'p.png', 'tesseract', cache_dir=tmp_path/'c').lower().split()
    found = sum(w.lower() in set(text) for w in words) / len(words)
    assert found > 0.9 and _ratio(' '.join(text), ' '.join(words)) > 0.9


@pytest.mark.slow
@needs_tesseract
def test_ocr_units_encoder_and_retriever(tmp_path):
    figs = [Unit('astro', 'astro#f1', kind='figure', text='Figure 1.',
                 images=[draw_text_image(tmp_path/'a.png', ['Halo mass function', 'at redshift two'])]),
            Unit('bio', 'bio#f1', kind='figure', images=[draw_text_image(tmp_path/'b.png', ['Gene expression heatmap', 'of CRISPR knockouts'])]),
            Unit('bio', 'bio#0', kind='text', text='Plain text stays as it is.')]
    out = ocr_units(figs, 'tesseract', cache_dir=tmp_path/'c', progress=False)
    assert out[0].text.startswith('Figure 1.\n') and 'redshift' in out[0].text.lower()
    assert out[2] is figs[2] and figs[0].text == 'Figure 1.' and out[0].meta['ocr'].startswith('tesseract-')
    enc = OCREncoder(engine='tesseract', cache_dir=tmp_path/'c')
    U = enc.encode_image_units(figs[:2])
    Q = enc.encode_queries(['mass function of halos', 'CRISPR knockout expression'])
    assert U.shape == (2, 384) and (Q @ U.T).argmax(1).tolist() == [0, 1]
    assert enc.fingerprint.startswith('tesseract-') and enc.fingerprint != OCREncoder(engine='rapidocr').fingerprint
    from docbench_nb.retrieval.text_retrievers import BM25Retriever
    r = make_retriever('ocr:tesseract+bm25', cache_dir=tmp_path/'c')
    assert isinstance(r, OCRRetriever) and isinstance(r.retriever, BM25Retriever)
    r.index(figs, progress=False)
    run = r.search([Query('q', 'heatmap of knockouts')], k=2)
    assert run.ranking('q')[0] == 'bio' and run.provenance['q']['bio'] == 'bio#f1' and run.name == 'ocr:tesseract+bm25'
    broken = [Unit('x', 'x#p', kind='page', images=[str(tmp_path/'gone.png')])]
    with pytest.raises(OCRError, match="unit 'x#p' of 'x'"): ocr_units(broken, 'tesseract', cache_dir=tmp_path/'c', progress=False)
    with pytest.warns(UserWarning, match='no such file'):
        assert ocr_units(broken, 'tesseract', cache_dir=tmp_path/'c', progress=False, on_error='warn')[0].text == ''


def test_make_ocr_retriever_spec_errors():
    with pytest.raises(ValueError, match='unknown engine'): make_retriever('ocr:easyocr+bm25')
    with pytest.raises(ValueError, match='needs an inner spec'): make_retriever('ocr:tesseract')
    with pytest.raises(ValueError, match="unknown kind 'nonsense'"): make_retriever('ocr:tesseract+nonsense')
    assert make_retriever('ocr+bm25').engine == 'rapidocr'
