"LLM backend: the openai: kind against a scripted loopback server (retries, timeouts, JSON repairs, concurrency, rate, cache), and the bundled SmolLM2."
import json, os, socket, time, warnings, pytest
from pathlib import Path
from docbench_nb.llm import LLMError, LLMReply, LocalLLM, OpenAILLM, make_llm, llm_help
from docbench_nb.testing import ScriptedChatServer

pytestmark = pytest.mark.timeout(120)
ASK = [{'role': 'user', 'content': 'Write one question about gravitational waves.'}]
SCHEMA = {'type': 'object', 'properties': {'question': {'type': 'string', 'minLength': 8}}, 'required': ['question']}

def llm_for(srv, tmp_path, opts='backoff=0.01'):
    return make_llm(f'openai:tiny@{srv.base_url}' + (f'?{opts}' if opts else ''), cache_dir=tmp_path)

def test_spec_parsing(tmp_path):
    llm = make_llm('openai:qwen@127.0.0.1:9/v1?timeout=5&max_retries=1&concurrency=8&rate=2', cache_dir=tmp_path)
    assert isinstance(llm, OpenAILLM)
    assert (llm.endpoint, llm.timeout, llm.max_retries, llm.concurrency, llm.limiter.interval) == ('http://127.0.0.1:9/v1/chat/completions', 5.0, 1, 8, 0.5)
    assert make_llm('openai:m?base_url=http://127.0.0.1:9/v1', cache_dir=tmp_path).base_url == 'http://127.0.0.1:9/v1'
    with pytest.raises(ValueError, match="unknown option 'retries'"): make_llm('openai:m?retries=3')
    assert 'openai:MODEL' in llm_help() and 'local[:HUB_ID_OR_FOLDER]' in llm_help()

def test_429_retried_with_exponential_backoff(tmp_path, monkeypatch):
    import types, docbench_nb.llm as L
    slept = []                                              # the delays the client chose, recorded rather than timed
    monkeypatch.setattr(L, 'time', types.SimpleNamespace(monotonic=time.monotonic, perf_counter=time.perf_counter, time=time.time,
                                                         sleep=lambda s: (slept.append(s), time.sleep(s))[1]))
    with ScriptedChatServer([{'status': 429}, {'status': 503}, '{"question": "What is a chirp mass?"}']) as srv:
        llm = llm_for(srv, tmp_path, 'backoff=0.2')
        r = llm.chat(ASK, schema=SCHEMA)
        assert (r.data, r.attempts, srv.n_calls) == ({'question': 'What is a chirp mass?'}, 3, 3)
        assert len(slept) == 2 and 0.15 <= slept[0] <= 0.2 and 0.3 <= slept[1] <= 0.4, slept   # 0.2 s then 0.4 s, less ≤ 25 % jitter
        assert llm.stats['requests'] == 3 and llm.stats['failures'] == 0

def test_retry_after_is_honoured(tmp_path):
    with ScriptedChatServer([{'status': 429, 'headers': {'Retry-After': '0.4'}}, 'fine']) as srv:
        r = llm_for(srv, tmp_path).chat(ASK)
        assert r.text == 'fine' and srv.requests[1]['start'] - srv.requests[0]['start'] >= 0.39

def test_retries_exhausted_is_recorded_not_cached(tmp_path):
    with ScriptedChatServer(default={'status': 500}) as srv:
        llm = llm_for(srv, tmp_path, 'backoff=0.01&max_retries=2')
        r = llm.chat(ASK, raise_on_error=False)
        assert not r.ok and r.attempts == 3 and srv.n_calls == 3
        assert r.error.startswith(f"openai model 'tiny' at {srv.base_url}/chat/completions: HTTP 500") and 'gave up after 3 attempt(s)' in r.error
        with pytest.raises(LLMError, match='HTTP 500'): llm.chat(ASK)
        srv.default = 'back again'                        # the server recovers: a transport failure was not cached
        assert llm.chat(ASK).text == 'back again'

def test_client_error_not_retried(tmp_path):
    with ScriptedChatServer(default={'status': 404}) as srv:
        r = llm_for(srv, tmp_path).chat(ASK, raise_on_error=False)
        assert srv.n_calls == 1 and 'HTTP 404' in r.error and r.attempts == 1

def test_timeout_recorded_with_endpoint(tmp_path, monkeypatch):
    import types, docbench_nb.llm as L
    slept = []                                              # the backoff the client chose, recorded rather than timed
    monkeypatch.setattr(L, 'time', types.SimpleNamespace(monotonic=time.monotonic, perf_counter=time.perf_counter, time=time.time,
                                                         sleep=lambda s: (slept.append(s), time.sleep(s))[1]))
    with ScriptedChatServer(default={'content': 'too late', 'delay': 3}) as srv:
        llm = llm_for(srv, tmp_path, 'timeout=0.3&max_retries=1&backoff=0.01')
        r = llm.chat(ASK, raise_on_error=False)
        # counted, not timed: the timeout path was taken on both attempts (the 3 s 'too late' answer never came back),
        # the server saw exactly the two requests, and one 0.01 s backoff (less jitter) was slept between them
        assert r.error == f"openai model 'tiny' at {srv.base_url}/chat/completions: timed out after 0.3 s; gave up after 2 attempt(s)"
        assert (r.text, r.attempts, srv.n_calls) == ('', 2, 2) and all(q['json']['messages'] == ASK for q in srv.requests)
        assert len(slept) == 1 and slept[0] <= 0.01, slept
        assert (llm.stats['requests'], llm.stats['failures'], llm.stats['cache_hits']) == (2, 1, 0), llm.stats

def test_connection_refused(tmp_path):
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0)); port = s.getsockname()[1]          # a port nobody listens on
    r = make_llm(f'openai:tiny@http://127.0.0.1:{port}/v1?max_retries=1&backoff=0.01', cache_dir=tmp_path).chat(ASK, raise_on_error=False)
    assert f'127.0.0.1:{port}/v1/chat/completions: connection failed' in r.error and r.attempts == 2

def test_malformed_json_repaired(tmp_path):
    with ScriptedChatServer(['Sure: {"question": "What is', '```json\n{"question": "What sets the chirp mass?"}\n```']) as srv:
        r = llm_for(srv, tmp_path).chat(ASK, schema=SCHEMA)
        assert (r.data, r.attempts, srv.n_calls) == ({'question': 'What sets the chirp mass?'}, 2, 2)
        sent = srv.requests[1]['json']['messages']
        assert sent[-2] == {'role': 'assistant', 'content': 'Sure: {"question": "What is'}
        assert 'holds no JSON object' in sent[-1]['content'] and sent[0]['role'] == 'system' and '"minLength": 8' in sent[0]['content']
        assert all(q['json']['response_format'] == {'type': 'json_object'} for q in srv.requests)

def test_invalid_after_repairs_is_an_error_and_cached_as_failure(tmp_path):
    with ScriptedChatServer(['no json at all', '{"question": 7}', '{"question": "Why?"}'], default='{"question": "Why does it chirp?"}') as srv:
        llm = llm_for(srv, tmp_path)
        r = llm.chat(ASK, schema=SCHEMA, raise_on_error=False)
        assert not r.ok and r.data is None and r.text == '{"question": "Why?"}' and r.attempts == 3 and srv.n_calls == 3
        assert r.error == "openai:tiny: no valid JSON after 2 repair(s): the JSON object does not match the schema at question: 'Why?' is too short"
        with pytest.raises(LLMError, match='no valid JSON after 2 repair'): llm.chat(ASK, schema=SCHEMA)   # cached failure, no request
        again = llm.chat(ASK, schema=SCHEMA, raise_on_error=False)
        assert again.cached and again.error == r.error and srv.n_calls == 3
        fixed = llm.chat(ASK, schema=SCHEMA, retry_failures=True)
        assert fixed.data == {'question': 'Why does it chirp?'} and not fixed.cached and srv.n_calls == 4
        assert llm.chat(ASK, schema=SCHEMA).cached                                    # the success replaced the failure

def test_server_without_json_mode(tmp_path):
    with ScriptedChatServer(default='{"question": "Which detector saw it first?"}', json_mode=False) as srv:
        llm = llm_for(srv, tmp_path)
        assert llm.chat(ASK, schema=SCHEMA).data == {'question': 'Which detector saw it first?'}
        assert [('response_format' in q['json']) for q in srv.requests] == [True, False]
        llm.chat(ASK + [{'role': 'user', 'content': 'another'}], schema=SCHEMA)
        assert 'response_format' not in srv.requests[-1]['json'] and srv.n_calls == 3    # remembered: no second 400

def test_chat_many_concurrency_order_and_cache(tmp_path):
    n, delay = 8, 0.4
    reqs = [[{'role': 'user', 'content': f'question {i}'}] for i in range(n)]
    echo = lambda req: {'content': req['messages'][-1]['content'].upper(), 'delay': delay}
    with ScriptedChatServer(default=echo) as srv:
        one = llm_for(srv, tmp_path / 'seq', 'concurrency=1'); seq = one.chat_many(reqs)
        assert srv.peak == 1 and srv.n_calls == n                            # counted: all n sent, never two in flight
        assert (one.stats['requests'], one.stats['cache_hits']) == (n, 0) and not any(r.cached for r in seq)
        srv.peak = 0
        llm = llm_for(srv, tmp_path / 'par', 'concurrency=4')
        par = llm.chat_many(reqs)
        assert [r.text for r in par] == [r.text for r in seq] == [f'QUESTION {i}' for i in range(n)]     # order kept
        assert srv.peak == 4 and srv.n_calls == 2 * n                        # counted: four requests in flight at once
        calls = srv.n_calls
        again = llm_for(srv, tmp_path / 'par', 'concurrency=4')            # a rerun: new process state, same cache
        rs = again.chat_many(reqs)
        assert srv.n_calls == calls and all(r.cached for r in rs)          # counted: no request reached the server
        assert [r.text for r in rs] == [r.text for r in par]
        assert (again.stats['calls'], again.stats['cache_hits'], again.stats['requests']) == (n, n, 0)

def test_chat_many_records_failures(tmp_path):
    script = [{'status': 500}] + ['{"question": "What is strain noise?"}'] * 2
    with ScriptedChatServer(script) as srv:
        llm = llm_for(srv, tmp_path, 'max_retries=0&concurrency=1')
        rs = llm.chat_many([ASK, ASK + [{'role': 'user', 'content': 'b'}], 'not a message list'], schema=SCHEMA)
        assert [r.ok for r in rs] == [False, True, False] and 'HTTP 500' in rs[0].error and 'messages must be' in rs[2].error
        assert llm.stats['failures'] == 2

def test_rate_limit_spaces_requests(tmp_path, monkeypatch):
    "Every request goes through the limiter (counted), and the limiter's slots are 1/rate apart (on a fake clock, not timed)."
    with ScriptedChatServer() as srv:
        llm = llm_for(srv, tmp_path, 'rate=10&concurrency=4')
        calls, wait = [], llm.limiter.wait
        def counted_wait(): calls.append(1); return wait()
        llm.limiter.wait = counted_wait
        llm.chat_many([[{'role': 'user', 'content': f'q{i}'}] for i in range(5)])
        assert len(calls) == 5 == srv.n_calls
    import docbench_nb.llm as L
    class Clock:                                            # a fake clock: sleep advances it, nothing is timed
        t = 100.0
        def monotonic(self): return self.t
        def sleep(self, s): self.t += s
    clock = Clock(); monkeypatch.setattr(L, 'time', clock)
    lim = L.RateLimiter(rate=10)
    slots = []
    for _ in range(5): lim.wait(); slots.append(clock.t)
    assert slots == pytest.approx([100.0, 100.1, 100.2, 100.3, 100.4])
    clock.t += 5; lim.wait(); assert clock.t == pytest.approx(105.4)      # an idle limiter does not make the next call wait

def test_corrupt_entry_recomputed(tmp_path):
    with ScriptedChatServer(['first', 'second']) as srv:
        llm = llm_for(srv, tmp_path)
        assert llm.chat(ASK).text == 'first'
        llm.cache_path(llm.cache_key(ASK)).write_text('{"ok": tru')
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter('always'); r = llm.chat(ASK)
        assert r.text == 'second' and not r.cached and any('not valid JSON' in str(x.message) for x in w)

def test_cache_key_covers_the_request(tmp_path):
    with ScriptedChatServer() as srv:
        llm = llm_for(srv, tmp_path)
        keys = {llm.cache_key(ASK), llm.cache_key(ASK, temperature=0.5), llm.cache_key(ASK, max_tokens=10), llm.cache_key(ASK, seed=1),
                llm.cache_key(ASK, schema=SCHEMA), llm.cache_key(ASK, prompt_version='v2'), make_llm(f'openai:other@{srv.base_url}', cache_dir=tmp_path).cache_key(ASK)}
        assert len(keys) == 7
        # every byte sent: the JSON instruction (its style) and the repair message added to a schema request are in the key
        import docbench_nb.llm as L
        plain, full = llm.cache_key(ASK), llm.cache_key(ASK, schema=SCHEMA)
        llm.schema_style = 'keys'
        assert llm.cache_key(ASK, schema=SCHEMA) != full and llm.cache_key(ASK) == plain
        llm.schema_style = 'full'
        L._REPAIR, repair = L._REPAIR + ' Please.', L._REPAIR
        try: assert llm.cache_key(ASK, schema=SCHEMA) != full and llm.cache_key(ASK) == plain
        finally: L._REPAIR = repair

@pytest.mark.slow
@pytest.mark.timeout(900)
def test_smollm2_json_answer_and_cache(tmp_path, monkeypatch):
    import docbench_nb.llm as L, transformers
    work = {'gguf_reads': 0, 'loads': [], 'hashed': []}          # counted, not timed: GGUF reads, model loads, file hashes
    real_load, real_hash = transformers.AutoModelForCausalLM.from_pretrained, L.file_sha256
    def load(*a, **k):
        if k.get('gguf_file'): work['gguf_reads'] += 1
        else: work['loads'].append(str(a[0]))
        return real_load(*a, **k)
    monkeypatch.setattr(transformers.AutoModelForCausalLM, 'from_pretrained', load)
    monkeypatch.setattr(L, 'file_sha256', lambda p, *a, **k: (work['hashed'].append(str(p)), real_hash(p, *a, **k))[1])
    llm = make_llm('local', cache_dir=tmp_path)                  # converts the GGUF
    assert work['gguf_reads'] == 1 and [Path(x).name for x in work['hashed']] == [L.SMOLLM2_GGUF]
    llm.load()
    done = Path(llm.path) / 'complete.json'
    before = (os.stat(llm.path).st_ino, done.stat().st_ino, done.stat().st_mtime_ns)
    work.update(gguf_reads=0, loads=[], hashed=[])
    again = make_llm('local', cache_dir=tmp_path); again.load()
    # the second make_llm + load used the converted copy as it was: no GGUF read, no 98 MB hash (remembered), the same
    # folder and completion marker (a reconversion replaces both), and one load of the converted folder
    assert work == {'gguf_reads': 0, 'loads': [str(llm.path)], 'hashed': []}, work
    assert (again.path, (os.stat(again.path).st_ino, done.stat().st_ino, done.stat().st_mtime_ns)) == (llm.path, before)
    assert isinstance(llm, LocalLLM) and llm.fingerprint == again.fingerprint
    schema = {'type': 'object', 'properties': {'answer': {'type': 'string'}}, 'required': ['answer']}
    q = [{'role': 'user', 'content': 'What is the capital of France? Answer as JSON like {"answer": "..."}.'}]
    t = time.perf_counter(); r = llm.chat(q, schema=schema, max_tokens=48, raise_on_error=False); t_gen = time.perf_counter() - t
    print(f'SmolLM2 reply in {t_gen:.1f} s, {r.attempts} attempt(s): {r}')
    assert r.ok and r.attempts == 1 and 'paris' in r.data['answer'].lower()     # guided decoding: valid JSON first time
    free = make_llm('local?guided=false&repairs=0', cache_dir=tmp_path).chat(q, schema=schema, max_tokens=48, raise_on_error=False)
    assert free.ok or ('no valid JSON' in free.error and free.text)           # unguided: the weak model's failure is recorded
    r2 = again.chat(q, schema=schema, max_tokens=48, raise_on_error=False)
    assert r2.cached and (r2.text, r2.data, r2.error) == (r.text, r.data, r.error) and again.stats['requests'] == 0
    # deterministic: the same question without the cache gives the same text
    r3 = again.chat(q, schema=schema, max_tokens=48, raise_on_error=False, prompt_version='again')
    assert not r3.cached and r3.text == r.text


def test_structured_outputs_step_down(tmp_path):
    # structured=true sends the schema itself; a server that refuses response_format gets JSON mode, then the prompt alone
    with ScriptedChatServer(default='{"question": "Which detector saw it first?"}', json_mode=False) as srv:
        llm = llm_for(srv, tmp_path, 'structured=true')
        assert llm.chat(ASK, schema=SCHEMA).data == {'question': 'Which detector saw it first?'}
        fmts = [(q['json'].get('response_format') or {}).get('type') for q in srv.requests]
        assert fmts == ['json_schema', 'json_object', None]
        assert srv.requests[0]['json']['response_format']['json_schema']['schema'] == SCHEMA
        assert not llm.fingerprint.endswith('+schema')                  # later answers are cached as what they are
    with ScriptedChatServer(default='{"question": "Which detector saw it first?"}') as srv:
        llm = llm_for(srv, tmp_path / 'b', 'structured=true')
        llm.chat(ASK, schema=SCHEMA); llm.chat(ASK)                    # no schema: no response_format at all
        assert [('response_format' in q['json']) for q in srv.requests] == [True, False]
        assert llm.fingerprint != llm_for(srv, tmp_path, '').fingerprint

@pytest.mark.slow
@pytest.mark.timeout(600)
def test_openai_client_against_the_bundled_model_on_loopback(tmp_path):
    from docbench_nb.testing import model_chat_server
    with model_chat_server(make_llm('local', cache_dir=tmp_path)) as srv:
        llm = make_llm(f'openai:smollm2@{srv.base_url}?structured=true&concurrency=2', cache_dir=tmp_path)
        judge = {'type': 'object', 'properties': {'valid': {'type': 'boolean'}, 'query': {'type': ['string', 'null']}}, 'required': ['valid', 'query']}
        cap = {'type': 'object', 'properties': {'answer': {'type': 'string'}}, 'required': ['answer']}
        rs = llm.chat_many([[{'role': 'user', 'content': f'What is the capital of {c}? Answer as JSON like {{"answer": "..."}}.'}]
                            for c in ('France', 'Italy')], schema=cap, max_tokens=24)
        assert all(r.ok and r.data['answer'].strip() for r in rs), rs     # two in flight: the server's model is loaded once, safely
        assert rs[0].ok and 'paris' in rs[0].data['answer'].lower() and rs[0].completion_tokens > 0, rs[0]
        r = llm.chat([{'role': 'user', 'content': 'Is "What is a thing?" a specific question? Suggest a better one.'}], schema=judge, max_tokens=48)
        assert isinstance(r.data['valid'], bool) and (r.data['query'] is None or r.data['query'].strip())
        assert all((q['json'].get('response_format') or {}).get('type') == 'json_schema' for q in srv.requests)
