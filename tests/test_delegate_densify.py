"""DENSIFY at load (nnhal.delegate.model.densify): every sparsity format TFLite's schema allows,
checked against numpy and against LiteRT's own DENSIFY kernel."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

pytest.importorskip("ai_edge_litert", reason="ai-edge-litert is not installed (pip install 'nnhal[litert]')")

from nnhal.delegate.model import densify  # noqa: E402
from nnhal.tflite import schema as sch  # noqa: E402


def encode(dense: np.ndarray, order: list[int], block_map: list[int], block_size: list[int],
           formats: list[int], index_type: int = 1) -> tuple[np.ndarray, object]:
    """TFLite's sparse encoding of ``dense`` (a test-side encoder: the expanded, traversal-ordered array,
    CSR levels keeping the indices whose sub-tree holds a non-zero). ``index_type``: 1 Int32Vector,
    2 Uint16Vector, 3 Uint8Vector."""
    s = sch.schema()
    rank = dense.ndim
    blocked = list(dense.shape)
    for d, b in zip(block_map, block_size):
        blocked[d] //= b
    exp_shape = blocked + list(block_size)
    exp = np.zeros(exp_shape, dense.dtype)
    for o in itertools.product(*map(range, dense.shape)):
        e = [o[i] // block_size[block_map.index(i)] if i in block_map else o[i] for i in range(rank)]
        e += [o[d] % b for d, b in zip(block_map, block_size)]
        exp[tuple(e)] = dense[o]
    t = np.transpose(exp, order)
    values: list = []
    levels = [{"segments": [0], "indices": []} for _ in order]

    def walk(sub: np.ndarray, level: int) -> None:
        if level == len(order):
            values.append(sub[()])
            return
        for i in range(sub.shape[0]):
            if formats[level] == 1 and not sub[i].any():
                continue
            if formats[level] == 1:
                levels[level]["indices"].append(i)
            walk(sub[i], level + 1)
        if formats[level] == 1:
            levels[level]["segments"].append(len(levels[level]["indices"]))

    walk(t, 0)
    vec_t = {1: (s.Int32VectorT, np.int32), 2: (s.Uint16VectorT, np.uint16), 3: (s.Uint8VectorT, np.uint8)}[index_type]
    sp = s.SparsityParametersT()
    sp.traversalOrder = np.asarray(order, np.int32)
    sp.blockMap = np.asarray(block_map, np.int32) if block_map else None
    sp.dimMetadata = []
    for level, f in enumerate(formats):
        md = s.DimensionMetadataT()
        md.format = f
        md.denseSize = t.shape[level]
        if f == 1:
            for attr, key in (("arraySegments", "segments"), ("arrayIndices", "indices")):
                v = vec_t[0]()
                v.values = np.asarray(levels[level][key], vec_t[1])
                setattr(md, attr, v)
                setattr(md, attr + "Type", index_type)
        sp.dimMetadata.append(md)
    return np.asarray(values, dense.dtype), sp


def _dense(shape, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    a = rng.normal(size=shape).astype(dtype)
    a[rng.random(shape) < 0.6] = 0
    return a


CASES = [  # (shape, traversal order, block map, block size, formats)
    ((4, 6), [0, 1], [], [], [0, 1]),  # CSR
    ((4, 6), [0, 1], [], [], [1, 1]),  # both dimensions sparse
    ((4, 6), [1, 0], [], [], [0, 1]),  # column-major traversal
    ((4, 6), [0, 1, 2], [1], [2], [0, 1, 0]),  # 1x2 blocks
    ((4, 8), [0, 1, 2, 3], [0, 1], [2, 4], [0, 1, 0, 0]),  # 2x4 blocks (the converter's block-sparse form)
    ((2, 3, 4), [0, 1, 2], [], [], [0, 0, 1]),  # rank 3
    ((2, 3, 4), [2, 0, 1], [], [], [1, 0, 1]),  # rank 3, permuted
    ((6, 4), [1, 0, 2], [0], [3], [0, 1, 0]),  # block on the first dimension, traversed second
]


@pytest.mark.parametrize("index_type", [1, 2, 3])
@pytest.mark.parametrize("shape,order,bmap,bsize,formats", CASES)
def test_densify_formats(shape, order, bmap, bsize, formats, index_type):
    dense = _dense(shape)
    values, sp = encode(dense, order, bmap, bsize, formats, index_type)
    np.testing.assert_array_equal(densify(values, list(shape), sp), dense)


def test_densify_all_zero_and_bad_metadata():
    dense = np.zeros((3, 4), np.float32)
    values, sp = encode(dense, [0, 1], [], [], [0, 1])
    np.testing.assert_array_equal(densify(values, [3, 4], sp), dense)
    values, sp = encode(_dense((3, 4)), [0, 1], [], [], [0, 1])
    sp.dimMetadata[1].arrayIndices.values = sp.dimMetadata[1].arrayIndices.values[:-1]
    with pytest.raises(ValueError):
        densify(values, [3, 4], sp)
    with pytest.raises(ValueError):
        densify(values, [3, 4, 1], sp)


def sparse_model(block: bool = True, dtype: str = "float32") -> tuple[bytes, np.ndarray]:
    """x[1,8] -> FULLY_CONNECTED with weights DENSIFY(sparse [4, 8]) -> y[1,4]; and the dense weights.
    ``dtype`` float16: the weights are float16, DEQUANTIZEd after the DENSIFY (MediaPipe's sparse models)."""
    from nnhal.tflite.writer import Tensor, graph, options

    w = _dense((4, 8), seed=3).astype(dtype)
    args = ([0, 1, 2], [1], [4], [0, 1, 0]) if block else ([0, 1], [], [], [0, 1])
    values, sp = encode(w, *args)
    ts = [Tensor([1, 8]), Tensor([values.size], dtype, data=values), Tensor([4, 8], dtype),
          Tensor([4], data=np.ones(4, np.float32)), Tensor([1, 4]), Tensor([4, 8])]
    fc = options("FullyConnectedOptions")
    if dtype == "float16":
        ops = [("DENSIFY", [1], [2], None), ("DEQUANTIZE", [2], [5], None), ("FULLY_CONNECTED", [0, 5, 3], [4], fc)]
    else:
        ops = [("DENSIFY", [1], [2], None), ("FULLY_CONNECTED", [0, 2, 3], [4], fc)]
    data = graph(ts, ops, inputs=[0], outputs=[4])
    m = sch.read_model(data)
    t = m.subgraphs[0].tensors[1]
    t.shape = np.asarray([4, 8], np.int32)
    t.sparsity = sp
    return sch.write_model(m), w


@pytest.mark.parametrize("block", [False, True])
def test_densify_matches_litert(block):
    """The dense weights nnhal computes at load are LiteRT's DENSIFY kernel's, bit for bit."""
    from nnhal.delegate.model import Graph
    from nnhal.delegate.run import LiteRT

    data, w = sparse_model(block)
    g = Graph(data)
    assert g.densified == 1 and 0 in g.folded
    np.testing.assert_array_equal(g.value(2), w)
    lr = LiteRT(data, preserve=True)
    lr.run([np.ones((1, 8), np.float32)])
    np.testing.assert_array_equal(lr.tensor(2), g.value(2))
