"""The VTS sections ``nnhal vts`` runs, in order (no imports: the command line
reads them without loading numpy)."""

# NOTE: the order of a run (VTS's functional sections; the cheap device checks first)
SECTIONS = ("basic", "generated", "model", "request", "burst", "memory", "caching", "qos")
PER_MODEL = ("generated", "model", "request", "burst", "qos")
# NOTE: opt-in (--section random): not part of a plain run, which stays VTS 1.3's fixed suite
OPT_IN = ("random",)
DESCRIPTIONS = {
    "basic": "BasicTests: status, capabilities, version, type, extensions, cache files, cycles",
    "generated": "GeneratedTestHarness: the vector models in every executor, dynamic shapes, "
                 "quant8 signed coupling, device memory",
    "model": "ValidateModel: every model mutated, each must be rejected",
    "request": "ValidateRequest: requests with an input or output removed (every executor), invalid fences",
    "burst": "ValidateBurst: burst packets with a datum removed, added or replaced; result queue; padding "
             "(AIDL: IBurst memory identifier tokens)",
    "memory": "MemoryDomainTests: allocate, copyFrom / copyTo, executions with device memory",
    "caching": "CompilationCachingTests: save / load, bad handles, TOCTOU, corrupted caches and tokens",
    "qos": "QualityOfServiceTests: priorities and deadlines for prepare and execute",
    "random": "random models (Android's RandomGraphTest): the device against the reference, every executor, "
              "failures shrunk to the smallest model",
}
