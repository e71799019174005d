"""Requests per second of the query pipeline's LLM stages against a chat endpoint that takes a fixed time per answer.

A loopback OpenAI-compatible server (`docbench_nb.testing.ScriptedChatServer`) answers every request after `--latency`
seconds with valid JSON for the stage's schema; the generation stage (over N synthetic evidence items of the three
types, so three prompts) and then the rephrase stage (levels 1-3, each written then checked: six calls a query, in
sequence within a query) run through `openai:bench@URL?concurrency=C`, with a fresh LLM cache for each C. One JSON line
per concurrency: requests/s, the server's peak of requests in flight, wall time, and the speed-up over concurrency 1
measured in the same process; `ideal_requests_per_s` is what the latency allows (min(C, items) / latency).

    python bench/queries_throughput.py --latency 0.2 --concurrency 1,8,32,64 [--n 64]
"""
import argparse, json, sys, tempfile, time
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
ap.add_argument('--latency', type=float, default=0.2, help='seconds the server waits before each answer')
ap.add_argument('--concurrency', default='1,8,32,64', help='comma-separated concurrency values (1 is always measured first)')
ap.add_argument('--n', type=int, default=0, help='synthetic evidence items / queries (default: the largest concurrency)')
a = ap.parse_args()
levels = sorted({1, *(int(x) for x in a.concurrency.split(',') if x.strip())})
n = a.n or max(levels)

from docbench_nb.llm import make_llm
from docbench_nb.testing import ScriptedChatServer
from docbench_nb.queries.evidence import Evidence
from docbench_nb.queries.llm_stages import fenced_text, generate_stage, rephrase_stage

TOPICS = ['coral bleaching', 'stellar metallicity', 'dengue incidence', 'garnet sintering', 'bat foraging', 'strain noise',
          'graphene doping', 'soil carbon']

def answer(req):
    "Valid JSON for the generation, rephrasing and check prompts, after the fixed latency."
    sys_, user = req['messages'][0]['content'], req['messages'][-1]['content']
    q = fenced_text(user, 'QUESTION') or ''
    if 'benchmark of scientific' in sys_:
        ev = (fenced_text(user, 'EVIDENCE') or '').split()
        words = [w for w in ev if w.isalpha() and len(w) > 6][:3] + [w for w in ev if w.isdigit()]     # the site number: one query each
        a_ = {'question': f"Which {' '.join(words)} values changed most across the sampled seasons?", 'answer': 'the third'}
    elif 'You rephrase' in sys_:
        level = 1 + ('new wording' in user) + ('Restructure' in user)
        a_ = {'rephrasing': f'Level {level} variant: {q}'}
    elif 'You compare' in sys_: a_ = {'same_meaning': True, 'same_answer': True}
    else: a_ = {}
    return {'content': json.dumps(a_), 'delay': a.latency}

evs = [Evidence(f'e{i}', f'paper-{i}', ('text', 'table', 'figure')[i % 3],
                f'Repeated measurements of {TOPICS[i % len(TOPICS)]} at site {i} across three seasonal campaigns.')
       for i in range(n)]

def run(srv, fn):
    "(result, requests, wall seconds, peak in flight) of one stage run."
    srv.peak, before, t = 0, srv.n_calls, time.perf_counter()
    res = fn()
    return res, srv.n_calls - before, time.perf_counter() - t, srv.peak

rows, base = [], None
with ScriptedChatServer(default=answer) as srv, tempfile.TemporaryDirectory() as tmp:
    for c in levels:
        llm = make_llm(f'openai:bench@{srv.base_url}?concurrency={c}&max_retries=0', cache_dir=Path(tmp) / f'c{c}')
        # warm-up, not measured: the first request imports jsonschema and builds the client's models (seconds, once)
        llm.chat([{'role': 'user', 'content': f'warm-up {c}'}], schema={'type': 'object'}, raise_on_error=False)
        (kept, grecs), g_req, g_wall, g_peak = run(srv, lambda: generate_stage(evs, llm))
        (reph, rrecs), r_req, r_wall, r_peak = run(srv, lambda: rephrase_stage(kept, llm))
        if len(kept) != n or len(reph) != n: sys.exit(f'concurrency {c}: {len(kept)} generated, {len(reph)} rephrased of {n}')
        stage = lambda req, wall, peak, items: {'requests': req, 'wall_s': round(wall, 3), 'requests_per_s': round(req / wall, 2),
                                               'peak_in_flight': peak, 'ideal_requests_per_s': round(min(c, items) / a.latency, 2)}
        req, wall = g_req + r_req, g_wall + r_wall
        row = {'concurrency': c, 'latency_s': a.latency, 'n': n, 'requests': req, 'wall_s': round(wall, 3),
               'requests_per_s': round(req / wall, 2), 'peak_in_flight': max(g_peak, r_peak),
               'generate': stage(g_req, g_wall, g_peak, n), 'rephrase': stage(r_req, r_wall, r_peak, n),
               'records': [r.to_dict() | {'seconds': 0} for r in grecs + rrecs]}
        base = base or row
        row['speedup_vs_1'] = round(row['requests_per_s'] / base['requests_per_s'], 2)
        row['same_records_as_1'] = row['records'] == base['records']
        row['same_requests_as_1'] = row['requests'] == base['requests']        # every request made once, none twice
        print(json.dumps({k: v for k, v in row.items() if k != 'records'}), flush=True)
        rows.append(row)
