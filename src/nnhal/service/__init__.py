"""The driver as a service process: real IPC over Unix-domain sockets.

``nnhal serve --name NAME`` runs a driver (:mod:`nnhal.service.server`);
``nnhal.connect(NAME)`` returns a proxy HIDL ``IDevice``
(:mod:`nnhal.service.client`), ``nnhal.aidl.connect(NAME, version)`` the same
service's AIDL ``IDevice`` (:mod:`nnhal.service.aidl_client`,
:mod:`nnhal.service.aidl_server`).  Discovery is
:mod:`nnhal.service.registry`, framing and descriptor passing
:mod:`nnhal.service.transport`, the message schemas :mod:`nnhal.service.wire`
(HIDL, and the envelopes) and :mod:`nnhal.service.aidl_wire` (AIDL).
"""
