"""Android API levels as the NNAPI delegate and Android's runtime see them:
the runtime's NNAPI feature level, the level the delegate's ``Validate`` is
called with, the level its NNAPI model is built at, the HAL interface the
partitions travel through, and how the delegate executes them.

Each step is the delegate's (TFLite's ``nnapi_delegate.cc`` and
``nnapi/nnapi_implementation.cc``, :data:`nnhal.delegate.rules.SOURCE`), with
its line:

- the runtime feature level (``nnapi_runtime_feature_level``,
  nnapi_implementation.cc:427-431): ``ANeuralNetworks_getRuntimeFeatureLevel()``
  where the runtime has it (Android 12 on), else the API level.  Android 12
  and 12L (API 31, 32) are feature level 5 (31), 13 (33) level 6 (1000006),
  14 (34) level 7, 15 (35) level 8 (``ANEURALNETWORKS_FEATURE_LEVEL_5..8``,
  NeuralNetworksTypes.h:265-271);
- the level ``Validate`` is called with (``DoPrepare``): the Android API level
  itself (nnapi_delegate.cc:6842), replaced from API 29, when the delegate
  targets devices (an accelerator named, or ``disallow_nnapi_cpu``:
  ``ShouldUseTargetDevices``, 6849), by ``GetTargetFeatureLevel`` (6865): the
  runtime feature level (654), lowered to the highest feature level of the
  target devices when that is lower (664-678).  So without target devices
  (``--allow-nnapi-cpu``) API 33 validates at 33, below feature level 6
  (1000006), and no rule of a later feature level passes;
- the level the NNAPI model is built at (``NNAPIDelegateKernel::Init``'s
  ``target_feature_level_``, 5608-5611): the runtime feature level, lowered
  to the target devices' as above; below feature level 6 PACK is lowered to
  CONCATENATION + RESHAPE (5654-5659), the new operations of levels 6 and 7
  are sent as themselves;
- the HAL interface of the partitions (what Android's runtime speaks to the
  driver): HIDL 1.0-1.3 for levels 1-4, AIDL versions 1-4 for levels 5-8 (a
  device that has no AIDL face, or an older one, caps it: its feature level
  is its interface's);
- how a partition executes (``NNAPIDelegateKernel::Prepare`` / ``Invoke``):
  with target devices at feature levels 5-7 through a burst (4791-4795);
  from the runtime feature level 5 executions are reusable (4883-4885), so at
  level 8 (AIDL version 4) the runtime keeps an ``IExecution``
  (``createReusableExecution``), below it sends the request each time
  (``executeSynchronously``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from nnhal.hal.types import HalVersion
from nnhal.runtime.face import interface_name

V = HalVersion
API_LEVELS = tuple(range(27, 36))
NNAPI11, NNAPI12, NNAPI13 = 28, 29, 30  # kMinSdkVersionForNNAPI11..13 (nnapi_delegate_kernel.h:42-44)
LEVEL5, LEVEL6, LEVEL7, LEVEL8 = 31, 1000006, 1000007, 1000008  # kNNAPIRuntimeFeatureLevel5..8 (:45-48)

# the NNAPI feature level of each interface version (ANeuralNetworksDevice_getFeatureLevel of a driver serving it)
FEATURE_LEVEL: dict[HalVersion, int] = {V.V1_0: 27, V.V1_1: NNAPI11, V.V1_2: NNAPI12, V.V1_3: NNAPI13,
                                        V.AIDL_V1: LEVEL5, V.AIDL_V2: LEVEL6, V.AIDL_V3: LEVEL7, V.AIDL_V4: LEVEL8}
_VERSION_OF_LEVEL = {level: v for v, level in FEATURE_LEVEL.items()}

# where each step is decided (nnapi_delegate.cc unless named)
RUNTIME_LINE = "nnapi_implementation.cc:427-431"
VALIDATE_API_LINE = 6842  # DoPrepare: int target_feature_level = nnapi->android_sdk_version
TARGET_DEVICES_LINE = 6849  # ShouldUseTargetDevices
TARGET_LEVEL_LINE = 6865  # GetTargetFeatureLevel
DEVICE_LEVEL_LINE = 678  # lowered to the devices' feature level
BUILD_LEVEL_LINE = 5608  # Init: target_feature_level_ = nnapi_runtime_feature_level
BURST_LINE = 4792  # feature levels 5-7 with target devices: burst
REUSABLE_LINE = 4884  # reusable executions from runtime feature level 5


def check_api(api: int) -> None:
    """ValueError for an API level nnhal does not plan for."""
    if api not in API_LEVELS:
        raise ValueError(f"--android-api {api}: give one of {API_LEVELS[0]}..{API_LEVELS[-1]}")


def runtime_feature_level(api: int) -> int:
    """``nnapi_runtime_feature_level`` on Android API ``api`` (see the module doc)."""
    check_api(api)
    if api < 31:
        return api
    return {31: LEVEL5, 32: LEVEL5, 33: LEVEL6, 34: LEVEL7}.get(api, LEVEL8)


def version_of(level: int) -> HalVersion:
    """The newest HAL interface a feature level (or an API level below 31) has."""
    if level in _VERSION_OF_LEVEL:
        return _VERSION_OF_LEVEL[level]
    if level >= LEVEL8:
        return V.AIDL_V4
    # NOTE: an API level of Android 12 on that is no feature level (32..35 used as one): feature level 5's
    return V.AIDL_V1 if level >= LEVEL5 else _VERSION_OF_LEVEL[max(27, min(level, NNAPI13))]


def level_name(level: int) -> str:
    """"API 30 (feature level 4)", "feature level 6 (1000006)", "API 33 (below feature level 6)"."""
    if level <= NNAPI13:
        return f"API {level} (feature level {level - 26})"
    if level == LEVEL5:
        return "feature level 5 (31)"
    if level in (LEVEL6, LEVEL7, LEVEL8):
        return f"feature level {level - 1000000} ({level})"
    return f"API {level} (as a level: below feature level 6, {LEVEL6})"


@dataclass(frozen=True)
class Levels:
    """The delegate's levels for one plan (see the module doc)."""

    api: int
    runtime: int  # nnapi_runtime_feature_level
    validate: int  # what Validate is called with
    build: int  # target_feature_level_ of the NNAPI model
    version: HalVersion  # the partitions' HAL interface
    execution: str  # "sync" | "burst" | "reusable"
    why: str  # which lines decided the Validate level

    def describe(self) -> str:
        sync = "IPreparedModel.executeSynchronously" if self.version >= V.AIDL_V1 else "executeSynchronously_1_3"
        how = {"sync": f"each execution sending its request ({sync})",
               "burst": f"through a burst (IBurst: target devices at feature levels 5-7, nnapi_delegate.cc:{BURST_LINE})",
               "reusable": f"as a reusable execution (IExecution: executions reusable from feature level 5, "
                           f"nnapi_delegate.cc:{REUSABLE_LINE}, kept by the runtime from AIDL v4)"}[self.execution]
        return (f"runtime {level_name(self.runtime)}; Validate at {level_name(self.validate)} ({self.why}); "
                f"NNAPI partitions as {interface_name(self.version)}, executed {how}")


def levels(api: int, target_devices: bool, device_versions: Iterable[HalVersion]) -> Levels:
    """The levels on Android ``api`` when the delegate targets devices (``ShouldUseTargetDevices``) or
    not, the devices serving at most ``device_versions`` (the NNAPI partitions' devices)."""
    runtime = runtime_feature_level(api)
    versions = list(device_versions)
    device = max((FEATURE_LEVEL[v] for v in versions), default=0)
    targeted = target_devices and api >= NNAPI12
    capped = min(runtime, device) if device > 0 else runtime
    if targeted:
        validate = capped
        why = (f"target devices (nnapi_delegate.cc:{TARGET_DEVICES_LINE}): GetTargetFeatureLevel "
               f"({TARGET_LEVEL_LINE}), the runtime's level"
               + (f" lowered to the devices' (:{DEVICE_LEVEL_LINE})" if capped < runtime else ""))
    else:
        validate = api
        why = f"no target devices: the API level itself (nnapi_delegate.cc:{VALIDATE_API_LINE})"
    build = capped if targeted else runtime
    # NOTE: the partitions go to the device nnhal runs them on: its newest interface caps the model's
    version = min(version_of(build), version_of(device) if device > 0 else version_of(build))
    if FEATURE_LEVEL[version] >= LEVEL8:
        execution = "reusable"
    elif targeted and LEVEL5 <= build <= LEVEL7:
        execution = "burst"
    else:
        execution = "sync"
    return Levels(api, runtime, validate, min(build, FEATURE_LEVEL[version]), version, execution, why)
