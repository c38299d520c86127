"""(family module; operations to come)."""

from nnhal.ops.base import OpDef

OPS: list[OpDef] = []
