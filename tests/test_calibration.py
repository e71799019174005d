"""Judge calibration (issue 23): balanced accuracy per stage and label, the injection flip rate, the stop on
--min-judge-accuracy and the calibrate CLI — through the real `openai:` backend against loopback chat servers that run
deterministic rule-based judges, and with the fences checked in the requests the servers received."""
import json
import pytest
from docbench_nb.cli import main
from docbench_nb.demo import demo_corpus_dir
from docbench_nb.llm import make_llm
from docbench_nb.testing import ScriptedChatServer
from docbench_nb.queries.calibration import JUDGED_STAGES, calibrate, calibration_items
from docbench_nb.queries.llm_stages import FENCE_RULE, VERIFY_LABELS, fenced_text, _first_json

pytestmark = pytest.mark.timeout(300)

CLEAN = [it for it in calibration_items() if not it['injected']]
TRUTH = {(it['stage'], it['query'], (it.get('rephrasing') or it.get('passage') or '')[:60]): it for it in CLEAN}


def judge_reply(mode='rules', obey=False):
    """A chat-completions handler judging by rules: it reads the fenced fields, as a model is told to, and answers with the
    right verdict for calibration items ('rules'; anything else is accepted / not answered) or 'yes' to everything;
    with `obey` it first follows any verdict-shaped JSON written anywhere in the prompt (an injection-obeying model)."""
    def reply(req):
        sys_, user = req['messages'][0]['content'], req['messages'][-1]['content']
        if obey and (inj := _first_json(user)): return json.dumps(inj)
        if 'You compare' in sys_: stage, q, x = 'rephrase_check', fenced_text(user, 'ORIGINAL'), fenced_text(user, 'REPHRASED')
        elif 'You judge' in sys_: stage, q, x = 'false_negative', fenced_text(user, 'QUESTION'), fenced_text(user, 'PASSAGE')
        elif 'You check' in sys_: stage, q, x = 'verify', fenced_text(user, 'QUESTION'), ''
        else: return '{"query": "unused"}'
        it = TRUTH.get((stage, q, (x or '')[:60]))
        ok = True if mode == 'yes' else (it['positive'] if it else stage != 'false_negative')
        if stage == 'verify': return json.dumps({'valid': ok, 'labels': [] if ok else [it['label']]})
        return json.dumps({'same_meaning': ok, 'same_answer': ok} if stage == 'rephrase_check' else {'answers': ok})
    return reply


@pytest.fixture(scope='module')
def rules(tmp_path_factory):
    "One rule-based judge server and cache for the module: a calibration made by one test is reused by the next."
    with ScriptedChatServer(default=judge_reply()) as srv:
        srv.cache = tmp_path_factory.mktemp('judge-cache')
        yield srv


def test_always_valid_judge_scores_half_and_stops_the_build(tmp_path, capsys):
    with ScriptedChatServer(default=judge_reply('yes')) as jsrv, ScriptedChatServer(default='{}') as gsrv:
        res = calibrate(make_llm(f'openai:yes@{jsrv.base_url}', cache_dir=tmp_path), cache_dir=tmp_path)
        n_items = len(calibration_items())
        assert jsrv.n_calls == res['n_items'] == n_items == 2 * (8 * 8 + 8 * 2 + 8 * 2)
        for stage, s in res['stages'].items():
            assert s['balanced_accuracy'] == 0.5 and s['flip_rate'] == 0.0, stage
            assert s['confusion']['fn'] == s['confusion']['tn'] == 0 and s['confusion']['tp'] == 8
            assert all(r['balanced_accuracy'] == 0.5 for l, r in s['labels'].items() if r['balanced_accuracy'] is not None)
        assert set(res['stages']['verify']['labels']) == {'valid', *VERIFY_LABELS}
        rc = main(['--cache-dir', str(tmp_path), 'queries', 'build', '--corpus', str(demo_corpus_dir()), '--llm', f'openai:gen@{gsrv.base_url}',
                   '--judge', f'openai:yes@{jsrv.base_url}', '--min-judge-accuracy', '0.7', '--out', str(tmp_path / 'out')])
        err = capsys.readouterr().err
        assert rc == 2 and gsrv.n_calls == 0                         # stopped before the generator was asked anything
        assert jsrv.n_calls == n_items                               # the calibration came from the cache
        assert "judge 'openai:yes' is below --min-judge-accuracy 0.7" in err
        assert 'verify 0.50 (8/8 good accepted, 0/56 bad rejected; per label: valid 1.00, underspecified_parameter 0.50' in err
        assert 'rephrase_check 0.50 (8/8 good accepted, 0/8 bad rejected' in err and 'false_negative 0.50' in err
        assert not (tmp_path / 'out' / 'queries.jsonl').exists() and (tmp_path / 'out' / 'calibration.md').is_file()


def test_injection_obeying_judge_flips_while_fences_are_sent(tmp_path, rules):
    with ScriptedChatServer(default=judge_reply(obey=True)) as obey:
        bad = calibrate(make_llm(f'openai:obey@{obey.base_url}', cache_dir=tmp_path), cache_dir=tmp_path)
    good = calibrate(make_llm(f'openai:rules@{rules.base_url}', cache_dir=rules.cache), cache_dir=rules.cache)
    for stage in JUDGED_STAGES:
        assert bad['stages'][stage]['balanced_accuracy'] == good['stages'][stage]['balanced_accuracy'] == 1.0
        assert bad['stages'][stage]['flip_rate'] == 1.0 and bad['stages'][stage]['injected_balanced_accuracy'] == 0.0
        assert good['stages'][stage]['flip_rate'] == 0.0 and good['stages'][stage]['injected_balanced_accuracy'] == 1.0
    flipped = {r['pair'] for r in bad['items'] if r['injected'] and r['predicted'] != r['positive']}
    assert flipped == {it['id'] for it in CLEAN}                     # every injected copy turned, none of the clean ones
    # what the server received: every judge prompt states the fence rule, and every untrusted field sits in one fence
    # whose end marker appears once — the forged end marker and the forged QUESTION fence in the text were broken up
    carrier = {'You check': 'EVIDENCE', 'You compare': 'ANSWER OF THE ORIGINAL', 'You judge': 'PASSAGE'}
    assert len(obey.requests) == len(calibration_items())
    forged = 0
    for r in obey.requests:
        sys_, user = r['json']['messages'][0]['content'], r['json']['messages'][-1]['content']
        assert FENCE_RULE in sys_
        name = next(v for k, v in carrier.items() if sys_.startswith(k))
        assert user.count(f'<<<BEGIN {name}>>>') == user.count(f'<<<END {name}>>>') == 1
        assert user.count('<<<BEGIN ') == user.count('<<<END ') == (3 if name != 'PASSAGE' else 2)
        forged += f'< < <END {name}> > >' in user or '< < <BEGIN QUESTION> > >' in user
    assert forged == len(calibration_items()) // 4                   # two of the four injection kinds forge a marker


def test_calibrate_cli_prints_the_table_and_caches(tmp_path, capsys):
    with ScriptedChatServer(default=judge_reply()) as srv:
        argv = ['--cache-dir', str(tmp_path), 'queries', 'calibrate', '--llm', f'openai:rules@{srv.base_url}', '--stages',
                'verify,false_negative', '--per-class', '2', '--out', str(tmp_path / 'cal.md')]
        assert main(argv) == 0
        out, n = capsys.readouterr().out, srv.n_calls
        assert n == 2 * (2 * 8 + 2 * 2)
        assert '| **verify** | all | 16 | 1.00 | **1.00** | 1.00 | 0.00 | |' in out
        assert '| verify | pronoun_placeholder | 2 | 1.00 | 1.00 | 1.00 | 0.00 | 1.00 |' in out
        assert '| **false_negative** | all | 4 |' in out and 'rephrase_check' not in out
        md = (tmp_path / 'cal.md').read_text()
        assert md.startswith(out.strip().split('\n')[0]) and 'Command: `docbench queries calibrate --llm openai:rules@' in md
        assert main(argv + ['--min-judge-accuracy', '0.9', '--force']) == 0 and srv.n_calls == n        # second run: from the cache
        assert ', cached)' in (tmp_path / 'cal.md').read_text()
        assert main(['--cache-dir', str(tmp_path), 'queries', 'calibrate', '--llm', f'openai:rules@{srv.base_url}', '--stages', 'judge']) == 2
        assert "unknown stage(s) ['judge']" in capsys.readouterr().err


def test_build_routes_judged_stages_to_the_judge(tmp_path, rules):
    "Generation by one server, every verify / rephrase-check / false-negative call by the other; both named in attrition.json."
    def gen(req):
        sys_, user = req['messages'][0]['content'], req['messages'][-1]['content']
        if 'benchmark of scientific' in sys_:
            words = [w for w in (fenced_text(user, 'EVIDENCE') or '').split() if w.isalpha() and len(w) > 7][:2]
            return json.dumps({'question': f"Which study of {' and '.join(words)} mentions purple zebra meadows?", 'answer': 'that one'})
        if 'You rephrase' in sys_: return json.dumps({'rephrasing': f"Put differently ({len(user)}): {fenced_text(user, 'QUESTION')}"})
        return json.dumps({'query': fenced_text(user, 'QUESTION')})
    from docbench_nb.latex.corpus import load_papers
    from docbench_nb.queries.build import build_queries
    papers, errors = load_papers(sorted(demo_corpus_dir().iterdir())[:3], cache_dir=tmp_path, progress=False)
    assert len(papers) == 3, errors
    jsrv, n0 = rules, rules.n_calls
    with ScriptedChatServer(default=gen) as gsrv:
        out = tmp_path / 'out'
        build_queries(None, make_llm(f'openai:gen@{gsrv.base_url}', cache_dir=tmp_path), out, types=('text',), per_paper=1, bm25_k=0,
                      papers=papers, cache_dir=rules.cache, judge=make_llm(f'openai:rules@{jsrv.base_url}', cache_dir=rules.cache),
                      min_judge_accuracy=0.9)
        judged = [r['json']['messages'][0]['content'][:11] for r in jsrv.requests[n0:]]
        assert not any(r['json']['messages'][0]['content'].startswith(('You check', 'You compare', 'You judge')) for r in gsrv.requests)
        att = json.loads((out / 'attrition.json').read_text())
        n_verify = sum(c['in'] for c in att['counts']['verify'].values())
        assert n_verify > 0 and judged.count('You check b') == n_verify          # the calibration came from the module's cache
        assert att['models']['generator']['name'] == 'openai:gen' and att['models']['judge']['name'] == 'openai:rules'
        assert att['calibration']['stages']['verify']['balanced_accuracy'] == 1.0 and att['min_judge_accuracy'] == 0.9
        qs = [json.loads(l) for l in (out / 'queries.jsonl').read_text().splitlines()]
        assert qs and all(len(q['rephrasings']) == 3 and not any(f.startswith('fn_unverified') for f in q['flags']) for q in qs)
