"Figures / pages / interleaved representations on real shared papers (slow: converts figures and renders pages)."
import shutil, pytest
from PIL import Image
from docbench_nb.latex.corpus import load_papers
from docbench_nb.retrieval.represent import represent, default_tokenizer
import docbench_nb.retrieval.visual_units  # registers the visual representations

HAVE_TEX = bool(shutil.which('pdflatex') and shutil.which('pdftoppm'))

@pytest.fixture(scope='module')
def papers_with_figures(shared_papers, tmp_path_factory):
    cache = tmp_path_factory.mktemp('vis')
    papers, errors = load_papers(shared_papers, cache_dir=cache, progress=False)
    with_figs = sorted((p for p in papers if sum(len(f.images) for f in p.figures) >= 2),
                       key=lambda p: sum(len(f.images) for f in p.figures))
    return with_figs[:3], cache

@pytest.mark.slow
def test_figure_units_one_per_image_within_budget(papers_with_figures):
    papers, cache = papers_with_figures
    for p in papers:
        rep = represent([p], 'figures', max_pixels=300_000, cache_dir=cache)
        units = rep.units
        n_img = sum(len(f.images) for f in p.figures)
        assert len(units) + len(rep.warnings.get(p.id, [])) >= n_img, p.id
        assert units and all(u.kind == 'figure' and u.text == '' and len(u.images) == 1 for u in units)
        for u in units:
            w, h = Image.open(u.images[0]).size
            assert w * h <= 300_000, (p.id, u.images[0], w, h)

@pytest.mark.slow
def test_interleaved_units_pair_chunks_with_nearest_figures(papers_with_figures):
    papers, cache = papers_with_figures
    tok = default_tokenizer()
    for p in papers:
        units = represent([p], 'interleaved', tokenizer=tok, chunk_size=256, max_pixels=200_000, cache_dir=cache)
        text_units = represent([p], 'text', tokenizer=tok, chunk_size=128)
        # half of the 256-token budget is kept for the images: the text chunks are the 128-token text chunks
        assert [u.span for u in units] == [u.span for u in text_units]
        assert all(1 <= len(u.images) <= 2 and u.meta['image_tokens'] == 128 for u in units), p.id
        # a chunk that overlaps converted figures is paired with those first (distance 0; ties in figure order), with their images
        from docbench_nb.pages.assets import convert_paper_figures
        pngs, _ = convert_paper_figures(p, max_pixels=200_000, cache_dir=cache)
        converted = [f for f in p.figures if any(r in pngs for r in f.images)]
        checked = 0
        for u in units:
            ov = [f for f in converted if f.span[0] < u.span[1] and f.span[1] > u.span[0]]
            if not ov: continue
            assert u.meta['figures'][:len(ov[:2])] == [f.label for f in ov[:2]], (p.id, u.unit_id)
            assert pngs[next(r for r in ov[0].images if r in pngs)] == u.images[0], (p.id, u.unit_id)
            checked += 1
        assert checked >= 1, p.id             # each of these papers has a figure inside its text

@pytest.mark.slow
@pytest.mark.skipif(not shutil.which('tesseract'), reason='tesseract not installed')
def test_interleaved_ocr_text_fits_the_unit_budget(papers_with_figures):
    from docbench_nb.retrieval.ocr import ocr_units
    papers, cache = papers_with_figures
    tok = default_tokenizer()
    n_tok = lambda t: len(tok(t, add_special_tokens=False)['input_ids'])
    p = papers[0]
    units = represent([p], 'interleaved', tokenizer=tok, chunk_size=256, max_pixels=300_000, cache_dir=cache)[:12]
    done = ocr_units(units, 'tesseract', cache_dir=cache, progress=False, tokenizer=tok)
    for u, d in zip(units, done):
        assert d.text.startswith(u.text.strip()), u.unit_id            # the text part is kept whole
        assert n_tok(d.text) <= 256, (u.unit_id, n_tok(d.text))        # and the image text fits the rest of the window
    assert any(n_tok(d.text) > n_tok(u.text) for u, d in zip(units, done)), 'no figure text was added to any unit'

@pytest.mark.slow
@pytest.mark.skipif(not HAVE_TEX, reason='pdflatex/pdftoppm not installed')
def test_page_units_record_render_path(papers_with_figures):
    papers, cache = papers_with_figures
    p = papers[0]
    rep = represent([p], 'pages', max_pixels=150_000, cache_dir=cache)
    units = rep.units
    assert units and all(u.kind == 'page' and u.images for u in units)
    assert units[0].meta['render_path'] in ('compiled', 'repaired', 'fallback')
    assert rep.render_paths == {p.id: units[0].meta['render_path']} and 'render_path' not in p.meta
