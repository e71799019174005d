"""`docbench queries build` against a real chat-completions server on loopback: the bundled SmolLM2 served the way vLLM
serves a model (OpenAI protocol, `response_format=json_schema` answered by guided decoding), reached through the
`openai` client with retries, concurrency and the on-disk cache — the same command a user runs against vLLM, Ollama or
OpenAI, with only `--llm` changed.

    python bench/queries_loopback.py --corpus ../shared/corpus/papers --evidence-papers 12 --out /tmp/q_loopback [--kill-after 60]

With `--kill-after S` the build is killed after S seconds and started again: the printout shows how many model calls
the resumed run made (only what the killed one had not finished).
"""
import argparse, json, subprocess, sys, time
from pathlib import Path

ap = argparse.ArgumentParser()
ap.add_argument('--corpus', required=True); ap.add_argument('--out', required=True)
ap.add_argument('--evidence-papers', default='12'); ap.add_argument('--types', default='text,table,figure')
ap.add_argument('--per-paper', default='1'); ap.add_argument('--kill-after', type=float, default=0)
ap.add_argument('--concurrency', type=int, default=2)
a = ap.parse_args()

from docbench_nb.testing import model_chat_server

def build(url, timeout=None):
    cmd = [str(Path(sys.executable).parent / 'docbench'), 'queries', 'build', '--corpus', a.corpus,
           '--llm', f'openai:smollm2@{url}?structured=true&concurrency={a.concurrency}&timeout=300',
           '--types', a.types, '--per-paper', a.per_paper, '--evidence-papers', a.evidence_papers, '--out', a.out]
    t = time.time()
    try: p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired: return None, time.time() - t
    if p.returncode: sys.exit(f'build failed ({p.returncode}):\n{p.stderr[-3000:]}')
    return p.stdout, time.time() - t

with model_chat_server() as srv:
    print(f'serving SmolLM2 at {srv.base_url}')
    if a.kill_after:
        out, secs = build(srv.base_url, timeout=a.kill_after)
        print(f'killed after {secs:.0f} s with {srv.n_calls} model requests served')
    before = srv.n_calls
    out, secs = build(srv.base_url)
    print(out)
    print(f'build: {secs:.0f} s, {srv.n_calls - before} model requests served to this run ({srv.n_calls} in all)')
    before = srv.n_calls
    out, secs = build(srv.base_url)
    print(f'rerun: {secs:.0f} s, {srv.n_calls - before} model requests')
    att = json.loads((Path(a.out) / 'attrition.json').read_text())
    print(json.dumps(att['cost'], indent=1))
