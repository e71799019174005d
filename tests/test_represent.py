"Representations on real papers: chunks are tokenizer-exact, cover the text, and figure descriptions are complete."
import random, pytest
from docbench_nb.retrieval.represent import represent, chunk_spans, default_tokenizer, figure_section, text_caption_units
from docbench_nb.latex.parse import parse_paper
from docbench_nb.demo import demo_corpus_dir
from docbench_nb.latex.corpus import load_papers

@pytest.fixture(scope='module')
def tok(): return default_tokenizer()

@pytest.fixture(scope='module')
def sample_papers(shared_papers, tmp_path_factory):
    random.seed(0)
    srcs = random.sample(shared_papers, 8)
    papers, errors = load_papers(srcs, cache_dir=tmp_path_factory.mktemp('c'), progress=False)
    assert not errors
    return papers

@pytest.mark.parametrize('size,overlap', [(128, 0), (512, 32)])
def test_chunks_cover_text_within_budget(sample_papers, tok, size, overlap):
    for p in sample_papers:
        units = represent([p], 'text', tokenizer=tok, chunk_size=size, overlap=overlap)
        assert units, p.id
        n = [len(tok(u.text, add_special_tokens=False)['input_ids']) for u in units]
        assert max(n) <= size, (p.id, max(n))
        # every non-space character of the paper text is inside some chunk
        covered = bytearray(len(p.text))
        for u in units:
            assert p.text[u.span[0]:u.span[1]] == u.text
            covered[u.span[0]:u.span[1]] = b'\1' * (u.span[1] - u.span[0])
        missing = [i for i, c in enumerate(p.text) if not covered[i] and not c.isspace()]
        assert not missing, (p.id, p.text[missing[0]:missing[0] + 40])
        if overlap == 0:
            assert all(a.span[1] <= b.span[0] for a, b in zip(units, units[1:])), p.id

def test_text_captions_describe_every_captioned_figure(sample_papers, tok):
    for p in sample_papers:
        units = text_caption_units(p, tok, chunk_size=4096)
        extra = ' '.join(u.text for u in units if u.meta.get('source') == 'figure_descriptions')
        for f in p.figures:
            if f.caption.strip():
                assert ' '.join(f.caption.split()[:6]) in ' '.join(extra.split()), (p.id, f.label)

def test_demo_units_have_kinds_and_ids(tok):
    papers, _ = load_papers(demo_corpus_dir(), progress=False)
    units = represent(papers, 'text+captions', tokenizer=tok, chunk_size=256)
    assert len({u.unit_id for u in units}) == len(units)
    assert {u.doc_id for u in units} == {p.id for p in papers}
    assert any(u.meta.get('source') == 'figure_descriptions' for u in units)


@pytest.mark.parametrize('size,overlap', [(512, 0), (128, 16)])
def test_whitespace_shortcut_changes_no_chunk(sample_papers, tok, size, overlap):
    # MiniLM's WordPiece with BERT's pre-tokenizer: a chunk cut at whitespace needs no second tokenization
    from docbench_nb.retrieval.chunking import whitespace_exact
    assert whitespace_exact(tok)
    for p in sample_papers:
        assert chunk_spans(p.text, tok, size, overlap) == chunk_spans(p.text, tok, size, overlap, shortcut=False), p.id
