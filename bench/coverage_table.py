"""Multi-perspective coverage table (issue #10): HC@10/20/100 per method on PIR dev tasks and the shared corpus,
plus the SPIN injection-layer x m ablation, with training time, parameter count and peak memory.

    nice -n 10 python bench/coverage_table.py                       # everything (see --help)
    nice -n 10 python bench/coverage_table.py --skip-ablation --expansion-limit 4

Splits (SPIN and the fine-tuned baseline never see the evaluated queries):
  perspectrum  <- trained on agnews + story + ambigqa      (leave one PIR task out)
  ambigqa      <- trained on agnews + story + perspectrum
  shared dev_perspectives.jsonl over ../shared/corpus/papers <- trained on all four PIR tasks
Ablation: trained on agnews + story + ambigqa, evaluated on perspectrum.

LLM expansion uses the local SmolLM2-135M; it is slow, so it runs on the first --expansion-limit queries of each
set, and the naive baseline is reported on the same subset next to it. Writes results/coverage/*.json and *.md.
"""
import argparse, json, os, resource, sys, time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / 'shared'
TASKS = ('perspectrum', 'agnews', 'story', 'ambigqa')


def fmt_table(rows, cols, head):
    out = ['| ' + ' | '.join(head) + ' |', '|' + '|'.join('---' for _ in head) + '|']
    for r in rows: out.append('| ' + ' | '.join(f"{r[c]:.3f}" if isinstance(r.get(c), float) else str(r.get(c, '')) for c in cols) + ' |')
    return '\n'.join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--pir', default=str(SHARED / 'pir' / 'pir_demo_dev.json'))
    ap.add_argument('--queries', default=str(SHARED / 'queries' / 'dev_perspectives.jsonl'))
    ap.add_argument('--corpus', default=str(SHARED / 'corpus' / 'papers'))
    ap.add_argument('--out', default=str(ROOT / 'results' / 'coverage'))
    ap.add_argument('--models', default=None, help='where trained models go (default: <cache>/coverage-models)')
    ap.add_argument('--cache-dir', default=None)
    ap.add_argument('--m', type=int, default=4); ap.add_argument('--epochs', type=int, default=10); ap.add_argument('--lr', type=float, default=0.02)
    ap.add_argument('--ft-epochs', type=int, default=2)
    ap.add_argument('--ablation-epochs', type=int, default=6)
    ap.add_argument('--expansion-limit', type=int, default=6, help='queries per set for LLM expansion (0: skip expansion)')
    ap.add_argument('--skip-ablation', action='store_true'); ap.add_argument('--skip-shared', action='store_true')
    ap.add_argument('--amer-epochs', type=int, default=10); ap.add_argument('--amer-lr', type=float, default=1e-3)
    ap.add_argument('--only-amer', action='store_true', help='add the AMER rows to an existing main_table.json (nothing else runs)')
    ap.add_argument('--threads', type=int, default=1, help='torch CPU threads (1 avoids OpenMP spinning on a shared 2-core box)')
    a = ap.parse_args()
    import torch
    torch.set_num_threads(a.threads)
    from docbench_nb.cache import cache_root, atomic_write_json
    from docbench_nb.retrieval.encoders import HFTextEncoder, EmbeddingCache
    from docbench_nb.cache import stage_dir
    from docbench_nb.coverage.perspectives import load_pir, load_perspective_queries
    from docbench_nb.coverage.measures import evaluate_coverage, spin_ablation
    from docbench_nb.coverage.spin import train_spin, save_spin, finetune_encoder, random_spin
    from docbench_nb.coverage.amer import train_amer, save_amer

    out = Path(a.out); out.mkdir(parents=True, exist_ok=True)
    models = Path(a.models or cache_root(a.cache_dir) / 'coverage-models')
    enc, cache = HFTextEncoder(), EmbeddingCache(stage_dir('embeddings', a.cache_dir))
    pir = {t: load_pir(a.pir, t) for t in TASKS}
    sets = {'perspectrum': (pir['perspectrum'], ['agnews', 'story', 'ambigqa']),
            'ambigqa': (pir['ambigqa'], ['agnews', 'story', 'perspectrum'])}
    if not a.skip_shared:
        from docbench_nb.latex.corpus import load_papers
        papers, _ = load_papers(a.corpus, cache_dir=a.cache_dir, progress=True)
        sets['shared'] = ((load_perspective_queries(a.queries, known_doc_ids={p.id for p in papers}), papers), list(TASKS))
    llm = None
    if a.expansion_limit and not a.only_amer:
        from docbench_nb.llm import make_llm
        llm = make_llm('local', cache_dir=a.cache_dir)

    prev = json.loads((out / 'main_table.json').read_text()) if a.only_amer else {'rows': [], 'training': {}}
    rows, trainlog, t_all = prev['rows'], prev['training'], time.time()
    for name, ((queries, corpus), train_tasks) in sets.items():
        train = [q for t in train_tasks for q in pir[t][0]]
        print(f"== {name}: {len(queries)} queries; training on {'+'.join(train_tasks)} ({len(train)} queries)", flush=True)
        train_docs = {d: t for task in train_tasks for d, t in pir[task][1].items()}     # positives: the gold documents
        if not a.only_amer:
            sp = train_spin(train, enc, m=a.m, layer='middle', epochs=a.epochs, lr=a.lr)
            save_spin(sp, models / f'spin-{name}')
            ft = finetune_encoder(train, models / f'ft-{name}', epochs=a.ft_epochs, corpus=train_docs)
            trainlog[name] = {'train_tasks': train_tasks, 'spin': {k: v for k, v in sp.config.items()}, 'finetuned': ft.train_log}
            runs = {'naive': dict(method='naive'), 'random (init scale)': dict(method='random', m=a.m),
                    'random (trained norms)': dict(method='spin', model=random_spin(enc, a.m, 'middle', norms=sp.config['noise_norms'])),
                    'finetuned': dict(method='finetuned', model=ft), 'spin': dict(method='spin', model=sp), 'oracle': dict(method='oracle')}
            for label, kw in runs.items():
                r = evaluate_coverage(queries, corpus, encoder=enc, cache=cache, progress=True, name=name, **kw)
                atomic_write_json(out / f'{name}__{label.split()[0]}{"_norm" if "norms" in label else ""}.json', r, indent=1)
                rows.append({'set': name, 'method': label, 'n_queries': r['n_queries'], 'n_perspectives': r['n_perspectives'],
                             **{k: r[k] for k in ('hc@10', 'hc@20', 'hc@100')}, 'rrf hc@10': r['by_fusion']['rrf']['hc@10'],
                             'sum hc@10': r['by_fusion']['sum']['hc@10']})
                print(rows[-1], flush=True)
            if llm is not None:
                sub = queries[:a.expansion_limit]
                every = len(sub) == len(queries)                # every query: one expansion row, next to the naive row above
                for label, kw in ((() if every else ((f'naive (first {len(sub)})', dict(method='naive')),)) +
                                  ((('expansion (local LLM)' if every else f'expansion local (first {len(sub)})'), dict(method='expansion', m=a.m, llm=llm)),)):
                    r = evaluate_coverage(sub, corpus, encoder=enc, cache=cache, progress=True, name=name, **kw)
                    atomic_write_json(out / f'{name}__{kw["method"]}{"" if every else "_subset"}.json', r, indent=1)
                    rows.append({'set': name, 'method': label, 'n_queries': r['n_queries'], 'n_perspectives': r['n_perspectives'],
                                 **{k: r[k] for k in ('hc@10', 'hc@20', 'hc@100')}, 'rrf hc@10': r['by_fusion']['rrf']['hc@10'],
                                 'sum hc@10': r['by_fusion']['sum']['hc@10']})
                    print(rows[-1], flush=True)
        am = train_amer(train, train_docs, enc, m=a.m, epochs=a.amer_epochs, lr=a.amer_lr, cache=cache)   # autoregressive head
        save_amer(am, models / f'amer-{name}')
        trainlog.setdefault(name, {})['amer'] = {k: v for k, v in am.config.items()}
        r = evaluate_coverage(queries, corpus, 'amer', encoder=enc, model=am, cache=cache, progress=True, name=name)
        atomic_write_json(out / f'{name}__amer.json', r, indent=1)
        row = {'set': name, 'method': 'amer (AR head)', 'n_queries': r['n_queries'], 'n_perspectives': r['n_perspectives'],
               **{k: r[k] for k in ('hc@10', 'hc@20', 'hc@100')}, 'rrf hc@10': r['by_fusion']['rrf']['hc@10'], 'sum hc@10': r['by_fusion']['sum']['hc@10']}
        rows = [x for x in rows if not (x['set'] == name and x['method'] == row['method'])]
        at = max((i + 1 for i, x in enumerate(rows) if x['set'] == name and x['method'] == 'spin'), default=len(rows))
        rows.insert(at, row); print(row, flush=True)
        atomic_write_json(out / 'main_table.json', {'rows': rows, 'training': trainlog}, indent=1)

    abl = []
    if not a.skip_ablation:
        train = [q for t in ('agnews', 'story', 'ambigqa') for q in pir[t][0]]
        abl = spin_ablation(train, pir['perspectrum'][0], pir['perspectrum'][1], encoder=enc, cache=cache, progress=True,
                            epochs=a.ablation_epochs, lr=a.lr)
        atomic_write_json(out / 'ablation.json', {'train': 'agnews+story+ambigqa', 'test': 'perspectrum', 'rows': abl,
                                                  'epochs': a.ablation_epochs, 'lr': a.lr}, indent=1)
    elif (out / 'ablation.json').is_file():            # keep the table of an earlier ablation run (its own settings)
        prev = json.loads((out / 'ablation.json').read_text())
        abl, a.ablation_epochs = prev['rows'], prev.get('epochs', prev['rows'][0].get('epochs', a.ablation_epochs))

    this = f"`nice -n 10 python bench/coverage_table.py {' '.join(sys.argv[1:])}` ({(time.time() - t_all) / 60:.1f} min, {a.threads} torch thread(s))"
    if a.only_amer:          # the rest of the table came from the earlier run: keep its command line
        import re
        old = re.search(r'^Command: (`[^`]*` \((?:[^()]|\([^()]*\))*\))', (out / 'coverage_table.md').read_text(), re.M)
        this = f"{old.group(1) if old else 'an earlier run'}; AMER rows added by {this}"
    md = ['# Multi-perspective coverage (issue #10)', '',
          f"Command: {this}. Encoder all-MiniLM-L6-v2; multi-vector rankings fused by round robin (RRF / score-sum HC@10 "
          f"alongside); SPIN m={a.m}, middle layer, {a.epochs} epochs, lr {a.lr}; fine-tuned: top 2 blocks, {a.ft_epochs} epochs, InfoNCE, positive = one gold document per perspective joined; "
          f"AMER: GRU head emitting m={a.m} vectors over the frozen encoder, Hungarian-matched InfoNCE, {a.amer_epochs} epochs, lr {a.amer_lr}.", '',
          'Splits: perspectrum <- trained on agnews+story+ambigqa; ambigqa <- agnews+story+perspectrum; shared '
          'dev_perspectives.jsonl (80-paper corpus) <- all four PIR tasks. ' +
          (f'Expansion (local SmolLM2-135M) on every query of each set.' if any(r['method'] == 'expansion (local LLM)' for r in rows) else
           f'Expansion (local SmolLM2-135M) only on the first {a.expansion_limit} queries of each set, with naive on the same subset.'), '',
          fmt_table(rows, ['set', 'method', 'n_queries', 'n_perspectives', 'hc@10', 'hc@20', 'hc@100', 'rrf hc@10', 'sum hc@10'],
                    ['set', 'method', 'queries', 'perspectives', 'HC@10', 'HC@20', 'HC@100', 'RRF HC@10', 'sum HC@10']), '',
          '## Training cost', '', '| eval set | model | params | train s | peak RSS MB | final loss |', '|---|---|---|---|---|---|']
    for name, t in trainlog.items():
        for kind in ('spin', 'finetuned', 'amer'):
            if kind not in t: continue
            c = t[kind]
            md.append(f"| {name} | {kind} | {c['n_params']} | {c['train_s']} | {c['peak_rss_mb']} | {c['loss'][-1]:.3f} |")
    if abl:
        md += ['', f'## SPIN ablation: injection layer x m (train agnews+story+ambigqa, test perspectrum, {a.ablation_epochs} epochs)', '',
               fmt_table(abl, ['layer', 'block', 'm', 'hc@10', 'hc@20', 'hc@100', 'n_params', 'train_s', 'peak_rss_mb', 'final_loss'],
                         ['layer', 'block', 'm', 'HC@10', 'HC@20', 'HC@100', 'params', 'train s', 'peak RSS MB', 'final loss'])]
    (out / 'coverage_table.md').write_text('\n'.join(md) + '\n')
    print('\n'.join(md))


if __name__ == '__main__':
    main()
