"""Guided generation requests of a real build, answered by the previous `docbench_nb/llm.py` and the current one in
alternation (one process, one model object, `torch` 1 thread), so that the load of a shared machine falls on both alike.

`--evidence` is an `evidence.jsonl` a build (or a dry run) wrote; the first `--n` items are put through their
generation prompt as the local backend sends it (chat template, JSON instruction). Each round answers all of them with
one code, then with the other (the order swapped every round); the current code keeps one `PrefixCache` per round, as
`LocalLLM` does. Printed: one JSON line with the seconds of each, the ratio, tokens encoded (forward hook) and
whether the answers are identical.

    git show HEAD:docbench_nb/llm.py > /tmp/old_llm.py
    docbench queries build ... --dry-run --out OUT          # writes OUT/evidence.jsonl
    python bench/queries_local_kv_interleaved.py --evidence OUT/evidence.jsonl --previous /tmp/old_llm.py --n 4 --rounds 2
"""
import argparse, json, sys, time
from pathlib import Path

ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
ap.add_argument('--evidence', required=True)
ap.add_argument('--previous', default='/tmp/old_llm.py')
ap.add_argument('--n', type=int, default=4)
ap.add_argument('--rounds', type=int, default=2)
ap.add_argument('--max-tokens', type=int, default=200)
ap.add_argument('--out', default=None)
a = ap.parse_args()

import torch
src = Path(a.previous).read_text()
old = type(sys)('docbench_nb._previous_llm'); old.__package__, old.__file__ = 'docbench_nb', a.previous
sys.modules[old.__name__] = old
exec(compile(src.replace("Registry('llm',", "Registry('llm-previous',"), a.previous, 'exec'), old.__dict__)
from docbench_nb.llm import LocalLLM, PrefixCache, guided_json, _with_instruction, _json_instruction
from docbench_nb.queries.llm_stages import generation_prompt

torch.set_num_threads(1)
llm = LocalLLM(); model, tok = llm.load()
work = {'old': 0, 'new': 0, 'who': 'old'}
model.register_forward_pre_hook(lambda m, args, kw: work.__setitem__(work['who'], work[work['who']] + int(kw.get('input_ids', args[0] if args else None).shape[1])), with_kwargs=True)
evs = [json.loads(l) for l in Path(a.evidence).read_text().splitlines() if l.strip()][:a.n]
reqs = []
for e in evs:
    pr = generation_prompt(e['evidence_type'])
    msgs = _with_instruction(pr.messages(evidence=e['text']), _json_instruction(pr.schema, llm.schema_style))
    reqs.append((tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False), pr.schema))
secs, outs = {'old': 0.0, 'new': 0.0}, {'old': [], 'new': []}
with torch.inference_mode():
    for rnd in range(a.rounds):
        for name in (('old', 'new') if rnd % 2 == 0 else ('new', 'old')):
            work['who'], pc = name, PrefixCache(model, tok)
            for p, s in reqs:
                t = time.perf_counter()
                c = (old.guided_json(model, tok, p, s, max_tokens=a.max_tokens) if name == 'old'
                     else guided_json(model, tok, p, s, max_tokens=a.max_tokens, prefix=pc))
                secs[name] += time.perf_counter() - t; outs[name].append(c.text)
row = {'n': len(reqs), 'rounds': a.rounds, 'prompt_tokens': [len(tok(p, add_special_tokens=False)['input_ids']) for p, _ in reqs],
       'previous_s': round(secs['old'], 1), 'current_s': round(secs['new'], 1), 'speedup': round(secs['old'] / secs['new'], 2),
       'previous_tokens_encoded': work['old'], 'current_tokens_encoded': work['new'], 'same_answers': outs['old'] == outs['new']}
print(json.dumps(row), flush=True)
if a.out: Path(a.out).write_text(json.dumps(row, indent=1) + '\n')
