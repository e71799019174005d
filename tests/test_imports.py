"""The package's shape, checked from its source: no import cycle (top-level, function-local and loading by name alike),
sub-packages whose imports run one way down the layers, no private name used across a sub-package line, notebooks in
dependency order, registries complete after `import docbench_nb`, entry points that resolve, modules of a bounded size,
and exported modules that `nbdev_export` would not change."""
import configparser, filecmp, json, os, shutil, subprocess, sys
from pathlib import Path
import pytest
import docbench_nb
sys.path.insert(0, str(Path(__file__).parent))
import code_graph as G

PKG = Path(docbench_nb.__file__).parent
ROOT = PKG.parent


def test_cycle_detector_finds_a_cycle():
    assert G.cycles({'a': {'b'}, 'b': {'c'}, 'c': {'a'}, 'd': {'a'}}) == [['a', 'b', 'c']]
    assert G.cycles({'a': {'b'}, 'b': set()}) == []


def test_graph_sees_loading_by_name_and_function_local_imports(tmp_path):
    "The reader catches what a plain top-level scan misses: a string that names a module, an import inside a function."
    pkg = tmp_path / 'docbench_nb'; (pkg / 'sub').mkdir(parents=True)
    (pkg / '__init__.py').write_text('')
    (pkg / 'sub' / '__init__.py').write_text('')
    (pkg / 'a.py').write_text("KINDS = ('docbench_nb.sub.b',)\n")
    (pkg / 'sub' / 'b.py').write_text("def f():\n    from ..a import KINDS, _hidden\n")
    es = {(e['src'], e['dst'], e['kind']) for e in G.edges(pkg)}
    assert es == {('a', 'sub.b', 'name'), ('sub.b', 'a', 'local')}
    assert G.cycles(G.graph(pkg)) == [['a', 'sub.b']]
    assert G.private_imports(pkg) == [('sub.b', 'a', '_hidden')]


def test_no_import_cycle():
    g = G.graph(PKG)
    assert len(g) > 50
    assert G.cycles(g) == []


def test_subpackages_follow_the_layers():
    "Imports run one way: base ← latex ← pages ← retrieval ← evaluation ← queries ← coverage ← training ← top."
    mods = G.modules(PKG)
    assert {G.layer(m) for m in mods} == set(G.LAYERS)
    up = [(e['src'], e['dst'], e['kind']) for e in G.edges(PKG) if G.LAYERS.index(G.layer(e['dst'])) > G.LAYERS.index(G.layer(e['src']))]
    assert up == []
    top_level = sorted(m for m in mods if '.' not in m)
    assert top_level == ['__init__', 'cache', 'cli', 'context', 'demo', 'docs', 'llm', 'records', 'spec', 'testing', 'workers']


def test_no_private_name_crosses_a_subpackage():
    crossing = [x for x in G.private_imports(PKG) if G.subpackage(x[0]) != G.subpackage(x[1])]
    assert crossing == []


def test_notebooks_in_dependency_order():
    assert G.notebooks_out_of_order(ROOT) == []
    exported = {m for _, m in G.notebook_modules(ROOT / 'nbs')}
    assert exported == {m.removesuffix('.__init__') if m != '__init__' else m for m in G.modules(PKG) if not m.endswith('.__init__')}


def test_registries_complete_after_import():
    "Every kind registered anywhere in the source is in its registry right after `import docbench_nb`, in a fresh interpreter."
    import ast, re
    declared = {'retriever': set(), 'describer': set(), 'llm': set(), 'representation': set()}
    for p in G.modules(PKG).values():
        for n in ast.walk(ast.parse(p.read_text())):
            if isinstance(n, ast.Call) and n.args and isinstance(n.args[0], ast.Constant) and isinstance(n.args[0].value, str):
                f = n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, 'id', '')
                owner = n.func.value.id if isinstance(n.func, ast.Attribute) and isinstance(n.func.value, ast.Name) else ''
                if f == 'register_retriever' or (f == 'register' and owner == 'RETRIEVERS'): declared['retriever'].add(n.args[0].value)
                elif f == 'register_describer' or (f == 'register' and owner == 'DESCRIBERS'): declared['describer'].add(n.args[0].value)
                elif f == 'register_llm' or (f == 'register' and owner == 'LLMS'): declared['llm'].add(n.args[0].value)
                elif f == 'register_representation': declared['representation'].add(n.args[0].value)
    code = ("import json, docbench_nb\n"
            "from docbench_nb.retrieval.registry import RETRIEVERS\n"
            "from docbench_nb.retrieval.represent import DESCRIBERS, REPRESENTATIONS\n"
            "from docbench_nb.llm import LLMS\n"
            "print(json.dumps({'retriever': sorted(RETRIEVERS._kinds), 'describer': sorted(DESCRIBERS._kinds),"
            " 'llm': sorted(LLMS._kinds), 'representation': sorted(REPRESENTATIONS)}))")
    got = json.loads(subprocess.run([sys.executable, '-c', code], capture_output=True, text=True, check=True).stdout)
    assert all(declared[k] for k in declared), declared
    for k in declared: assert set(got[k]) >= declared[k], (k, declared[k] - set(got[k]))
    assert len(got['representation']) == 6 and {'bm25', 'dense', 'late', 'ocr', 'clip'} <= set(got['retriever'])


def test_entry_points_resolve():
    cfg = configparser.ConfigParser(); cfg.read(ROOT / 'settings.ini')
    for line in cfg['DEFAULT']['console_scripts'].split():
        name, _, target = line.partition('=')
        mod, _, fn = target.partition(':')
        assert mod.startswith('docbench_nb.') and G._resolve(G.modules(PKG), mod[len('docbench_nb.'):]), line
        import importlib
        assert callable(getattr(importlib.import_module(mod), fn))


def test_no_module_over_800_lines():
    sizes = {m: len(p.read_text().splitlines()) for m, p in G.modules(PKG).items()}
    assert max(sizes.values()) <= 800, sorted(sizes.items(), key=lambda x: -x[1])[:3]


@pytest.mark.skipif(shutil.which('nbdev_export') is None and not (Path(sys.executable).parent / 'nbdev_export').exists(),
                    reason='nbdev is not installed')
def test_nbdev_export_would_not_change_the_package(tmp_path):
    "Exporting the notebooks afresh gives the committed package byte for byte: nobody edited `docbench_nb/` by hand."
    shutil.copytree(ROOT / 'nbs', tmp_path / 'nbs', ignore=shutil.ignore_patterns('.ipynb_checkpoints', '_*'))
    shutil.copy(ROOT / 'settings.ini', tmp_path / 'settings.ini')
    exe = shutil.which('nbdev_export') or str(Path(sys.executable).parent / 'nbdev_export')
    subprocess.run([exe], cwd=tmp_path, check=True, capture_output=True, timeout=300)
    fresh = {p.relative_to(tmp_path / 'docbench_nb').as_posix() for p in (tmp_path / 'docbench_nb').rglob('*.py')}
    have = {p.relative_to(PKG).as_posix() for p in PKG.rglob('*.py') if '__pycache__' not in p.parts}
    assert fresh == have, (sorted(fresh - have), sorted(have - fresh))
    differ = [f for f in sorted(fresh) if (tmp_path / 'docbench_nb' / f).read_bytes() != (PKG / f).read_bytes()]
    assert differ == [], f'nbdev_export would change {differ}: edit the notebook, then run nbdev_export'
