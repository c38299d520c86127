"""The conformance suite: the NNAPI generated test vectors as HAL models, a
runner over any IDevice (public API only) and its reports."""
