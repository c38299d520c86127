"""Recipes of the lookups: EMBEDDING_LOOKUP, HASHTABLE_LOOKUP, LSH_PROJECTION.
Indices, keys and hashed inputs are new operands (exact values): a computed
value's last bit would change a hash or an index."""

from __future__ import annotations

import numpy as np

from nnhal.conformance.randgraph.recipes.common import OT, Build, T, recipe


@recipe(OT.EMBEDDING_LOOKUP, "lookup", anchor_input=1)
def embedding_lookup(b: Build) -> None:
    t = b.type(1)
    a = b.operand(b.anchor) if b.anchor is not None else None
    if a is not None and a.type == t and len(a.dims) >= 2:
        dims = a.dims
    else:
        dims = b.shape(b.d.integer(2, 4))
    n = b.d.integer(1, 5)
    b.tensor(T.TENSOR_INT32, (n,), domain="index", limit=dims[0], role="param", connect=False)
    x = b.main(t, dims=dims)
    b.out(b.operand(x).type)


@recipe(OT.HASHTABLE_LOOKUP, "lookup", anchor_input=2)
def hashtable_lookup(b: Build) -> None:
    t = b.type(2)
    a = b.operand(b.anchor) if b.anchor is not None else None
    dims = a.dims if a is not None and a.type == t else b.shape(b.d.integer(1, 3))
    rows = dims[0]
    rng = np.random.default_rng(b.d.seed())
    keys = np.sort(rng.choice(np.arange(-20, 40 + rows), size=rows, replace=False)).astype(np.int32)
    n = b.d.integer(1, 5)
    hits = rng.random(n) < 0.7
    lookups = np.where(hits, rng.choice(keys, n), rng.integers(100, 120, n)).astype(np.int32)
    b.tensor(T.TENSOR_INT32, (n,), value=lookups, role="param", connect=False)
    b.tensor(T.TENSOR_INT32, (rows,), value=keys, role="param", connect=False)
    x = b.main(t, dims=dims)
    b.params["rows"] = rows
    b.out(b.operand(x).type)
    b.out(T.TENSOR_QUANT8_ASYMM, (1.0, 0))


@recipe(OT.LSH_PROJECTION, "lookup", anchor_input=1)
def lsh_projection(b: Build) -> None:
    hash_t, in_t, w_t = b.sig.inputs[0], b.type(1), b.sig.inputs[2]
    num_hash, bits = b.d.integer(1, 4), b.d.integer(1, 8)
    kind = b.d.pick((2, 3, 1))  # NOTE: DENSE, SPARSE, SPARSE_DEPRECATED
    b.tensor(hash_t, (num_hash, bits), domain="any", role="weight", connect=False)
    rows = b.d.integer(1, 4)
    dims = (rows,) + b.shape(b.d.integer(0, 2))
    b.tensor(in_t, dims, role="data", connect=False)
    if kind == 2:
        b.tensor(w_t, (rows,), domain="positive", role="weight", connect=False)
    else:
        b.omit("weight")
    b.param("type", T.INT32, kind, {1: "SPARSE_DEPRECATED", 2: "DENSE", 3: "SPARSE"}[kind])
    b.out(T.TENSOR_INT32, None)
