"""The reference engine under the HAL front end: model and request validation
(``validation``), the executor that runs a model over the operation registry
(``executor``: a subgraph, IF / WHILE included) and the capability timing
(``capabilities``).  Imports ``nnhal.ops``, ``nnhal.platform``, ``nnhal.hal``."""
