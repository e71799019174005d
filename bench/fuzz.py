"""Longer fuzz runs than the test suite's: seeded mutations of every shared paper, parsed in bounded workers, and the
cost of the hostile inputs of issue #12 (unclosed environments repeated up to ~1 MB), with the environment index on
and off (off = the old scan from each opening).

    python bench/fuzz.py [--per-paper 20] [--seed 0] [--workers N] [--time-limit 60] [--out results/reliability]

Prints and writes `fuzz_summary.json`: cases, crashes by exception type (with the first example), timeouts, the
slowest case, and the hostile-input timings."""
import argparse, json, os, random, sys, time, traceback
from collections import Counter
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / 'tests'))
from docbench_nb.latex import tex
from docbench_nb.latex.sources import iter_sources
from docbench_nb.latex.flatten import flatten_latex
from docbench_nb.latex.parse import parse_text
from docbench_nb.workers import map_bounded, WorkFailure
from test_fuzz import mutate

SHARED = Path(__file__).resolve().parents[2] / 'shared' / 'corpus' / 'papers'


def _case(arg):
    "Parse one mutated text; `(seconds, error or None)`."
    text, pid = arg
    t = time.perf_counter()
    try: parse_text(text, id=pid); err = None
    except Exception as e: err = f'{type(e).__name__}: {e}'[:300] + ' | ' + traceback.format_exc().splitlines()[-3].strip()
    return time.perf_counter() - t, err


def mutation_run(per_paper, seed, workers, time_limit):
    rng, cases = random.Random(seed), []
    for src in iter_sources(str(SHARED)):
        text = flatten_latex(src).text
        for _ in range(per_paper):
            bad, what = mutate(text, rng)
            cases.append((Path(src).name, what, bad))
    t = time.time()
    outs = map_bounded(_case, [(c[2], c[0]) for c in cases], workers=workers, time_limit=time_limit, desc='fuzz')
    crashes, timeouts, by_kind, slowest = {}, [], Counter(), (0.0, None, None, 0)
    for (pid, what, bad), o in zip(cases, outs):
        by_kind[what] += 1
        if isinstance(o, WorkFailure):
            timeouts.append({'paper': pid, 'mutation': what, 'failure': o.reason, 'chars': len(bad)}); continue
        dt, err = o
        if err:
            k = err.split(':')[0]
            crashes.setdefault(k, {'count': 0, 'first': {'paper': pid, 'mutation': what, 'error': err}})['count'] += 1
        if dt > slowest[0]: slowest = (dt, pid, what, len(bad))
    return {'cases': len(cases), 'seed': seed, 'per_paper': per_paper, 'wall_s': round(time.time() - t, 1),
            'mutations': dict(by_kind), 'crashes': crashes, 'timeouts': timeouts,
            'slowest': {'seconds': round(slowest[0], 3), 'paper': slowest[1], 'mutation': slowest[2], 'chars': slowest[3]}}


def _timed_parse(arg):
    if arg is None: return None                                 # a second item, so the case runs in its own worker
    env, n, index = arg
    tex._INDEX_MIN = 8192 if index else 10**12                  # off: the old scan from every opening
    body = ('\\begin{%s}{cc} a & b \\\\\n' % env) * n
    t = time.perf_counter()
    parse_text('\\documentclass{article}\\begin{document}\n' + body + '\\end{document}')
    return time.perf_counter() - t, len(body)


def hostile_timings(time_limit):
    rows = []
    for env in ('tabular', 'comment'):
        for n, index in [(4_000, False), (8_000, False), (4_000, True), (8_000, True), (18_000, True), (36_000, True)]:
            o = map_bounded(_timed_parse, [(env, n, index), None], workers=2, time_limit=time_limit, progress=False)[0]
            r = {'env': env, 'openings': n, 'index': index}
            if isinstance(o, WorkFailure): r['failure'] = o.reason
            else: r['seconds'], r['chars'] = round(o[0], 2), o[1]
            print(r, flush=True); rows.append(r)
    return rows


if __name__ == '__main__':
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument('--per-paper', type=int, default=20); ap.add_argument('--seed', type=int, default=0)
    ap.add_argument('--workers', type=int, default=None); ap.add_argument('--time-limit', type=float, default=60)
    ap.add_argument('--out', default='results/reliability'); ap.add_argument('--skip-hostile', action='store_true')
    a = ap.parse_args()
    summary = {'mutation_run': mutation_run(a.per_paper, a.seed, a.workers, a.time_limit)}
    print(json.dumps(summary['mutation_run'], indent=1)[:4000], flush=True)
    if not a.skip_hostile: summary['hostile'] = hostile_timings(a.time_limit * 5)
    Path(a.out).mkdir(parents=True, exist_ok=True)
    (Path(a.out) / 'fuzz_summary.json').write_text(json.dumps(summary, indent=1))
    print(f"wrote {Path(a.out) / 'fuzz_summary.json'}")
