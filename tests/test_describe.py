"Figure describers: OCR default on real papers, the chat backend against a local stub server, spec parsing, the HF path."
import base64, io, json, re, subprocess, time, pytest
from pathlib import Path
from PIL import Image, ImageDraw, ImageFont
from docbench_nb.records import Paper, Figure
from docbench_nb.retrieval.represent import text_caption_units, default_tokenizer, SourceDescriber
from docbench_nb.retrieval.describe import (OCRSourceDescriber, ChatDescriber, HFVLMDescriber, DescriberError,
                                  make_describer, default_ocr_engine, figure_images, DEFAULT_PROMPT)
from docbench_nb.testing import StubChatServer, ScriptedChatServer
from docbench_nb.context import RunContext

WORDS = ('Discharge', 'snowmelt', 'gauge')

def _chart(path):
    im = Image.new('RGB', (640, 360), 'white'); d = ImageDraw.Draw(im)
    font = ImageFont.load_default(size=26)
    d.line([(60, 300), (600, 300)], fill='black', width=3); d.line([(60, 300), (60, 40)], fill='black', width=3)
    d.line([(60, 280), (330, 120), (600, 200)], fill='blue', width=4)
    d.text((150, 8), f'{WORDS[0]} at the {WORDS[2]}', fill='black', font=font)
    d.text((300, 320), f'{WORDS[1]} season', fill='black', font=font)
    im.save(path)

@pytest.fixture
def paper(tmp_path):
    _chart(tmp_path / 'chart.png')
    txt = 'We measured flow. Figure 1 shows the spring rise. The end.'
    return Paper(id='inline', title='Flow', text=txt, root=str(tmp_path),
                 figures=[Figure(label='fig:a', caption='Daily flow at the outlet.', images=['chart.png'],
                                 ref_spans=[(txt.index('Figure 1'), txt.index(' The end'))]),
                          Figure(label='fig:b', caption='A figure whose file is gone.', images=['gone.pdf'])])

@pytest.fixture
def server():
    with StubChatServer() as s: yield s

def _chat(server, tmp_path, **kw):
    return ChatDescriber(kw.pop('model', 'stub-vl'), base_url=server.base_url, cache_dir=tmp_path / 'cache',
                         **{'api_key': '', 'retries': 0, 'backoff': 0.01, **kw})

# ---- chat backend -----------------------------------------------------------------------------------------

def test_chat_request_carries_image_model_and_caption(server, paper, tmp_path):
    d = _chat(server, tmp_path)
    out = d.describe(paper, paper.figures[0])
    png = figure_images(paper, paper.figures[0], cache_dir=tmp_path / 'cache')[0]
    w, h = Image.open(png).size
    assert f'image of {w}x{h} pixels, {Path(png).stat().st_size} bytes' in out
    req = server.requests[-1]
    assert req['path'] == '/v1/chat/completions'
    body = req['json']
    assert body['model'] == 'stub-vl' and body['max_tokens'] == 256
    parts = body['messages'][0]['content']
    assert [p['type'] for p in parts] == ['image_url', 'text']
    url = parts[0]['image_url']['url']
    assert url.startswith('data:image/png;base64,') and base64.b64decode(url.split(',', 1)[1]) == Path(png).read_bytes()
    assert parts[1]['text'].startswith(DEFAULT_PROMPT) and 'Caption: Daily flow at the outlet.' in parts[1]['text']
    assert req['headers'].get('Authorization') == 'Bearer sk-no-key'      # no key: only the LLM backend's placeholder
    assert d.name == 'chat:stub-vl'

def test_chat_sends_bearer_key_from_argument_or_env(server, paper, tmp_path, monkeypatch):
    _chat(server, tmp_path, api_key='sk-test').describe(paper, paper.figures[0])
    assert server.requests[-1]['headers']['Authorization'] == 'Bearer sk-test'
    monkeypatch.setenv('OPENAI_API_KEY', 'sk-env')
    d = ChatDescriber('other-model', base_url=server.base_url, cache_dir=tmp_path / 'c2')
    assert 'sk-env' not in repr(d)
    d.describe(paper, paper.figures[0])
    assert server.requests[-1]['headers']['Authorization'] == 'Bearer sk-env'

def test_chat_answers_are_cached_on_disk(server, paper, tmp_path):
    a = _chat(server, tmp_path).describe(paper, paper.figures[0])
    n = len(server.requests)
    fresh = _chat(server, tmp_path)                       # a new object: the cache is on disk
    assert fresh.describe(paper, paper.figures[0]) == a
    assert len(server.requests) == n and fresh.n_requests == 0 and fresh.n_cached == 1
    _chat(server, tmp_path, prompt='Only the axes.').describe(paper, paper.figures[0])   # another prompt: new request
    _chat(server, tmp_path, model='other').describe(paper, paper.figures[0])              # another model: new request
    assert len(server.requests) == n + 2
    assert len(list((tmp_path / 'cache' / 'llm').rglob('*.json'))) == 3     # the LLM backend's cache

def test_chat_http_500_falls_back_with_warning_or_raises(server, paper, tmp_path):
    server.status = 500
    d = _chat(server, tmp_path, retries=2)
    warns = []
    out = d.describe(paper, paper.figures[0], warn=warns.append)
    assert d.n_requests == 3                               # first try + 2 retries
    assert out.startswith('(offline fallback, source:caption+refs+ocr(') and 'Daily flow at the outlet.' in out
    assert 'represent_warnings' not in paper.meta
    assert any('inline: figure 1 (fig:a)' in w and 'HTTP 500' in w and server.base_url in w for w in warns), warns
    with pytest.raises(DescriberError) as e:
        _chat(server, tmp_path, on_error='raise').describe(paper, paper.figures[0])
    assert e.value.status == 500
    for s in ('inline: figure 1 (fig:a)', server.base_url + '/chat/completions', 'HTTP 500', 'stub failure 500'):
        assert s in str(e.value)
    assert not list((tmp_path / 'cache' / 'llm').rglob('*.json'))            # failures are not cached

def test_chat_stops_asking_a_dead_endpoint(server, paper, tmp_path):
    server.status = 503
    d = _chat(server, tmp_path, max_failures=2)
    warns = []
    for _ in range(4): d.describe(paper, paper.figures[0], warn=warns.append)
    assert d.n_requests == 2 and len(server.requests) == 2
    assert any('failed for 2 figures in a row' in w for w in warns)

def test_chat_429_is_retried_through_the_backend_then_cached(paper, tmp_path, monkeypatch):
    "A 429 (with Retry-After: 0) is retried by the LLM backend; the answer is cached, so describing again sends nothing."
    import types, docbench_nb.llm as L
    slept = []                                              # the backoff the client chose, recorded rather than timed
    monkeypatch.setattr(L, 'time', types.SimpleNamespace(**{**{k: getattr(time, k) for k in ('monotonic', 'perf_counter', 'time')},
                                                            'sleep': lambda s: (slept.append(s), time.sleep(s))[1]}))
    with ScriptedChatServer([{'status': 429, 'headers': {'Retry-After': '0'}}],
                            default=lambda req: StubChatServer.describe(req, {})) as srv:
        d = ChatDescriber('stub-vl', base_url=srv.base_url, cache_dir=tmp_path / 'cache', api_key='', retries=2, backoff=5.0,
                          on_error='raise')
        out = d.describe(paper, paper.figures[0])
        assert slept == [0.0]                               # Retry-After: 0 was honoured, not the 5 s backoff
        assert out.startswith('stub-vl saw 1 image(s): image of ') and srv.n_calls == 2 and d.n_requests == 2
        assert srv.requests[0]['json']['messages'] == srv.requests[1]['json']['messages']     # the same request, again
        again = ChatDescriber('stub-vl', base_url=srv.base_url, cache_dir=tmp_path / 'cache', api_key='')
        assert again.describe(paper, paper.figures[0]) == out
        assert srv.n_calls == 2 and (again.n_requests, again.n_cached) == (0, 1)

def test_chat_describe_many_batches_a_paper(paper, tmp_path):
    "All figures of a paper in one batch: order kept, at most `concurrency` in flight, the image-less figure falls back."
    _chart(tmp_path / 'chart2.png')
    paper.figures += [Figure(label=f'fig:{k}', caption=f'Copy {k}.', images=['chart.png' if k % 2 else 'chart2.png']) for k in range(3)]
    reply = lambda req: {'content': StubChatServer.describe(req, {}) + ' ' + req['messages'][0]['content'][-1]['text'][-8:], 'delay': 0.3}
    with ScriptedChatServer(default=reply) as srv:
        d = ChatDescriber('stub-vl', base_url=srv.base_url, cache_dir=tmp_path / 'cache', api_key='', concurrency=2)
        warns = []
        out = d.describe_many(paper, warn=warns.append)
        assert len(out) == 5 and srv.n_calls == 4 and srv.peak == 2
        assert out[1].startswith('(offline fallback, ') and any('gone.pdf' in w for w in warns)
        assert all(out[2 + k].endswith(f'Copy {k}.') for k in range(3)) and 'image of 640x360 pixels' in out[0]
        assert d.describe_many(paper, warn=warns.append) == out and srv.n_calls == 4 and d.n_cached == 4

def test_chat_client_error_is_not_retried(server, paper, tmp_path):
    server.status = 401
    d = _chat(server, tmp_path, retries=3, on_error='raise')
    with pytest.raises(DescriberError, match='HTTP 401'): d.describe(paper, paper.figures[0])
    assert d.n_requests == 1

def test_chat_timeout_is_honoured(server, paper, tmp_path):
    server.delay = 3.0
    d = _chat(server, tmp_path, timeout=0.5, on_error='raise')
    with pytest.raises(DescriberError, match=r'timed out after 0\.5 s.*\(timeout 0\.5s\)'): d.describe(paper, paper.figures[0])
    # counted, not timed: the timeout path was taken (the 3 s answer never arrived), on the one request sent (retries=0),
    # and nothing was answered from the cache
    assert (d.n_requests, len(server.requests), d.n_cached, d.failures_in_row) == (1, 1, 0, 1)
    assert (d.llm.stats['requests'], d.llm.stats['failures'], d.llm.stats['cache_hits']) == (1, 1, 0), d.llm.stats

def test_chat_unreachable_server_names_the_endpoint(paper, tmp_path):
    with StubChatServer() as s: url = s.base_url           # closed again: nothing listens there now
    d = ChatDescriber('m', base_url=url, api_key='', retries=0, cache_dir=tmp_path, on_error='raise')
    with pytest.raises(DescriberError, match=re.escape(url)): d.describe(paper, paper.figures[0])

def test_chat_figure_without_image_is_not_sent(server, paper, tmp_path):
    d = _chat(server, tmp_path, on_error='raise')
    warns = []
    out = d.describe(paper, paper.figures[1], warn=warns.append)
    assert out == '(offline fallback, ' + d.fallback.name + ') A figure whose file is gone.'
    assert not server.requests
    assert any('gone.pdf' in w for w in warns)

def test_evaluate_with_chat_describer_on_demo(server, tmp_path):
    "End to end: every demo figure goes through the endpoint; the config names the describer."
    from docbench_nb.evaluation.core import evaluate
    from docbench_nb.latex.corpus import load_papers
    from docbench_nb.demo import demo_corpus_dir, demo_queries_path
    papers, _ = load_papers(demo_corpus_dir(), cache_dir=tmp_path / 'cache', progress=False)
    figs = [f for p in papers for f in p.figures]
    d = _chat(server, tmp_path)
    res = evaluate(demo_corpus_dir(), demo_queries_path(), 'text+captions', 'bm25', chunk_size=256,
                   cache_dir=tmp_path / 'cache', progress=False, describer=d, papers=papers)
    assert res['config']['describer'] == 'chat:stub-vl' and not res['warnings']
    n_images = sum(len(r['json']['messages'][0]['content']) - 1 for r in server.requests)
    assert (len(server.requests), n_images) == (len(figs), sum(len(f.images) for f in figs)) and len(figs) >= 20
    ref = evaluate(demo_corpus_dir(), demo_queries_path(), 'text+captions', 'bm25', chunk_size=256, cache_dir=tmp_path / 'cache',
                   progress=False, describer='source', papers=papers)   # captions + citing sentences, no image text
    # the stub's descriptions add only generic words: the result stays within noise of the source-only describer
    assert abs(res['overall']['ndcg@10'] - ref['overall']['ndcg@10']) <= 0.03, (res['overall'], ref['overall'])

# ---- offline default ----------------------------------------------------------------------------------------

def test_ocr_describer_on_inline_chart(paper, tmp_path):
    d = OCRSourceDescriber(cache_dir=tmp_path / 'cache')
    assert d.name == f'source:caption+refs+ocr({default_ocr_engine()})'
    out = d.describe(paper, paper.figures[0])
    assert out.startswith('Daily flow at the outlet. Figure 1 shows the spring rise.')
    ocr = out.split('Text in the figure: ')[1].lower()
    assert all(w.lower() in ocr for w in WORDS), out
    warns = []
    assert d.describe(paper, paper.figures[1], warn=warns.append) == 'A figure whose file is gone.'
    assert any('gone.pdf' in w for w in warns)
    capped = OCRSourceDescriber(cache_dir=tmp_path / 'cache', max_ocr_words=3).describe(paper, paper.figures[0])
    assert len(capped.split('Text in the figure: ')[1].split()) == 3

def test_text_caption_units_default_includes_ocr_text(paper, tmp_path):
    tok = default_tokenizer()
    units = text_caption_units(paper, tok, chunk_size=512, ctx=RunContext(cache_dir=tmp_path / 'cache'))
    sec = [u for u in units if u.meta.get('source') == 'figure_descriptions']
    assert sec and sec[0].meta['describer'].startswith('source:caption+refs+ocr(')
    text = ' '.join(u.text for u in sec)
    assert 'Figure 1 (source:caption+refs+ocr(' in text and 'Text in the figure:' in text
    assert WORDS[1] in text.lower()
    plain = text_caption_units(paper, tok, chunk_size=512, describer=SourceDescriber())
    assert 'Text in the figure' not in ' '.join(u.text for u in plain)

REAL_PAPER = 'arxiv-2405.03064v3'

def test_ocr_describer_reads_real_figure_text(shared_dir, tmp_path):
    "Figures of a real paper that are PDFs with embedded text: OCR must find most of the words pdftotext extracts."
    from docbench_nb.latex.corpus import load_papers
    src = shared_dir / 'corpus' / 'papers' / REAL_PAPER
    if not src.is_dir(): pytest.skip(f'{REAL_PAPER} not in the shared corpus')
    (p,), _ = load_papers([src], cache_dir=tmp_path, progress=False)
    d = OCRSourceDescriber(max_ocr_words=10_000, cache_dir=tmp_path)
    assert 'ocr(' in d.name
    checked = []
    for f in p.figures:
        pdfs = [im for im in f.images if im.lower().endswith('.pdf')]
        if not pdfs: continue
        r = subprocess.run(['pdftotext', '-l', '1', str(Path(p.root) / pdfs[0]), '-'], capture_output=True, text=True, timeout=60)
        truth = {w.lower() for w in r.stdout.split() if re.fullmatch(r'[A-Za-z]{5,}', w)}
        if len(truth) < 4: continue
        out = d.describe(p, f)
        assert out.startswith(' '.join(f.caption.split()[:5])), (f.label, out[:200])
        ocr = out.split('Text in the figure: ')[1].lower() if 'Text in the figure: ' in out else ''
        checked.append((f.label, sum(w in ocr for w in truth) / len(truth)))
        if len(checked) == 3: break
    assert len(checked) == 3, checked
    assert min(r for _, r in checked) >= 0.6 and sum(r for _, r in checked) / 3 >= 0.8, checked

# ---- specs ----------------------------------------------------------------------------------------------

def test_make_describer_specs(tmp_path):
    assert make_describer().name.startswith('source:caption+refs+ocr(')
    assert make_describer('default').name == make_describer('source+ocr').name
    assert make_describer('source').name == 'source:caption+refs'
    assert make_describer('source+ocr:rapidocr').name == 'source:caption+refs+ocr(rapidocr)'
    if default_ocr_engine() == 'tesseract':
        assert make_describer('source+ocr:tesseract').name == 'source:caption+refs+ocr(tesseract)'
    c = make_describer('chat:Qwen/Qwen2.5-VL-7B-Instruct', cache_dir=tmp_path, max_pixels=500_000)
    assert (c.model, c.base_url, c.max_pixels, c.name) == ('Qwen/Qwen2.5-VL-7B-Instruct', 'http://localhost:8000/v1', 500_000,
                                                           'chat:Qwen/Qwen2.5-VL-7B-Instruct')
    c = make_describer('chat:llava:13b@http://gpu-box:11434/v1')
    assert (c.model, c.url) == ('llava:13b', 'http://gpu-box:11434/v1/chat/completions')
    assert make_describer('chat:m@localhost:9000/v1').url == 'http://localhost:9000/v1/chat/completions'
    obj = SourceDescriber(max_refs=1)
    assert make_describer(obj) is obj
    for bad in ('blip2', 'chat:', 'hf:', 'chat:m@'):
        with pytest.raises(ValueError): make_describer(bad)
    with pytest.raises(ValueError, match=r"unknown kind 'vlm'; known: .*hf:MODEL"): make_describer('vlm')
    c = make_describer('chat:m?base_url=localhost:9000/v1')
    assert c.url == 'http://localhost:9000/v1/chat/completions'
    with pytest.raises(TypeError): make_describer(42)
    with pytest.raises(ValueError, match='on_error'): ChatDescriber('m', on_error='ignore')
    with pytest.raises(OSError, match='neither a local folder'): make_describer(f'hf:{tmp_path}/no-such-model')

# ---- local transformers VLM -------------------------------------------------------------------------------

@pytest.mark.slow
def test_hf_vlm_describer_on_tiny_qwen2_vl(paper, tmp_path):
    "The real AutoModelForImageTextToText path on a tiny random Qwen2-VL: output is gibberish, mechanics are checked."
    from docbench_nb.testing import make_tiny_vision_models
    folder = make_tiny_vision_models(tmp_path / 'models')['qwen2_vl']
    d = make_describer(f'hf:{folder}', cache_dir=tmp_path / 'cache')
    assert isinstance(d, HFVLMDescriber) and d.name == 'hf:qwen2_vl'
    assert type(d.model).__name__ == 'Qwen2VLForConditionalGeneration'
    d.max_new_tokens = 6
    png = figure_images(paper, paper.figures[0], cache_dir=tmp_path / 'cache')
    b = d.inputs(png, 'Daily flow.')
    n_img = int((b['input_ids'] == d.tokenizer.convert_tokens_to_ids(d.image_token)).sum())
    assert n_img == int(b['image_grid_thw'].prod()) // d.image_processor.merge_size ** 2 > 0
    out = d.describe(paper, paper.figures[0])
    assert isinstance(out, str) and 0 < d.last_new_tokens <= 6
    assert d.describe(paper, paper.figures[0]) == out and (d.n_generated, d.n_cached) == (1, 1)
    fb = d.describe(paper, paper.figures[1])
    assert fb.startswith('(offline fallback, source:caption+refs)') and d.n_generated == 1
