"""Numpy kernels of the detection operations (see :mod:`nnhal.ops.detection`).

The kernels work on real (float32) values in NHWC layout; the family module
converts data types and layouts at the edges.  Box geometry is computed in
float32 in the reference's order of operations, because discrete decisions
(bin edges, sampling counts, NMS suppression) depend on it.

Non-maximum suppression is sequential by nature: one Python iteration per
selected box, each vectorized over the remaining candidates.  It reproduces
the reference's in-place selection (swap the best box to the front, swap
suppressed boxes to the end), whose order decides ties between equal scores.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from nnhal.ops import deadline
from nnhal.ops.fixedpoint import round_half_away

F32 = np.float32


def expf(x: np.ndarray) -> np.ndarray:
    """float32 exp rounded from double precision, as the C library's expf
    (numpy's float32 exp may differ in the last bit)."""
    with np.errstate(over="ignore", invalid="ignore"):
        return np.exp(np.asarray(x, np.float64)).astype(F32)


class KernelError(ValueError):
    """Malformed run-time data (the family module turns it into OpExecutionError)."""


# --------------------------------------------------------------------------
# ordering helpers


# NOTE: the reference orders boxes with std::sort, which is not stable: equal
# scores come out in an order fixed by the C++ library's algorithm (Android's
# libc++).  That algorithm is stable up to 30 elements (insertion sort); above,
# its quicksort partitioning decides where ties land.  Since the order of ties
# is observable (output order, and which boxes survive a max-detections cut),
# larger inputs with ties are ordered by an emulation of that algorithm; inputs
# without ties take numpy's sort, which then gives the same permutation.

_SMALL_SORT = 30


class _TieSort:
    """The C++ library's unstable sort on a list of ids, ``less(a, b)``
    meaning id a must come before id b."""

    def __init__(self, v: list, less: Callable[[int, int], bool]):
        self.v = v
        self.less = less

    def _swap(self, i: int, j: int) -> None:
        v = self.v
        v[i], v[j] = v[j], v[i]

    def _order3(self, a: int, b: int, c: int) -> int:
        v, lt = self.v, self.less
        if not lt(v[b], v[a]):
            if not lt(v[c], v[b]):
                return 0
            self._swap(b, c)
            if lt(v[b], v[a]):
                self._swap(a, b)
                return 2
            return 1
        if lt(v[c], v[b]):
            self._swap(a, c)
            return 1
        self._swap(a, b)
        if lt(v[c], v[b]):
            self._swap(b, c)
            return 2
        return 1

    def _order_n(self, idx: list) -> int:
        """Networks for 3, 4 and 5 elements: order the first three, then sink
        each further element into place."""
        n = self._order3(idx[0], idx[1], idx[2])
        v, lt = self.v, self.less
        for k in range(3, len(idx)):
            j = k
            while j > 0 and lt(v[idx[j]], v[idx[j - 1]]):
                self._swap(idx[j], idx[j - 1])
                n += 1
                j -= 1
        return n

    def _tiny(self, first: int, last: int) -> bool:
        """Sorts ranges of at most 5; False if longer."""
        n = last - first
        if n < 2:
            return True
        if n == 2:
            if self.less(self.v[first + 1], self.v[first]):
                self._swap(first, first + 1)
            return True
        if n <= 5:
            self._order_n(list(range(first, last)))
            return True
        return False

    def _insertion(self, first: int, last: int, limit: int | None = None) -> bool:
        """Insertion sort after ordering the first three; with ``limit``,
        gives up (returns False) after that many moved elements."""
        v, lt = self.v, self.less
        self._order3(first, first + 1, first + 2)
        moved = 0
        for i in range(first + 3, last):
            if lt(v[i], v[i - 1]):
                t = v[i]
                k = i
                while True:
                    v[k] = v[k - 1]
                    k -= 1
                    if k == first or not lt(t, v[k - 1]):
                        break
                v[k] = t
                moved += 1
                if limit is not None and moved == limit:
                    return i + 1 == last
        return True

    def _nearly_sorted(self, first: int, last: int) -> bool:
        return self._tiny(first, last) if last - first <= 5 else self._insertion(first, last, 8)

    def sort(self, first: int, last: int) -> None:
        v, lt = self.v, self.less
        while True:
            n = last - first
            if self._tiny(first, last):
                return
            if n <= _SMALL_SORT:
                self._insertion(first, last)
                return
            m = first + n // 2
            lm1 = last - 1
            if n >= 1000:
                q = n // 2 // 2
                swaps = self._order_n([first, first + q, m, m + q, lm1])
            else:
                swaps = self._order3(first, m, lm1)
            i, j = first, lm1
            if not lt(v[i], v[m]):
                # the first element equals the pivot: look for a smaller one from the back
                found = False
                while True:
                    j -= 1
                    if i == j:
                        break
                    if lt(v[j], v[m]):
                        self._swap(i, j)
                        swaps += 1
                        found = True
                        break
                if not found:
                    # nothing is smaller than the pivot: split off the run equal to the first
                    i = first + 1
                    j = last - 1
                    if not lt(v[first], v[j]):
                        while True:
                            if i == j:
                                return
                            if lt(v[first], v[i]):
                                self._swap(i, j)
                                swaps += 1
                                i += 1
                                break
                            i += 1
                    if i == j:
                        return
                    while True:
                        while not lt(v[first], v[i]):
                            i += 1
                        j -= 1
                        while lt(v[first], v[j]):
                            j -= 1
                        if i >= j:
                            break
                        self._swap(i, j)
                        swaps += 1
                        i += 1
                    first = i
                    continue
            i += 1
            if i < j:
                while True:
                    while lt(v[i], v[m]):
                        i += 1
                    j -= 1
                    while not lt(v[j], v[m]):
                        j -= 1
                    if i > j:
                        break
                    self._swap(i, j)
                    swaps += 1
                    if m == i:
                        m = j
                    i += 1
            if i != m and lt(v[m], v[i]):
                self._swap(i, m)
                swaps += 1
            if swaps == 0:
                left_done = self._nearly_sorted(first, i)
                if self._nearly_sorted(i + 1, last):
                    if left_done:
                        return
                    last = i
                    continue
                if left_done:
                    first = i + 1
                    continue
            if i - first < last - i:
                self.sort(first, i)
                first = i + 1
            else:
                self.sort(i + 1, last)
                last = i


def _has_ties(*keys: np.ndarray) -> bool:
    rows = np.stack([np.asarray(k, np.float64) for k in keys], axis=1)
    return np.unique(rows, axis=0).shape[0] != rows.shape[0]


def sort_desc(keys: np.ndarray) -> np.ndarray:
    """Permutation ordering ``keys`` by descending value as the reference's
    std::sort(ids, [](a, b) { return key[a] > key[b]; }) does."""
    keys = np.asarray(keys, np.float64)
    if not np.isnan(keys).any() and (keys.size <= _SMALL_SORT or not _has_ties(keys)):
        return np.argsort(-keys, kind="stable")
    ids = list(range(keys.size))
    k = keys.tolist()
    _TieSort(ids, lambda a, b: k[a] > k[b]).sort(0, len(ids))
    return np.asarray(ids, np.int64)


def sort_rows_desc(keys: np.ndarray) -> np.ndarray:
    """:func:`sort_desc` of every row of a 2-D array."""
    keys = np.asarray(keys, np.float64)
    if keys.shape[1] <= _SMALL_SORT and not np.isnan(keys).any():
        return np.argsort(-keys, axis=1, kind="stable")
    return np.stack([sort_desc(row) for row in keys]) if keys.shape[0] else np.zeros(keys.shape, np.int64)


def sort_class_then_desc(classes: np.ndarray, keys: np.ndarray) -> np.ndarray:
    """Permutation ordering by class, then by descending key within a class
    (the reference's second std::sort of BOX_WITH_NMS_LIMIT)."""
    keys = np.asarray(keys, np.float64)
    classes = np.asarray(classes, np.int64)
    if not np.isnan(keys).any() and (keys.size <= _SMALL_SORT or not _has_ties(classes, keys)):
        return np.lexsort((-keys, classes))
    ids = list(range(keys.size))
    k, c = keys.tolist(), classes.tolist()
    _TieSort(ids, lambda a, b: k[a] > k[b] if c[a] == c[b] else c[a] < c[b]).sort(0, len(ids))
    return np.asarray(ids, np.int64)


def max_element(a: np.ndarray, axis: int = -1) -> np.ndarray:
    """Index of std::max_element along ``axis``: the first maximum, where a
    NaN wins only in first position (every comparison with NaN is false)."""
    a = np.asarray(a)
    if not np.issubdtype(a.dtype, np.floating):
        return np.argmax(a, axis=axis)
    first_nan = np.isnan(np.take(a, [0], axis=axis))
    idx = np.argmax(np.where(np.isnan(a), -np.inf, a), axis=axis)
    return np.where(np.squeeze(first_nan, axis=axis), 0, idx)


def _partition_kept(rest: np.ndarray, keep: np.ndarray) -> np.ndarray:
    """The kept part of ``rest`` after the reference's in-place pass that
    swaps every suppressed element with the last unexamined one.

    Kept elements in the first ``K`` positions (K = number kept) stay where
    they are; the holes left there by suppressed ones are filled, in order,
    by the kept elements beyond ``K`` taken from the back."""
    k = int(np.count_nonzero(keep))
    out = rest[:k].copy()
    holes = np.flatnonzero(~keep[:k])
    if holes.size:
        out[holes] = rest[k:][keep[k:]][::-1]
    return out


def iou_one_to_many(box: np.ndarray, boxes: np.ndarray) -> np.ndarray:
    """Intersection over union of one [x1, y1, x2, y2] box with many (float32)."""
    area1 = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    area2 = (box[2] - box[0]) * (box[3] - box[1])
    x1 = np.maximum(boxes[:, 0], box[0])
    x2 = np.minimum(boxes[:, 2], box[2])
    y1 = np.maximum(boxes[:, 1], box[1])
    y2 = np.minimum(boxes[:, 3], box[3])
    w = np.maximum(x2 - x1, F32(0))
    h = np.maximum(y2 - y1, F32(0))
    inter = w * h
    union = area1 + area2 - inter
    with np.errstate(divide="ignore", invalid="ignore"):
        return (inter / union).astype(F32)


# kernel(iou) -> score multiplier, for the soft NMS variants
SoftKernel = Callable[[np.ndarray], np.ndarray]


def nms_kernel(kind: int, iou_threshold: float, sigma: float) -> SoftKernel:
    """BOX_WITH_NMS_LIMIT's kernels: 0 hard, 1 linear, 2 gaussian."""
    thr = F32(iou_threshold)
    sig = F32(sigma)
    if kind == 0:
        return lambda iou: np.where(iou < thr, F32(1), F32(0))
    if kind == 1:
        return lambda iou: np.where(iou < thr, F32(1), F32(1) - iou).astype(F32)
    if kind == 2:
        def gaussian(iou: np.ndarray) -> np.ndarray:
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                return expf(F32(-1) * iou * iou / sig)
        return gaussian
    raise KernelError(f"unsupported NMS kernel {kind}")


def _first_max(v: np.ndarray) -> int:
    """:func:`max_element` of a 1-D array: numpy's argmax (the first maximum)
    unless it lands on a NaN (numpy's maximum), where the reference's rule decides."""
    m = int(v.argmax())
    if v[m] != v[m]:
        return int(max_element(v))
    return m


def nms_single_class(scores: np.ndarray, boxes: np.ndarray, candidates: np.ndarray, max_detections: int,
                     iou_threshold: float, soft: SoftKernel | None = None,
                     score_threshold: float = 0.0) -> np.ndarray:
    """Greedy NMS over ``candidates`` (indices into ``scores``; ``boxes[i]``
    is candidate index i's box).  Hard NMS drops boxes with IoU >= threshold;
    with ``soft``, scores are multiplied (in place) by ``soft(iou)`` and boxes
    whose score falls below ``score_threshold`` are dropped.  Returns the
    selected indices in selection order."""
    cand = np.array(candidates, dtype=np.int64)
    if max_detections < 0:
        max_detections = cand.size
    out: list[int] = []
    if not cand.size or max_detections <= 0:
        return np.asarray(out, dtype=np.int64)
    thr = F32(iou_threshold)
    sthr = F32(score_threshold)
    # NOTE: the candidates' scores, box coordinates and areas gathered once (by position in cand), as
    # iou_one_to_many computes them: each step then gathers only what it compares
    sc = scores[cand]
    b = boxes[cand]
    x1, y1, x2, y2 = (np.ascontiguousarray(b[:, k]) for k in range(4))
    areas = (x2 - x1) * (y2 - y1)
    zero = F32(0)
    sel = np.arange(cand.size, dtype=np.int64)
    while sel.size and len(out) < max_detections:
        deadline.poll()  # NOTE: greedy NMS is one Python step per kept box: the deadline ends it
        m = _first_max(sc[sel])
        sel[0], sel[m] = sel[m], sel[0]
        best = int(sel[0])
        rest = sel[1:]
        if rest.size:
            w = np.maximum(np.minimum(x2[rest], x2[best]) - np.maximum(x1[rest], x1[best]), zero)
            h = np.maximum(np.minimum(y2[rest], y2[best]) - np.maximum(y1[rest], y1[best]), zero)
            inter = w * h
            union = areas[rest] + areas[best] - inter
            with np.errstate(divide="ignore", invalid="ignore"):
                iou = (inter / union).astype(F32)
            if soft is None:
                keep = ~(iou >= thr)
            else:
                new = (sc[rest] * soft(iou)).astype(sc.dtype)
                sc[rest] = new
                keep = ~(new < sthr)
            rest = _partition_kept(rest, keep)
        out.append(best)
        sel = rest
    if soft is not None:
        scores[cand] = sc
    return cand[np.asarray(out, dtype=np.int64)]


def nms_multi_class(scores: np.ndarray, boxes: np.ndarray, num_classes: int, score_threshold: float,
                    max_detections: int, max_per_class: int, iou_threshold: float,
                    soft: SoftKernel | None = None, nms_score_threshold: float = 0.0) -> np.ndarray:
    """Per-class NMS over a flat [num_rois * num_classes] score array (class 0,
    the background, excluded), then the best ``max_detections`` overall.
    ``boxes`` is indexed by the flat score index.  Returns flat indices."""
    num_rois = scores.size // num_classes
    sthr = F32(score_threshold)
    selected = []
    for c in range(1, num_classes):
        deadline.poll()
        idx = np.arange(num_rois, dtype=np.int64) * num_classes + c
        cand = idx[scores[idx] > sthr]
        selected.append(nms_single_class(scores, boxes, cand, max_per_class, iou_threshold, soft,
                                         nms_score_threshold))
    sel = np.concatenate(selected) if selected else np.zeros(0, np.int64)
    sel = sel[sort_desc(scores[sel])]
    if max_detections >= 0:
        sel = sel[:max_detections]
    return sel


# --------------------------------------------------------------------------
# AXIS_ALIGNED_BBOX_TRANSFORM


def bbox_transform(rois: np.ndarray, deltas: np.ndarray, batches: np.ndarray, image_info: np.ndarray) -> np.ndarray:
    """Applies [dx, dy, dw, dh] deltas (rois [n, 4], deltas [n, classes * 4])
    and clips to each image's [height, width]; returns [n, classes * 4]."""
    n = rois.shape[0]
    num_classes = deltas.shape[1] // 4 if deltas.ndim == 2 else 0
    if n == 0:
        return np.zeros((0, num_classes * 4), F32)
    num_batches = image_info.shape[0]
    b = batches.astype(np.int64)
    if np.any((b < 0) | (b >= num_batches)):
        raise KernelError("batch index out of range")
    rois = rois.astype(F32)
    if np.any(~(rois[:, 0] <= rois[:, 2])) or np.any(~(rois[:, 1] <= rois[:, 3])):
        raise KernelError("invalid region: x2 < x1 or y2 < y1")
    d = deltas.astype(F32).reshape(n, num_classes, 4)
    w = (rois[:, 2] - rois[:, 0])[:, None]
    h = (rois[:, 3] - rois[:, 1])[:, None]
    cx = ((rois[:, 0] + rois[:, 2]) / F32(2))[:, None]
    cy = ((rois[:, 1] + rois[:, 3]) / F32(2))[:, None]
    with np.errstate(over="ignore", invalid="ignore"):
        nw = expf(d[..., 2]) * w
        nh = expf(d[..., 3]) * h
        nx = cx + d[..., 0] * w
        ny = cy + d[..., 1] * h
        info = image_info.astype(F32)[b]
        img_h = info[:, 0:1]
        img_w = info[:, 1:2]
        out = np.empty((n, num_classes, 4), F32)
        out[..., 0] = np.minimum(np.maximum(nx - nw / F32(2), F32(0)), img_w)
        out[..., 1] = np.minimum(np.maximum(ny - nh / F32(2), F32(0)), img_h)
        out[..., 2] = np.minimum(np.maximum(nx + nw / F32(2), F32(0)), img_w)
        out[..., 3] = np.minimum(np.maximum(ny + nh / F32(2), F32(0)), img_h)
    return out.reshape(n, num_classes * 4)


# --------------------------------------------------------------------------
# ROI_ALIGN


def _roi_checks(rois: np.ndarray, batch_idx: np.ndarray, num_batches: int, in_h: int, in_w: int,
                h_scale: np.float32, w_scale: np.float32, raw_nonneg: bool = True) -> None:
    b = batch_idx.astype(np.int64)
    if np.any((b < 0) | (b >= num_batches)):
        raise KernelError("ROI batch index out of range")
    if raw_nonneg and np.any(~(rois >= 0)):
        raise KernelError("ROI coordinates must be non-negative")
    sx = rois[:, [0, 2]] * w_scale
    sy = rois[:, [1, 3]] * h_scale
    if np.any(~(sx <= in_w)) or np.any(~(sy <= in_h)):
        raise KernelError("ROI out of the input's bounds")
    if np.any(~(rois[:, 0] <= rois[:, 2])) or np.any(~(rois[:, 1] <= rois[:, 3])):
        raise KernelError("invalid ROI: x2 < x1 or y2 < y1")


def _sample_axis(start: np.ndarray, step: np.ndarray, ratio: int, out_n: int, size: int
                 ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Sampling positions along one axis for ROIs sharing a sampling ratio:
    returns (low index, high index, weight of the high index), each of shape
    [n, out_n, ratio]."""
    bin_size = step / F32(ratio)
    j = np.arange(out_n, dtype=F32)
    k = np.arange(ratio, dtype=F32)
    cell = step[:, None] * j[None, :] + start[:, None]                     # [n, out_n]
    pos = (cell[:, :, None] + (bin_size / F32(2))[:, None, None]) + bin_size[:, None, None] * k[None, None, :]
    pos = pos.astype(F32)
    lo = np.floor(pos).astype(np.int64)
    frac = (pos - lo.astype(F32)).astype(F32)
    edge = lo >= size - 1
    lo = np.where(edge, size - 1, lo)
    hi = np.where(edge, size - 1, lo + 1)
    frac = np.where(edge, F32(0), frac)
    return lo, hi, frac


def _roi_geometry(rois: np.ndarray, h_scale: np.float32, w_scale: np.float32, out_h: int, out_w: int,
                  h_ratio: int, w_ratio: int):
    """Per-ROI start, step and sampling ratio along each axis (float32)."""
    x1 = (rois[:, 0] * w_scale).astype(F32)
    y1 = (rois[:, 1] * h_scale).astype(F32)
    x2 = (rois[:, 2] * w_scale).astype(F32)
    y2 = (rois[:, 3] * h_scale).astype(F32)
    roi_w = np.maximum(x2 - x1, F32(1))
    roi_h = np.maximum(y2 - y1, F32(1))
    w_step = (roi_w / F32(out_w)).astype(F32)
    h_step = (roi_h / F32(out_h)).astype(F32)
    wr = np.full(len(rois), w_ratio, np.int64) if w_ratio > 0 else np.ceil(w_step).astype(np.int64)
    hr = np.full(len(rois), h_ratio, np.int64) if h_ratio > 0 else np.ceil(h_step).astype(np.int64)
    return x1, y1, w_step, h_step, wr, hr


# bound on the elements of one gathered block of samples (chunks of ROIs)
_GATHER_BUDGET = 1 << 22


def _roi_align_groups(in_h: int, in_w: int, depth: int, rois: np.ndarray, out_h: int, out_w: int,
                      h_scale: np.float32, w_scale: np.float32, h_ratio: int, w_ratio: int):
    """Yields (roi indices, ylo, yhi, yw, xlo, xhi, xw, hr, wr) per chunk of
    ROIs sharing sampling ratios (chunks bound the gathered samples' memory)."""
    x1, y1, w_step, h_step, wr, hr = _roi_geometry(rois, h_scale, w_scale, out_h, out_w, h_ratio, w_ratio)
    pairs = np.stack([hr, wr], axis=1)
    for h_r, w_r in np.unique(pairs, axis=0):
        group = np.flatnonzero((hr == h_r) & (wr == w_r))
        per_roi = out_h * int(h_r) * out_w * int(w_r) * depth
        step = max(1, _GATHER_BUDGET // max(per_roi, 1))
        for start in range(0, group.size, step):
            deadline.poll()
            idx = group[start:start + step]
            ylo, yhi, yf = _sample_axis(y1[idx], h_step[idx], int(h_r), out_h, in_h)
            xlo, xhi, xf = _sample_axis(x1[idx], w_step[idx], int(w_r), out_w, in_w)
            yield idx, ylo, yhi, yf, xlo, xhi, xf, int(h_r), int(w_r)


def _corners(x: np.ndarray, b: np.ndarray, ylo, yhi, yf, xlo, xhi, xf):
    """Yields, for each bilinear corner in the reference's order (y1x1,
    y1x2, y2x1, y2x2), its float32 weight [n, oh, hr, ow, wr] (computed as
    the reference does) and the input values there [n, oh, hr, ow, wr, C]."""
    bb = b[:, None, None, None, None]
    dy1 = yf[:, :, :, None, None]
    dx1 = xf[:, None, None, :, :]
    dy2 = F32(1) - dy1
    dx2 = F32(1) - dx1
    for yy, xx, wy, wx in ((ylo, xlo, dy2, dx2), (ylo, xhi, dy2, dx1), (yhi, xlo, dy1, dx2), (yhi, xhi, dy1, dx1)):
        yield (wx * wy).astype(F32), x[bb, yy[:, :, :, None, None], xx[:, None, None, :, :]]


def roi_align_float(x: np.ndarray, rois: np.ndarray, batch_idx: np.ndarray, out_h: int, out_w: int,
                    h_stride: float, w_stride: float, h_ratio: int, w_ratio: int) -> np.ndarray:
    """ROI_ALIGN on real values: x [N, H, W, C] -> [num_rois, out_h, out_w, C] (float64)."""
    n_b, in_h, in_w, c = x.shape
    rois = rois.astype(F32)
    h_scale = F32(F32(1) / F32(h_stride))
    w_scale = F32(F32(1) / F32(w_stride))
    _roi_checks(rois, batch_idx, n_b, in_h, in_w, h_scale, w_scale)
    out = np.zeros((rois.shape[0], out_h, out_w, c), np.float64)
    xv = x.astype(np.float64)
    for idx, ylo, yhi, yf, xlo, xhi, xf, h_r, w_r in _roi_align_groups(
            in_h, in_w, c, rois, out_h, out_w, h_scale, w_scale, h_ratio, w_ratio):
        acc = np.zeros((idx.size, out_h, out_w, c), np.float64)
        for w, vals in _corners(xv, batch_idx[idx].astype(np.int64), ylo, yhi, yf, xlo, xhi, xf):
            acc += np.einsum("nhawb,nhawbc->nhwc", w.astype(np.float64), vals)
        out[idx] = acc / (h_r * w_r)
    return out


def roi_align_quant(q: np.ndarray, zero_point: int, rois_q: np.ndarray, batch_idx: np.ndarray, out_h: int,
                    out_w: int, h_stride: float, w_stride: float, h_ratio: int, w_ratio: int,
                    in_scale: float, out_scale: float, out_zero_point: int, qmin: int, qmax: int,
                    requant: Callable[[np.ndarray, float], np.ndarray]) -> np.ndarray:
    """ROI_ALIGN on quantized input (uint16 ROIs in units of 1/8): bilinear
    weights quantized to 1/255, integer accumulation, then one requantization
    per ROI by ``requant(acc, real_multiplier)``."""
    n_b, in_h, in_w, c = q.shape
    h_scale = F32(F32(1) / F32(h_stride))
    w_scale = F32(F32(1) / F32(w_stride))
    # NOTE: the reference scales the raw coordinate by 1/stride first, then by 0.125
    rois = ((rois_q.astype(F32) * np.array([w_scale, h_scale, w_scale, h_scale], F32)).astype(F32)
            * F32(0.125)).astype(F32)
    b = batch_idx.astype(np.int64)
    if np.any((b < 0) | (b >= n_b)):
        raise KernelError("ROI batch index out of range")
    if np.any(~(rois[:, [0, 2]] <= in_w)) or np.any(~(rois[:, [1, 3]] <= in_h)):
        raise KernelError("ROI out of the input's bounds")
    if np.any(~(rois[:, 0] <= rois[:, 2])) or np.any(~(rois[:, 1] <= rois[:, 3])):
        raise KernelError("invalid ROI: x2 < x1 or y2 < y1")
    out = np.zeros((rois.shape[0], out_h, out_w, c), np.int64)
    xv = q.astype(np.int64) - zero_point
    w_unit = F32(F32(1) / F32(255))
    one = F32(1)
    for idx, ylo, yhi, yf, xlo, xhi, xf, h_r, w_r in _roi_align_groups(
            in_h, in_w, c, rois, out_h, out_w, one, one, h_ratio, w_ratio):
        acc = np.zeros((idx.size, out_h, out_w, c), np.int64)
        for w, vals in _corners(xv, b[idx], ylo, yhi, yf, xlo, xhi, xf):
            wq = round_half_away(w / w_unit).astype(np.int64)
            acc += np.einsum("nhawb,nhawbc->nhwc", wq, vals)
        real = F32(F32(F32(in_scale) * w_unit) / F32(out_scale)) / F32(h_r * w_r)
        out[idx] = requant(acc, float(real)) + out_zero_point
    return np.clip(out, qmin, qmax)


# --------------------------------------------------------------------------
# ROI_POOLING


def roi_pool(x: np.ndarray, rois: np.ndarray, batch_idx: np.ndarray, out_h: int, out_w: int,
             h_stride: float, w_stride: float, empty_value) -> np.ndarray:
    """ROI_POOLING (max over each bin) on x [N, H, W, C] in its storage
    dtype; rois are real [x1, y1, x2, y2].  Empty bins get ``empty_value``."""
    n_b, in_h, in_w, c = x.shape
    rois = rois.astype(F32)
    h_scale = F32(F32(1) / F32(h_stride))
    w_scale = F32(F32(1) / F32(w_stride))
    _roi_checks(rois, batch_idx, n_b, in_h, in_w, h_scale, w_scale)
    n = rois.shape[0]
    out = np.empty((n, out_h, out_w, c), x.dtype)
    if n == 0:
        return out
    sx = round_half_away((rois[:, [0, 2]] * w_scale).astype(F32)).astype(np.int64)
    sy = round_half_away((rois[:, [1, 3]] * h_scale).astype(F32)).astype(np.int64)
    roi_w = np.maximum(sx[:, 1] - sx[:, 0] + 1, 1).astype(F32)
    roi_h = np.maximum(sy[:, 1] - sy[:, 0] + 1, 1).astype(F32)
    w_step = roi_w / F32(out_w)
    h_step = roi_h / F32(out_h)
    jw = np.arange(out_w, dtype=F32)
    jh = np.arange(out_h, dtype=F32)
    ws = np.floor(w_step[:, None] * jw + sx[:, :1].astype(F32)).astype(np.int64)
    we = np.ceil(w_step[:, None] * (jw + 1) + sx[:, :1].astype(F32)).astype(np.int64)
    hs = np.floor(h_step[:, None] * jh + sy[:, :1].astype(F32)).astype(np.int64)
    he = np.ceil(h_step[:, None] * (jh + 1) + sy[:, :1].astype(F32)).astype(np.int64)
    ws, we = np.clip(ws, 0, in_w), np.clip(we, 0, in_w)
    hs, he = np.clip(hs, 0, in_h), np.clip(he, 0, in_h)
    floating = np.issubdtype(x.dtype, np.floating)
    if floating:
        low = np.array(-np.inf, x.dtype)
    else:
        low = np.array(np.iinfo(x.dtype).min, x.dtype)
    for r in range(n):
        deadline.poll()
        # NOTE: one ROI at a time (bins differ per ROI), on the window its bins cover,
        # vectorized over bins and channels
        h0, h1 = int(hs[r].min()), int(he[r].max())
        w0, w1 = int(ws[r].min()), int(we[r].max())
        empty = ~((he[r] > hs[r])[:, None] & (we[r] > ws[r])[None, :])
        if h1 <= h0 or w1 <= w0:
            out[r] = empty_value
            continue
        img = x[int(batch_idx[r]), h0:h1, w0:w1]                                       # [h, w, C]
        cols = np.arange(w0, w1)
        rows = np.arange(h0, h1)
        cmask = (cols[None, :] >= ws[r][:, None]) & (cols[None, :] < we[r][:, None])   # [ow, w]
        rmask = (rows[None, :] >= hs[r][:, None]) & (rows[None, :] < he[r][:, None])   # [oh, h]
        # NOTE: fmax skips NaN; the reference keeps a NaN only if it is a bin's first element
        colmax = np.fmax.reduce(np.where(cmask[None, :, :, None], img[:, None, :, :], low), axis=2)  # [h, ow, C]
        binmax = np.fmax.reduce(np.where(rmask[:, :, None, None], colmax[None, :, :, :], low), axis=1)
        if floating:
            first = x[int(batch_idx[r]), np.minimum(hs[r], in_h - 1)[:, None], np.minimum(ws[r], in_w - 1)[None, :]]
            binmax = np.where(np.isnan(first), first, binmax)
        binmax[empty] = empty_value
        out[r] = binmax
    return out


# --------------------------------------------------------------------------
# HEATMAP_MAX_KEYPOINT


def heatmap_max_keypoint(heatmap: np.ndarray, boxes: np.ndarray, atol: float, rtol: float
                         ) -> tuple[np.ndarray, np.ndarray]:
    """heatmap [n, S, S, K] (float32), boxes [n, 4] -> (scores [n, K],
    keypoints [n, K, 2]) with the quadratic (Taylor) refinement of the peak."""
    n, size, _, k = heatmap.shape
    boxes = boxes.astype(F32)
    if np.any(~(boxes[:, 0] <= boxes[:, 2])) or np.any(~(boxes[:, 1] <= boxes[:, 3])):
        raise KernelError("invalid box: x2 < x1 or y2 < y1")
    hm = heatmap.astype(F32)
    flat = hm.reshape(n, size * size, k)
    # NOTE: the reference scans from -FLT_MAX with a strict '<': the first maximum
    # wins, NaN never does, and a map with nothing above -FLT_MAX gives index 0
    lowest = F32(-np.finfo(F32).max)
    cleaned = np.where(np.isnan(flat) | (flat <= lowest), F32(-np.inf), flat)
    arg = np.argmax(cleaned, axis=1)                               # [n, K]
    max_score = np.take_along_axis(cleaned, arg[:, None, :], axis=1)[:, 0, :]
    max_score = np.where(max_score == -np.inf, lowest, max_score).astype(F32)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        return _refine_peak(hm, boxes, arg, max_score, size, atol, rtol)


def _refine_peak(hm: np.ndarray, boxes: np.ndarray, arg: np.ndarray, max_score: np.ndarray, size: int,
                 atol: float, rtol: float) -> tuple[np.ndarray, np.ndarray]:
    """The 2nd-order Taylor refinement around each peak (3x3 grid mirrored at
    the borders) and the keypoint position inside its box."""
    n, k = arg.shape
    mh = arg // size
    mw = arg % size

    def mirror(v: np.ndarray) -> np.ndarray:
        return np.where(v < 0, 1, np.where(v >= size, size - 2, v))

    ni = np.arange(n)[:, None]
    ki = np.arange(k)[None, :]
    # NOTE: the 3x3 neighbourhood of every peak in one gather: g[1 + dh][1 + dw] is [n, K]
    step = np.arange(-1, 2)[:, None, None]
    rows, cols = mirror(mh[None] + step), mirror(mw[None] + step)                  # [3, n, K] each
    g = hm[ni[None, None], rows[:, None], cols[None, :], ki[None, None]]          # [3, 3, n, K]
    two, half = F32(2), F32(0.5)
    b0 = -(g[1][2] - g[1][0]) / two
    b1 = -(g[2][1] - g[0][1]) / two
    a00 = g[1][0] - two * g[1][1] + g[1][2]
    a01 = (g[2][2] - g[2][0] - g[0][2] + g[0][0]) / F32(4)
    a11 = g[0][1] - two * g[1][1] + g[2][1]
    cross1 = a00 * a11
    det = cross1 - a01 * a01
    solvable = ~(np.abs(det) < (F32(atol) + F32(rtol) * cross1))
    d0 = (a11 * b0 - a01 * b1) / det
    d1 = (a00 * b1 - a01 * b0) / det
    big = (np.abs(d0) > F32(1.5)) | (np.abs(d1) > F32(1.5))
    scale = F32(1.5) / np.maximum(np.abs(d0), np.abs(d1))
    d0 = np.where(big, d0 * scale, d0)
    d1 = np.where(big, d1 * scale, d1)
    refined = g[1][1] - b0 * d0 - b1 * d1 + ((a00 * d0 + a01 * d1) * d0 + (a01 * d0 + a11 * d1) * d1) / two
    d0 = np.where(solvable, d0, F32(0)).astype(F32)
    d1 = np.where(solvable, d1, F32(0)).astype(F32)
    score = np.where(solvable, refined, max_score).astype(F32)
    x1, y1 = boxes[:, 0:1], boxes[:, 1:2]
    rw = boxes[:, 2:3] - x1
    rh = boxes[:, 3:4] - y1
    wpos = (mw.astype(F32) + d0 + half) / F32(size)
    hpos = (mh.astype(F32) + d1 + half) / F32(size)
    kp = np.stack([wpos * rw + x1, hpos * rh + y1], axis=2).astype(F32)
    return score, kp
