"""TFLite's graph partitioning as the NNAPI delegate uses it.

:func:`partition` is ``PartitionGraphIntoIndependentNodeSubsets``
(``tflite/graph_info.cc``, greedy, as ``PreviewDelegatePartitioning`` and
``ReplaceNodeSubsetsWithDelegateKernels`` call it): epochs of a traversal
in which every ready node of the epoch's kind (delegated or not) joins it,
the first ready node fixing the kind; a subset's inputs are the tensors it
reads from other subsets or the model, its outputs those other subsets read
and the model's outputs.  :func:`largest` is ``LimitDelegatedPartitions``
(``nnapi_delegate.cc``): beyond ``max_number_delegated_partitions`` only the
largest delegated subsets stay delegated.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

_NOT_READY, _ALWAYS = -1, -2


@dataclass
class Subset:
    delegated: bool
    nodes: list[int] = field(default_factory=list)
    inputs: list[int] = field(default_factory=list)
    outputs: list[int] = field(default_factory=list)


def partition(node_inputs: Sequence[Sequence[int]], node_outputs: Sequence[Sequence[int]], n_tensors: int,
              delegated: set[int], model_outputs: Sequence[int] = ()) -> list[Subset]:
    """The node subsets, in execution order (see the module docstring)."""
    n = len(node_inputs)
    tensor_epoch = [_ALWAYS] * n_tensors
    for outs in node_outputs:
        for k in outs:
            if k >= 0:
                tensor_epoch[k] = _NOT_READY
    node_epoch = [_NOT_READY] * n
    subsets: list[Subset] = []
    while True:
        cur: Subset | None = None
        epoch = len(subsets)
        progress = True
        while progress:
            progress = False
            for i in range(n):
                if node_epoch[i] != _NOT_READY:
                    continue
                if any(k >= 0 and tensor_epoch[k] == _NOT_READY for k in node_inputs[i]):
                    continue
                kind = i in delegated
                if cur is None:
                    cur = Subset(kind)
                    subsets.append(cur)
                if cur.delegated != kind:
                    continue
                node_epoch[i] = epoch
                cur.nodes.append(i)
                for k in node_outputs[i]:
                    if k >= 0:
                        tensor_epoch[k] = epoch
                for k in node_inputs[i]:
                    if k >= 0 and tensor_epoch[k] != epoch:
                        cur.inputs.append(k)
                        if tensor_epoch[k] >= 0:
                            subsets[tensor_epoch[k]].outputs.append(k)
                progress = True
        if cur is None:
            break
    if any(e == _NOT_READY for e in node_epoch):
        raise ValueError("the graph has a cycle or reads a tensor no operator writes")
    for k in model_outputs:
        if 0 <= k < n_tensors and tensor_epoch[k] >= 0:
            subsets[tensor_epoch[k]].outputs.append(k)
    for s in subsets:
        s.inputs = sorted(set(s.inputs))
        s.outputs = sorted(set(s.outputs))
    return subsets


def largest(subsets: Sequence[Subset], max_partitions: int) -> set[int]:
    """The nodes that stay delegated under ``LimitDelegatedPartitions(max_partitions)`` (0 or less: no
    limit); ties in size keep the earlier subset (the delegate's sort leaves their order open)."""
    delegated = [s for s in subsets if s.delegated]
    if max_partitions <= 0 or len(delegated) <= max_partitions:
        return {i for s in delegated for i in s.nodes}
    keep = sorted(delegated, key=lambda s: -len(s.nodes))[:max_partitions]
    return {i for s in keep for i in s.nodes}
