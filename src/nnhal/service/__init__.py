"""The driver as a service process: real IPC over Unix-domain sockets.

``nnhal serve --name NAME`` runs a driver (:mod:`nnhal.service.server`);
``nnhal.connect(NAME)`` returns a proxy ``IDevice`` (:mod:`nnhal.service.client`).
Discovery is :mod:`nnhal.service.registry`, framing and descriptor passing
:mod:`nnhal.service.transport`, the message schema :mod:`nnhal.service.wire`.
"""
