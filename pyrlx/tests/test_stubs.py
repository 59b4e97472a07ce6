"""The type stubs (rlx/_rlx.pyi) name exactly what the native module has, with the same
parameters; every public item of the native module has a docstring."""

import ast
import inspect
import os

import rlx
from rlx import _rlx

STUB = os.path.join(os.path.dirname(rlx.__file__), "_rlx.pyi")
DUNDERS = {"__init__", "__len__", "__int__", "__index__", "__copy__", "__deepcopy__", "__iter__", "__next__"}


def stub_tree():
    tree = ast.parse(open(STUB).read())
    funcs, classes = {}, {}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            funcs[node.name] = node
        elif isinstance(node, ast.ClassDef):
            members = {}
            for m in node.body:
                if isinstance(m, ast.FunctionDef):
                    members[m.name] = m
                elif isinstance(m, ast.AnnAssign):
                    members[m.target.id] = m
            classes[node.name] = members
    return funcs, classes


def stub_params(fn: ast.FunctionDef, method: bool):
    a = fn.args
    pos = [x.arg for x in a.args]
    if method and not any(isinstance(d, ast.Name) and d.id == "staticmethod" for d in fn.decorator_list):
        pos = pos[1:]
    n_def = len(a.defaults)
    out = [(p, i >= len(pos) - n_def) for i, p in enumerate(pos)]
    if a.vararg:
        out.append(("*" + a.vararg.arg, False))
    if a.kwarg:
        out.append(("**" + a.kwarg.arg, False))
    return out


def real_params(obj, method: bool):
    out = []
    for p in inspect.signature(obj).parameters.values():
        if method and p.name == "self":
            continue
        if p.kind == p.VAR_POSITIONAL:
            out.append(("*" + p.name, False))
        elif p.kind == p.VAR_KEYWORD:
            out.append(("**" + p.name, False))
        else:
            out.append((p.name, p.default is not p.empty))
    return out


def public(names):
    return {n for n in names if not n.startswith("_") or n in DUNDERS}


def test_module_functions_match_stubs():
    funcs, classes = stub_tree()
    real_funcs = {n for n in public(dir(_rlx)) if inspect.isbuiltin(getattr(_rlx, n))}
    real_classes = {n for n in public(dir(_rlx)) if inspect.isclass(getattr(_rlx, n))}
    assert set(funcs) == real_funcs
    assert set(classes) == real_classes
    for name in funcs:
        assert stub_params(funcs[name], False) == real_params(getattr(_rlx, name), False), name


def test_class_members_match_stubs():
    _, classes = stub_tree()
    for cname, members in classes.items():
        cls = getattr(_rlx, cname)
        real = {n for n in public(vars(cls)) if not n.startswith("__") or n in DUNDERS}
        if cls.__text_signature__ is not None:  # it has a constructor
            real.add("__init__")
        assert set(members) == real, f"{cname}: stub-only {set(members) - real}, missing {real - set(members)}"
        for name, node in members.items():
            attr = vars(cls).get(name)
            if name == "__init__":
                assert stub_params(node, True) == real_params(cls, False), f"{cname}()"
            elif isinstance(node, ast.FunctionDef) and any(
                isinstance(d, ast.Name) and d.id == "property" for d in node.decorator_list
            ):
                assert inspect.isgetsetdescriptor(attr) or isinstance(attr, property), f"{cname}.{name}"
            elif isinstance(node, ast.FunctionDef):
                method = not isinstance(attr, staticmethod)
                assert stub_params(node, True) == real_params(getattr(cls, name), method), f"{cname}.{name}"


def test_every_public_item_has_a_docstring():
    for name in public(dir(_rlx)):
        obj = getattr(_rlx, name)
        if name.startswith("_") or not callable(obj):
            continue
        assert obj.__doc__, name
        if inspect.isclass(obj):
            for m, attr in vars(obj).items():
                if not m.startswith("_"):
                    assert getattr(obj, m).__doc__, f"{name}.{m}"
    for mod in (rlx, rlx.numpy, rlx.nn, rlx.transforms, rlx.models):
        for n in getattr(mod, "__all__", []):
            assert getattr(mod, n).__doc__, f"{mod.__name__}.{n}"
