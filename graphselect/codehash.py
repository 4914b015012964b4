"""A short hash of the code that generates a kernel, for the record key: any change to that code
(not to its comments or docstrings) gives new records instead of reusing stale timings or stale
rejections (MetaSchedule keys its database on the workload's structural hash for the same
reason; hashing the source costs nothing at lookup, where building every PrimFunc to hash it
would cost a minute on ResNet-18)."""
from __future__ import annotations

import ast
import hashlib
import inspect
from functools import lru_cache


def _strip_docstrings(tree: ast.AST) -> ast.AST:
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(getattr(body[0], "value", None), ast.Constant) \
                    and isinstance(body[0].value.value, str):
                node.body = body[1:] or [ast.Pass()]
    return tree


@lru_cache(maxsize=None)
def _module_hash(module) -> str:
    tree = _strip_docstrings(ast.parse(inspect.getsource(module)))
    return hashlib.sha1(ast.dump(tree, annotate_fields=False).encode()).hexdigest()


def source_hash(*modules) -> str:
    """12 hex digits over the code (AST, docstrings and comments dropped) of ``modules``."""
    h = hashlib.sha1()
    for m in modules:
        h.update(_module_hash(m).encode())
    return h.hexdigest()[:12]
