"""The package's code graph, read from its source (nothing is imported): modules, sub-packages, import edges
(top-level, function-local, and loading by name through string constants such as `'docbench_nb.latex.parse'`),
private names used across modules and across sub-packages, and notebooks whose exported code depends on a
later-numbered notebook. Shared by `tests/test_imports.py` and `bench/code_stats.py`; works on old and new layouts."""
import ast, json, re
from pathlib import Path

LIB = 'docbench_nb'
# the layers, lowest first: imports may only point at the same layer or a lower one
LAYERS = ('base', 'latex', 'pages', 'retrieval', 'evaluation', 'queries', 'coverage', 'training', 'top')
TOP = {'cli', 'docs', 'testing', '__init__'}
NAMED = re.compile(rf'^{LIB}((?:\.\w+)+)(?::\w+)?$')


def modules(pkg: Path) -> dict:
    "{dotted name relative to the package ('records', 'latex.clean', 'latex.__init__', '__init__'): path}"
    out = {}
    for p in sorted(Path(pkg).rglob('*.py')):
        rel = p.relative_to(pkg).with_suffix('')
        if p.name == '_modidx.py' or '__pycache__' in rel.parts: continue
        out['.'.join(rel.parts)] = p
    return out


def subpackage(mod: str) -> str:
    "The sub-package a module belongs to ('latex' for 'latex.clean'); top-level modules are their own ('records')."
    return mod.split('.')[0] if '.' in mod else mod


def layer(mod: str) -> str:
    if '.' in mod: return mod.split('.')[0] if mod.split('.')[0] in LAYERS else 'base'
    return 'top' if mod in TOP else 'base'


def _package_of(mod: str) -> list:
    parts = mod.split('.')
    return parts[:-1]                       # 'latex.clean' -> ['latex']; 'latex.__init__' -> ['latex']; 'records' -> []


def _resolve(mods: dict, name: str):
    "A dotted name (relative to the package) as a module key, or None."
    if name in mods: return name
    if f'{name}.__init__' in mods: return f'{name}.__init__'
    if name == '' and '__init__' in mods: return '__init__'
    return None


def _from_target(m: str, n: ast.ImportFrom):
    "The package module (dotted, relative to the package) that `from … import` node `n` in module `m` reads, or None (another library)."
    if n.level:
        base = _package_of(m)
        base = base[:len(base) - (n.level - 1)] if n.level > 1 else base
        return '.'.join(base + ([n.module] if n.module else []))
    return n.module[len(LIB) + 1:] if (n.module or '').split('.')[0] == LIB else None


def _in_function(tree) -> set:
    ids = set()
    for fn in ast.walk(tree):
        if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            ids |= {id(n) for n in ast.walk(fn) if n is not fn}
    return ids


def edges(pkg: Path) -> list:
    """Every import of one package module by another: dicts with `src`, `dst`, `kind` ('top', 'local' inside a function,
    or 'name' through a string constant) and `names` (the names taken, for `from … import`)."""
    pkg, mods, out = Path(pkg), modules(pkg), []
    for m, p in mods.items():
        tree = ast.parse(p.read_text(encoding='utf-8'))
        local = _in_function(tree)
        def add(dst, kind, names=()):
            if dst is not None and dst != m: out.append({'src': m, 'dst': dst, 'kind': kind, 'names': list(names)})
        for n in ast.walk(tree):
            kind = 'local' if id(n) in local else 'top'
            if isinstance(n, ast.ImportFrom):
                if (target := _from_target(m, n)) is None: continue
                plain = []
                for a in n.names:
                    sub = _resolve(mods, f'{target}.{a.name}' if target else a.name) if a.name != '*' else None
                    if sub: add(sub, kind)                     # a submodule: `from docbench_nb.latex import parse`
                    else: plain.append(a.name)
                if plain: add(_resolve(mods, target), kind, plain)
            elif isinstance(n, ast.Import):
                for a in n.names:
                    if a.name.split('.')[0] == LIB and '.' in a.name: add(_resolve(mods, a.name[len(LIB) + 1:]), kind)
            elif isinstance(n, ast.Constant) and isinstance(n.value, str) and (g := NAMED.match(n.value)):
                add(_resolve(mods, g.group(1)[1:]), 'name')
    return out


def graph(pkg: Path, kinds=('top', 'local', 'name')) -> dict:
    g = {m: set() for m in modules(pkg)}
    for e in edges(pkg):
        if e['kind'] in kinds: g[e['src']].add(e['dst'])
    return g


def cycles(g: dict) -> list:
    "Strongly connected components with more than one module (Tarjan)."
    index, low, stack, on, out, i = {}, {}, [], set(), [], [0]
    def visit(v):
        index[v] = low[v] = i[0]; i[0] += 1; stack.append(v); on.add(v)
        for w in g[v]:
            if w not in index: visit(w); low[v] = min(low[v], low[w])
            elif w in on: low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop(); on.discard(w); comp.append(w)
                if w == v: break
            if len(comp) > 1: out.append(sorted(comp))
    for v in g:
        if v not in index: visit(v)
    return out


def private_imports(pkg: Path) -> list:
    """(src, dst, name) for every private name (`_x`, not dunder) one module takes from another: imported by name, or
    read as an attribute of an imported module (`evaluation._store`)."""
    pkg, mods, out = Path(pkg), modules(pkg), []
    for e in edges(pkg):
        out += [(e['src'], e['dst'], x) for x in e['names'] if x.startswith('_') and not x.startswith('__')]
    for m, p in mods.items():
        tree, alias = ast.parse(p.read_text(encoding='utf-8')), {}
        for n in ast.walk(tree):
            if isinstance(n, ast.ImportFrom) and (target := _from_target(m, n)) is not None:
                for a in n.names:
                    if (sub := _resolve(mods, f'{target}.{a.name}' if target else a.name)): alias[a.asname or a.name] = sub
            elif isinstance(n, ast.Import):
                for a in n.names:
                    if a.asname and a.name.startswith(LIB + '.') and (sub := _resolve(mods, a.name[len(LIB) + 1:])): alias[a.asname] = sub
        for n in ast.walk(tree):
            if (isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id in alias
                    and n.attr.startswith('_') and not n.attr.startswith('__') and alias[n.value.id] != m):
                out.append((m, alias[n.value.id], n.attr))
    return sorted(set(out))


def notebook_modules(nbs: Path) -> list:
    "[(notebook path relative to `nbs`, exported module)] in reading order (folders and files by their numbers)."
    out = []
    for p in sorted(Path(nbs).rglob('*.ipynb'), key=lambda p: p.relative_to(nbs).as_posix()):
        if any(s.startswith(('.', '_')) for s in p.relative_to(nbs).parts): continue
        for c in json.loads(p.read_text(encoding='utf-8'))['cells']:
            if c['cell_type'] == 'code' and (g := re.match(r'\s*#\|\s*default_exp\s+(\S+)', ''.join(c['source']))):
                out.append((p.relative_to(nbs).as_posix(), g.group(1))); break
    return out


def notebooks_out_of_order(root: Path) -> list:
    "(notebook, later notebook it depends on): exported code importing a module a later-numbered notebook exports."
    order = notebook_modules(Path(root) / 'nbs')
    pos = {mod: i for i, (_, mod) in enumerate(order)}
    g, out = graph(Path(root) / LIB), set()
    for i, (nb, mod) in enumerate(order):
        for dst in g.get(mod, ()):
            j = pos.get(dst.removesuffix('.__init__') if dst.endswith('.__init__') else dst)
            if j is not None and j > i: out.add((nb, order[j][0]))
    return sorted(out)


def signatures_with(pkg: Path, param: str) -> int:
    "How many function signatures in the package take a parameter named `param`."
    n = 0
    for p in modules(pkg).values():
        for f in ast.walk(ast.parse(p.read_text(encoding='utf-8'))):
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = f.args
                n += param in {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]}
    return n


def _only_handed_on(fn, name: str) -> bool:
    "Whether parameter `name` of `fn` is used only as an argument of calls (handed on, never used by `fn` itself)."
    parents = {c: n for n in ast.walk(fn) for c in ast.iter_child_nodes(n)}
    uses = [n for n in ast.walk(fn) if isinstance(n, ast.Name) and n.id == name]
    return bool(uses) and all(isinstance(parents.get(u), ast.keyword) or (isinstance(parents.get(u), ast.Call) and u in parents[u].args)
                              for u in uses)


def signatures_handing_on(pkg: Path, params=('cache_dir', 'progress', 'max_pixels', 'workers', 'device')) -> int:
    """How many function signatures take one of the run settings `params` only to hand it on to another call — the
    threading a run context replaces (a function that uses the setting itself is not counted)."""
    n = 0
    for p in modules(pkg).values():
        for f in ast.walk(ast.parse(p.read_text(encoding='utf-8'))):
            if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)):
                a = {x.arg for x in [*f.args.posonlyargs, *f.args.args, *f.args.kwonlyargs]}
                n += any(_only_handed_on(f, x) for x in params if x in a)
    return n


def public_functions(pkg: Path, prefix: str) -> list:
    "Module-level public functions whose name starts with `prefix` ('module.name')."
    return sorted(f'{m}.{f.name}' for m, p in modules(pkg).items() for f in ast.parse(p.read_text(encoding='utf-8')).body
                  if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef)) and f.name.startswith(prefix))
