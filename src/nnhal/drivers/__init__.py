"""The backends under the shared HAL front end (``nnhal.driver``): ``sample``
(the numpy executor: ``sample-all``) and ``litert`` (models lowered to LiteRT
with XNNPACK: ``litert-cpu``)."""
