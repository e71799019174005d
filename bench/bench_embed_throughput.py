"""CPU embedding throughput of docbench's text encoder backends against sentence-transformers' backends, one process.

    PYTHONPATH=OPTIMUM_SITE python bench/bench_embed_throughput.py --n 240 --threads 1 \
        --cache-dir /work/helpers/cache_onnx --eval --out results/bench/embed_backends.md

Rows: docbench `HFTextEncoder` with backend torch / onnx / onnx-int8, and `SentenceTransformer` with backend torch /
onnx / onnx-int8 (`export_dynamic_quantized_onnx_model`, --st-int8 config). All load the same bundled MiniLM folder
(`encoders.default_text_model_path()`; sentence-transformers works on a temporary copy, as its exports write into the
model folder), run with one torch thread and one ONNX Runtime thread (--threads), the same batch size, alternately, best
of --repeats. Texts: --n windows of --lo..--hi *words* cut from the LaTeX sources of --corpus (default ../shared/corpus/papers,
else the demo corpus), read only. Per row: units/s, ratio to sentence-transformers torch, and the vectors against
docbench torch's float32 vectors (max |diff|, mean and worst cosine).

sentence-transformers' ONNX backends need `optimum` (`optimum-onnx`), which pins transformers < 4.58; docbench runs on
transformers 5, so those rows appear only when optimum imports (e.g. from a side folder on PYTHONPATH with transformers
4.57 in it, as the recorded run did); otherwise they are listed as unavailable with the reason.

--eval also measures the retrieval cost: nDCG@10 of dense retrieval with the torch and the onnx-int8
encoder on --queries over --corpus at --chunk-size 512, through `docbench_nb.evaluate` (the same core as `docbench evaluate`).
"""
import argparse, os, shlex, shutil, sys, tempfile, time
from pathlib import Path
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / 'shared'


def default_corpus() -> Path:
    p = SHARED / 'corpus' / 'papers'
    if p.is_dir(): return p
    from docbench_nb.demo import demo_corpus_dir        # the embedded demo corpus
    return Path(demo_corpus_dir())


def word_windows(corpus: Path, n: int, lo: int, hi: int, seed: int = 0, stride: int = 3) -> list:
    "Up to `n` windows of `lo`..`hi` whitespace-separated words of the `.tex` files under `corpus` (first 60,000 chars each)."
    rng, out = np.random.default_rng(seed), []
    for tex in sorted(Path(corpus).rglob('*.tex')):
        words = tex.read_text(errors='ignore')[:60_000].split()
        i = 0
        while i + hi < len(words) and len(out) < n:
            k = int(rng.integers(lo, hi + 1))
            out.append(' '.join(words[i:i + k])); i += k * stride
        if len(out) >= n: break
    return out


def st_models(folder: str, threads: int, int8_config: str, tmp: Path):
    "{'st torch': model, 'st onnx': model|reason, 'st onnx-int8': model|reason}."
    from sentence_transformers import SentenceTransformer
    out = {'st torch': SentenceTransformer(folder, device='cpu')}
    try:
        import onnxruntime as ort
        import optimum.onnxruntime  # noqa: F401  (sentence-transformers' ONNX backend)
        from sentence_transformers import export_dynamic_quantized_onnx_model
    except Exception as e:
        why = f"not available: optimum does not import here ({type(e).__name__}: {str(e)[:120]})"
        return {**out, 'st onnx': why, 'st onnx-int8': why}
    copy = tmp / 'st_model'
    shutil.copytree(folder, copy)
    def so():
        s = ort.SessionOptions(); s.intra_op_num_threads, s.inter_op_num_threads = threads, 1
        return s
    kw = dict(device='cpu', backend='onnx')
    m = SentenceTransformer(str(copy), **kw, model_kwargs={'session_options': so(), 'provider': 'CPUExecutionProvider'})
    m.save_pretrained(str(copy))                                     # writes onnx/model.onnx (optimum's export)
    out['st onnx'] = SentenceTransformer(str(copy), **kw, model_kwargs={'session_options': so(), 'provider': 'CPUExecutionProvider'})
    export_dynamic_quantized_onnx_model(out['st onnx'], int8_config, str(copy))
    q = next(p for p in (copy / 'onnx').glob(f'model_*{int8_config}.onnx'))
    out['st onnx-int8'] = SentenceTransformer(str(copy), **kw, model_kwargs={'file_name': f'onnx/{q.name}', 'session_options': so(),
                                                                             'provider': 'CPUExecutionProvider'})
    return out


def evaluate_backends(corpus, queries, cache_dir, chunk_size, backends):
    "{backend: (nDCG@10, Result)} of dense retrieval with the bundled MiniLM on each backend (same corpus, queries, chunks)."
    import docbench_nb as db
    from docbench_nb.cache import stage_dir
    from docbench_nb.retrieval.encoders import HFTextEncoder, EmbeddingCache
    from docbench_nb.context import RunContext
    from docbench_nb.retrieval.text_retrievers import DenseRetriever
    out = {}
    for b in backends:
        r = DenseRetriever(HFTextEncoder(backend=b, ctx=RunContext(device='cpu', cache_dir=cache_dir)), cache=EmbeddingCache(stage_dir('embeddings', cache_dir)))
        res = db.evaluate(str(corpus), str(queries), retriever=r, chunk_size=chunk_size, cache_dir=cache_dir, progress=False)
        out[b] = (res, r)
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument('--n', type=int, default=240); ap.add_argument('--lo', type=int, default=25); ap.add_argument('--hi', type=int, default=200)
    ap.add_argument('--batch-size', type=int, default=32); ap.add_argument('--repeats', type=int, default=2)
    ap.add_argument('--threads', type=int, default=1); ap.add_argument('--corpus', default=None)
    ap.add_argument('--cache-dir', default=None, help='where docbench keeps its ONNX exports and embeddings (default: a temporary folder)')
    ap.add_argument('--st-int8', default='avx2', help="sentence-transformers' quantization config: arm64 | avx2 | avx512 | avx512_vnni")
    ap.add_argument('--eval', action='store_true', help='also nDCG@10 of dense torch vs onnx-int8 on --queries')
    ap.add_argument('--queries', default=str(SHARED / 'queries' / 'dev.jsonl')); ap.add_argument('--chunk-size', type=int, default=512)
    ap.add_argument('--out', default=None, help='also write the report (markdown) here')
    a = ap.parse_args()
    os.environ.setdefault('OMP_NUM_THREADS', str(a.threads))
    import torch
    torch.set_num_threads(a.threads)
    import transformers, onnxruntime, sentence_transformers
    from docbench_nb.retrieval.encoders import HFTextEncoder, default_text_model_path, ONNX_BUILDS
    from docbench_nb.context import RunContext
    tmp = Path(tempfile.mkdtemp(prefix='bench_embed_'))
    cache_dir = a.cache_dir or str(tmp / 'cache')
    corpus = Path(a.corpus) if a.corpus else default_corpus()
    texts = word_windows(corpus, a.n, a.lo, a.hi)
    if len(texts) < a.n: print(f"only {len(texts)} windows found under {corpus}", file=sys.stderr)
    t = time.perf_counter()
    ours = {f'docbench {b}': HFTextEncoder(backend=b, ctx=RunContext(device='cpu', cache_dir=cache_dir)) for b in ('torch', 'onnx', 'onnx-int8')}
    load_s = time.perf_counter() - t
    models = {**ours, **st_models(default_text_model_path(), a.threads, a.st_int8, tmp)}
    tok = ours['docbench torch'].tokenizer
    lens = [min(len(x), 256) for x in tok(texts, truncation=False)['input_ids']]
    def run(name, m):
        if name.startswith('docbench'): return m.encode_units(texts, batch_size=a.batch_size)
        return m.encode(texts, batch_size=a.batch_size, normalize_embeddings=True, convert_to_numpy=True)
    live = {k: m for k, m in models.items() if not isinstance(m, str)}
    for k, m in live.items(): m.encode_units(texts[:8]) if k.startswith('docbench') else m.encode(texts[:8])     # warm-up
    best, vecs = {k: float('inf') for k in live}, {}
    for _ in range(a.repeats):                                                 # alternate: same conditions for all
        for k, m in live.items():
            t = time.perf_counter(); vecs[k] = run(k, m); best[k] = min(best[k], time.perf_counter() - t)
    ref, st_t = vecs['docbench torch'], best['st torch']
    rows = []
    for k, m in models.items():
        if isinstance(m, str): rows.append(f"| {k} | – | – | – | – | – | {m} |"); continue
        v = vecs[k]; cos = (v * ref).sum(1) / (np.linalg.norm(v, axis=1) * np.linalg.norm(ref, axis=1))
        rows.append(f"| {k} | {best[k]:.2f} | {len(texts) / best[k]:.1f} | {st_t / best[k]:.2f}x | {np.abs(v - ref).max():.1e} | "
                    f"{cos.mean():.4f} | {cos.min():.4f} |")
    cmd = ' '.join(shlex.quote(x) for x in ['python', 'bench/bench_embed_throughput.py', *sys.argv[1:]])
    env = f"PYTHONPATH={os.environ['PYTHONPATH']} " if os.environ.get('PYTHONPATH') else ''
    lines = ["# CPU embedding backends: docbench vs sentence-transformers", '', '```', f"$ {env}{cmd}", '```', '',
             f"{len(texts)} LaTeX windows of {a.lo}-{a.hi} words from `{corpus}` (MiniLM tokens after truncation to 256: min {min(lens)}, "
             f"median {int(np.median(lens))}, max {max(lens)}); batch {a.batch_size}; {a.threads} torch thread(s) and {a.threads} ONNX Runtime "
             f"intra-op thread(s); best of {a.repeats}. torch {torch.__version__}, transformers {transformers.__version__}, onnxruntime "
             f"{onnxruntime.__version__}, sentence-transformers {sentence_transformers.__version__}; sentence-transformers int8 config "
             f"`{a.st_int8}`. CPU: {_cpu()}. Vectors compared with docbench torch (float32).", '',
             f"docbench encoders loaded in {load_s:.1f} s (ONNX builds this run: {ONNX_BUILDS}; 0 = reused from `{cache_dir}`).", '',
             '| encoder | s | units/s | vs ST torch | max abs diff | mean cos | worst cos | note |', '|---|---|---|---|---|---|---|---|',
             *[r if r.count('|') == 9 else r[:-1] + ' |  |' for r in rows]]
    print('\n'.join(lines), flush=True)
    if a.eval:
        ev = evaluate_backends(corpus, a.queries, cache_dir, a.chunk_size, ('torch', 'onnx-int8'))
        base = ev['torch'][0].overall['ndcg@10']
        lines += ['', f"## Retrieval cost: nDCG@10 on `{a.queries}` over `{corpus}`, chunk {a.chunk_size}", '',
                  "Through `docbench_nb.evaluate` (the core of `docbench evaluate`) with a `DenseRetriever` built on each backend's "
                  "encoder: the `dense` retriever spec does not pass an encoder backend through yet.", '',
                  '| retriever | encoder fingerprint | nDCG@10 | Δ vs torch | recall@10 | MRR@10 |', '|---|---|---|---|---|---|']
        from docbench_nb.retrieval.encoders import model_fingerprint
        for b, (res, r) in ev.items():
            m = res.overall
            lines.append(f"| {r.name} | `{model_fingerprint(r.encoder)}` | {m['ndcg@10']:.4f} | {m['ndcg@10'] - base:+.4f} | "
                         f"{m['recall@10']:.4f} | {m['mrr@10']:.4f} |")
        print('\n'.join(lines[-(len(ev) + 5):]))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text('\n'.join(lines) + '\n')
    shutil.rmtree(tmp, ignore_errors=True)


def _cpu() -> str:
    try:
        info = Path('/proc/cpuinfo').read_text()
        name = next((l.split(':', 1)[1].strip() for l in info.splitlines() if l.startswith('model name')), '?')
        flags = next((l for l in info.splitlines() if l.startswith('flags')), '')
        simd = [f for f in ('avx2', 'avx512f', 'avx512_vnni', 'avx_vnni', 'amx_int8') if f' {f}' in flags]
        return f"{name} ({', '.join(simd) or 'no AVX2'}), {os.cpu_count()} cores visible"
    except OSError: return '?'


if __name__ == '__main__':
    main()
