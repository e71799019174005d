"""The local model's KV-cache reuse (`PrefixCache`): the same greedy answers as encoding the whole text every time, with the
work counted by a hook on the model (forward passes and tokens fed), not timed."""
import json, pytest, torch
from docbench_nb.llm import LocalLLM, PrefixCache, guided_json, make_llm

pytestmark = pytest.mark.timeout(600)
JUDGE = {'type': 'object', 'properties': {'valid': {'type': 'boolean'}, 'labels': {'type': 'array', 'items': {'enum': ['generic', 'ungrounded']}},
                                          'query': {'type': ['string', 'null']}, 'kind': {'enum': ['text', 'table', 'figure']}}}
GEN = {'type': 'object', 'properties': {'question': {'type': 'string'}, 'answer': {'type': 'string'}}}
SYS_J, SYS_G = 'You judge search queries for a benchmark of scientific papers.', 'You write questions for a benchmark of scientific papers.'
ASKS = [(SYS_J, 'QUESTION: What does the table show about it?\nIs it specific? Give labels and a better query.', JUDGE),
        (SYS_J, 'QUESTION: Which dopant raised the critical temperature of YBCO films?\nIs it specific? Give labels and a better query.', JUDGE),
        (SYS_G, 'EVIDENCE: Table 2 lists the critical temperature of YBCO films doped with Zn, Ni and Ca.\nWrite one question and its answer.', GEN),
        (SYS_G, 'EVIDENCE: Figure 3 shows coral bleaching rates at four reef sites in 2016.\nWrite one question and its answer.', GEN)]

@pytest.fixture(scope='module')
def counted():
    "The bundled model (converted once in the default cache) with a hook that counts forward passes and tokens fed."
    llm = LocalLLM()
    model, tok = llm.load()
    work = {'forwards': 0, 'tokens': 0}
    def hook(m, args, kwargs):
        x = kwargs.get('input_ids', args[0] if args else None)
        work['forwards'] += 1; work['tokens'] += int(x.shape[1])
    h, threads = model.register_forward_pre_hook(hook, with_kwargs=True), torch.get_num_threads()
    torch.set_num_threads(1)                 # a 135M model on shared CPUs: one thread each is faster than contending for two
    yield llm, model, tok, work
    h.remove(); torch.set_num_threads(threads)

def _prompt(tok, sys_, user):
    return tok.apply_chat_template([{'role': 'system', 'content': sys_}, {'role': 'user', 'content': user}], add_generation_prompt=True, tokenize=False)

def test_guided_fields_continue_from_the_cache(counted):
    llm, model, tok, work = counted
    runs = {}
    with torch.inference_mode():
        for name, shared in (('reference', None), ('cached', PrefixCache(model, tok))):
            work.update(forwards=0, tokens=0)
            outs, stats = [], {'forwards': 0, 'encoded': 0}
            for sys_, user, schema in ASKS:     # the reference: a fresh, non-reusing cache for every request (the previous code's work)
                pc = shared or PrefixCache(model, tok, reuse=False)
                outs.append(guided_json(model, tok, _prompt(tok, sys_, user), schema, max_tokens=8, prefix=pc))
                if shared is None: stats = {k: stats[k] + pc.stats[k] for k in stats}
            runs[name] = (outs, dict(work), stats if shared is None else {k: shared.stats[k] for k in stats})
    (ref, ref_work, ref_stats), (new, new_work, new_stats) = runs['reference'], runs['cached']
    assert [c.text for c in new] == [c.text for c in ref] and new == ref           # identical answers, counts included
    assert all(json.loads(c.text).keys() == s['properties'].keys() for c, (_, _, s) in zip(new, ASKS))
    assert ref_stats == {'forwards': ref_work['forwards'], 'encoded': ref_work['tokens']}     # PrefixCache counts what the hook saw
    assert new_stats == {'forwards': new_work['forwards'], 'encoded': new_work['tokens']}
    assert new_work['forwards'] == ref_work['forwards']                               # the same steps, each shorter
    # every field of the reference re-read the whole prompt; the cached path read each request's text about once
    finals = sum(len(tok(_prompt(tok, s, u) + c.text, add_special_tokens=False)['input_ids']) for (s, u, _), c in zip(ASKS, new))
    prompts = sum(c.prompt_tokens for c in new)
    # (plus, per alternative scored, the token before it and the alternative's own tokens, read again)
    alts = sum(len(v.get('enum', ())) or 2 for _, _, s in ASKS for v in s['properties'].values() if v.get('type') != 'string' and 'items' not in v)
    assert ref_work['tokens'] > 3 * prompts and new_work['tokens'] < finals + 4 * alts, (ref_work, new_work, prompts, finals, alts)

def test_local_llm_carries_the_cache_across_requests(counted, tmp_path):
    llm, model, tok, work = counted
    ref = make_llm('local?kv_cache=false'); ref._loaded = llm._loaded          # the same model object, no second load
    assert ref.fingerprint == llm.fingerprint and not ref.kv_cache             # same answers: the same cache entries
    asks = [[{'role': 'system', 'content': SYS_G}, {'role': 'user', 'content': u}] for _, u, _ in ASKS[2:]]
    fed = {}
    for name, m in (('reference', ref), ('cached', llm)):
        m.cache_dir = tmp_path / name                                          # replies cached apart; the model stays in the default cache
        work.update(forwards=0, tokens=0)
        guided = [m.chat(a, schema=GEN, max_tokens=10) for a in asks]
        free = m.chat(asks[0], max_tokens=6)                                   # no schema: plain generation, from the same cache
        fed[name] = (dict(work), [(r.text, r.data, r.prompt_tokens, r.completion_tokens) for r in guided + [free]])
    assert fed['cached'][1] == fed['reference'][1]
    assert fed['cached'][0]['forwards'] == fed['reference'][0]['forwards'] and fed['cached'][0]['tokens'] < fed['reference'][0]['tokens'] / 2
    # the second request shares the system prompt and the instruction with the first: only what differs is read
    sys_len = len(tok.apply_chat_template([{'role': 'system', 'content': SYS_G}], tokenize=False))
    assert llm.prefix.stats['reused'] > sys_len // 8
    # the dry run's token count (`count_tokens`) is what a real request reports
    assert all(r[2] == llm.count_tokens(a, GEN) for r, a in zip(fed['cached'][1], asks))
    assert fed['cached'][1][-1][2] == llm.count_tokens(asks[0])
